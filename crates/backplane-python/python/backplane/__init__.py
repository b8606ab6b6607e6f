"""backplane: a neural-network inference runtime with pluggable backends.

The session API follows ONNX Runtime's, so that a script switches by changing its import
and its provider names::

    import backplane as rt            # instead of: import onnxruntime as rt

    session = rt.InferenceSession("model.onnx", providers=["CpuAcc", "CpuRef"])
    name = session.get_inputs()[0].name
    (probabilities,) = session.run(None, {name: images})

``providers`` lists backplane's backends in order of preference: each layer runs on the
first that supports it. ``rt.get_available_providers()`` lists them and
``rt.backends()`` describes them (version, static or dynamic, capabilities).

``rt.DynamicNetwork`` serves one loaded model for every input shape its signature allows (a
plan per set of symbol values, kept in a bounded cache; ``stats()`` counts hits and misses)::

    net = rt.DynamicNetwork("encoder.onnx")
    for ids in batches:                # any sequence length
        (hidden,) = net.run(None, {"input_ids": ids})
    print(net.stats())                 # {"size": ..., "hits": ..., "misses": ..., ...}
"""

from ._backplane import (
    DEFAULT_PROVIDERS,
    MAX_SPECIALIZATIONS,
    BackendInfo,
    BackplaneError,
    DynamicNetwork,
    Fail,
    InferenceSession,
    InvalidArgument,
    InvalidGraph,
    NodeArg,
    NoSuchFile,
    SessionOptions,
    Unsupported,
    __version__,
    backends,
    get_available_providers,
)

__all__ = [
    "DEFAULT_PROVIDERS",
    "MAX_SPECIALIZATIONS",
    "BackendInfo",
    "BackplaneError",
    "DynamicNetwork",
    "Fail",
    "InferenceSession",
    "InvalidArgument",
    "InvalidGraph",
    "NodeArg",
    "NoSuchFile",
    "SessionOptions",
    "Unsupported",
    "__version__",
    "backends",
    "get_available_providers",
    "get_device",
]


def get_device() -> str:
    """The device the runtime targets, as ONNX Runtime's function of that name: ``"CPU"``."""
    return "CPU"

"""Type stubs of backplane's native module (re-exported by the ``backplane`` package)."""

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union, final

import numpy as np

__all__ = [
    "BackplaneError",
    "InvalidArgument",
    "NoSuchFile",
    "InvalidGraph",
    "Unsupported",
    "Fail",
    "InferenceSession",
    "DynamicNetwork",
    "NodeArg",
    "SessionOptions",
    "BackendInfo",
    "backends",
    "get_available_providers",
    "__version__",
    "DEFAULT_PROVIDERS",
    "MAX_SPECIALIZATIONS",
]
__version__: str
#: The default provider list: ``["CpuAcc", "CpuRef"]``.
DEFAULT_PROVIDERS: List[str]
#: The most networks (one per set of input shapes) a session keeps loaded.
MAX_SPECIALIZATIONS: int

class BackplaneError(Exception):
    """Base class of every error backplane raises."""

class InvalidArgument(BackplaneError, ValueError):
    """A wrong argument: an unknown or missing input or output name, an input of the wrong
    dtype or shape, an unknown backend or option."""

class NoSuchFile(BackplaneError, FileNotFoundError):
    """The model file does not exist."""

class InvalidGraph(BackplaneError):
    """The model is not a valid ONNX model."""

class Unsupported(BackplaneError, NotImplementedError):
    """The model uses an operator, attribute or data type that backplane, or none of the
    preferred backends, supports."""

class Fail(BackplaneError, RuntimeError):
    """An import, a backend or an execution failed."""

@final
class NodeArg:
    """A graph input or output."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str:
        """ONNX Runtime's type string, e.g. ``"tensor(float)"``."""
    @property
    def shape(self) -> List[Union[int, str, None]]:
        """Ints for fixed dimensions, strings for symbolic ones, ``None`` for unnamed unknown
        ones; ``[]`` when the model declares no shape."""

@final
class SessionOptions:
    """Options of an :class:`InferenceSession`, read when the session is created."""

    #: Threads per operator for backends that use several (CpuAcc); 0: every hardware thread.
    intra_op_num_threads: int
    #: Load dynamic backends from this directory only (instead of the build-time ones).
    dynamic_backends_path: Optional[Union[str, os.PathLike[str]]]
    #: ``False``: load no dynamic backend.
    use_dynamic_backends: bool
    #: Fail a Loop after this many iterations (``None``: 2**24).
    max_loop_iterations: Optional[int]
    #: ``{layer name or op type: backend}``, tried before the providers.
    layer_backends: Dict[str, str]

    def __new__(cls) -> SessionOptions: ...
    def add_layer_backend(self, layer: str, backend: str) -> None:
        """Run the layer named ``layer`` (or every layer of op type ``layer``) on ``backend``
        first."""
    def add_free_dimension_override_by_name(self, dim_name: str, value: int) -> None:
        """Give the symbolic dimension ``dim_name`` a fixed value."""
    @property
    def free_dimension_overrides(self) -> Dict[str, int]: ...

@final
class BackendInfo:
    """A registered backend."""

    @property
    def id(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def api_version(self) -> str: ...
    @property
    def kind(self) -> str:
        """``"static"`` or ``"dynamic"``."""
    @property
    def file(self) -> Optional[str]:
        """The shared object of a dynamic backend."""
    @property
    def capabilities(self) -> Dict[str, Union[bool, int, str]]: ...

_Provider = Union[str, Tuple[str, Mapping[str, Any]]]

@final
class InferenceSession:
    """A model loaded for inference, like ONNX Runtime's ``InferenceSession``."""

    def __new__(
        cls,
        path_or_bytes: Union[str, bytes, os.PathLike[str]],
        sess_options: Optional[SessionOptions] = None,
        providers: Optional[Sequence[_Provider]] = None,
        provider_options: Optional[Sequence[Mapping[str, Any]]] = None,
        *,
        options: Optional[SessionOptions] = None,
    ) -> InferenceSession: ...
    def get_inputs(self) -> List[NodeArg]: ...
    def get_outputs(self) -> List[NodeArg]: ...
    def get_providers(self) -> List[str]: ...
    def get_provider_options(self) -> Dict[str, Dict[str, str]]: ...
    def get_session_options(self) -> SessionOptions: ...
    def get_specializations(self) -> List[Dict[str, Any]]:
        """The networks loaded so far, one per set of input shapes (and bound input values):
        ``input_shapes``, ``bound_inputs`` and ``layers`` (layers per backend)."""
    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: None = None,
    ) -> List[np.ndarray]:
        """Run the model on ``input_feed`` (``{input name: array}``); returns the outputs
        named in ``output_names`` (all of them when ``None``) as NumPy arrays. The GIL is
        released while the network runs."""

@final
class DynamicNetwork:
    """One loaded model run on inputs of any shape its signature allows: a plan per set of
    symbol values, kept in a bounded cache; data-dependent shapes run through cut plans."""

    def __new__(
        cls,
        path_or_bytes: Union[str, bytes, os.PathLike[str]],
        sess_options: Optional[SessionOptions] = None,
        providers: Optional[Sequence[_Provider]] = None,
        provider_options: Optional[Sequence[Mapping[str, Any]]] = None,
        *,
        capacity: int = 8,
        node_cache: int = 8,
        max_memory: Optional[int] = None,
    ) -> DynamicNetwork: ...
    def get_inputs(self) -> List[NodeArg]: ...
    def get_outputs(self) -> List[NodeArg]: ...
    def signature(self) -> Dict[str, Dict[str, Optional[List[Union[int, str]]]]]:
        """``{"inputs": {name: dims}, "outputs": {name: dims}}``; a dimension is an int or a
        symbolic expression (``"seq"``, ``"batch*seq"``)."""
    def stats(self) -> Dict[str, int]:
        """The plan cache's counts: ``size``, ``capacity``, ``networks``, ``hits``,
        ``misses``, ``evictions``, ``bytes`` (the plans' working memory), ``optimizer_runs``,
        ``plans_reshaped`` (plans built by replaying an earlier plan's optimization of the same
        structure, not counted in ``optimizer_runs``), ``same_structure`` (optimizer runs whose
        import had an earlier plan's structure: a replay refused) and ``same_decisions`` (of
        those, the runs that decided what that plan's optimizer did)."""
    def kept_weight_bytes(self) -> int:
        """Initializer bytes the model kept for imports still holds (0 once the first plan is built)."""
    def total_stats(self) -> Dict[str, int]:
        """:meth:`stats` summed over the nested networks serving the rest after each cut."""
    def support_queries(self) -> Optional[Dict[str, int]]:
        """Backend-support queries of its plans: ``asked``, ``replayed`` (answers that hold at
        every shape, given again without asking), ``kept``; None when plans share none."""
    def runtime_stats(self) -> Dict[str, Any]:
        """The runtime's totals over every plan cache it serves: ``networks``, ``plans`` and
        ``nodes`` (dicts of entries, bytes, hits, misses, evictions), ``optimizer_runs``,
        ``plans_reshaped``, ``held_bytes`` (the caches' bytes against the shared memory budget)."""
    def node_stats(self) -> Dict[str, int]:
        """The cut nodes' import cache: size, capacity_per_node, hits, misses, evictions, bytes."""
    def total_node_stats(self) -> Dict[str, int]:
        """:meth:`node_stats` summed over the nested networks too."""
    def cuts(self) -> List[Dict[str, str]]:
        """The nodes plans were cut at: ``{"node": label, "op_type": op}``."""
    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
    ) -> List[np.ndarray]:
        """Run the model on ``input_feed`` (every input, any shape that fits); returns the
        outputs named in ``output_names`` (all of them when ``None``). The GIL is released
        while the model runs."""

def backends(options: Optional[SessionOptions] = None) -> List[BackendInfo]:
    """Every registered backend, static and dynamic."""

def get_available_providers(options: Optional[SessionOptions] = None) -> List[str]:
    """The backends a session can be given as providers."""

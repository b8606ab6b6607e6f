"""A minimal ONNX model writer for the tests: the protobuf encoding of the few ModelProto
fields they need, so the tests depend on neither the onnx package nor protobuf."""

from __future__ import annotations

import struct
from typing import Iterable, Optional, Sequence, Union

import numpy as np

# TensorProto.DataType codes.
FLOAT, UINT8, INT8, INT32, INT64, BOOL, DOUBLE = 1, 2, 3, 6, 7, 9, 11
NUMPY_CODES = {
    np.dtype(np.float32): FLOAT,
    np.dtype(np.uint8): UINT8,
    np.dtype(np.int8): INT8,
    np.dtype(np.int32): INT32,
    np.dtype(np.int64): INT64,
    np.dtype(np.bool_): BOOL,
    np.dtype(np.float64): DOUBLE,
}


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64 values are ten-byte varints
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _int(field: int, value: int) -> bytes:
    return _key(field, 0) + _varint(value)


def _bytes(field: int, value: Union[bytes, str]) -> bytes:
    if isinstance(value, str):
        value = value.encode()
    return _key(field, 2) + _varint(len(value)) + value


def _float(field: int, value: float) -> bytes:
    return _key(field, 5) + struct.pack("<f", value)


Dim = Union[int, str, None]


def tensor_type(elem: int, shape: Optional[Sequence[Dim]]) -> bytes:
    """A TypeProto of a tensor; ``shape=None`` declares no shape."""
    body = _int(1, elem)
    if shape is not None:
        dims = b""
        for d in shape:
            if isinstance(d, int):
                dims += _bytes(1, _int(1, d))
            elif isinstance(d, str):
                dims += _bytes(1, _bytes(2, d))
            else:
                dims += _bytes(1, b"")
        body += _bytes(2, dims)
    return _bytes(1, body)


def sequence_type(elem_type: bytes) -> bytes:
    """A TypeProto of a sequence of ``elem_type`` (a TypeProto)."""
    return _bytes(4, _bytes(1, elem_type))


def value(name: str, type_proto: bytes) -> bytes:
    """A ValueInfoProto."""
    return _bytes(1, name) + _bytes(2, type_proto)


def tensor(name: str, array: np.ndarray) -> bytes:
    """A TensorProto holding ``array`` as raw data."""
    array = np.ascontiguousarray(array)
    body = b"".join(_int(1, d) for d in array.shape)
    body += _int(2, NUMPY_CODES[array.dtype]) + _bytes(8, name)
    body += _bytes(9, array.astype(array.dtype.newbyteorder("<")).tobytes())
    return body


def attr_int(name: str, v: int) -> bytes:
    return _bytes(1, name) + _int(3, v) + _int(20, 2)


def attr_float(name: str, v: float) -> bytes:
    return _bytes(1, name) + _float(2, v) + _int(20, 1)


def node(
    op: str,
    inputs: Iterable[str],
    outputs: Iterable[str],
    name: str = "",
    attrs: Iterable[bytes] = (),
) -> bytes:
    """A NodeProto; ``attrs`` from :func:`attr_int` / :func:`attr_float`."""
    body = b"".join(_bytes(1, i) for i in inputs)
    body += b"".join(_bytes(2, o) for o in outputs)
    if name:
        body += _bytes(3, name)
    body += _bytes(4, op)
    body += b"".join(_bytes(5, a) for a in attrs)
    return body


def model(
    nodes: Iterable[bytes],
    inputs: Iterable[bytes],
    outputs: Iterable[bytes],
    initializers: Iterable[bytes] = (),
    opset: int = 17,
) -> bytes:
    """A serialized ModelProto (IR version 8) of one graph."""
    graph = b"".join(_bytes(1, n) for n in nodes)
    graph += _bytes(2, "test")
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += b"".join(_bytes(11, i) for i in inputs)
    graph += b"".join(_bytes(12, o) for o in outputs)
    opset_id = _bytes(1, "") + _int(2, opset)
    return _int(1, 8) + _bytes(2, "backplane-tests") + _bytes(7, graph) + _bytes(8, opset_id)

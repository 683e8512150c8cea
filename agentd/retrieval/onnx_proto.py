"""The few ONNX protobuf messages a graph built in code needs, written without the onnx package.

A message is a list of byte chunks with a known length, so tensors' raw data (memoryviews of
numpy arrays) is copied once, into the final `bytes`, and not again per nesting level. Field
numbers are those of onnx/onnx.proto; repeated scalars are written unpacked, which proto2
parsers (ONNX's) require to accept.
"""

from __future__ import annotations

import struct
from typing import Any

# TensorProto.DataType and AttributeProto.AttributeType values.
FLOAT, UINT8, INT8, INT32, INT64 = 1, 2, 3, 6, 7
_DTYPES = {"float32": FLOAT, "uint8": UINT8, "int8": INT8, "int32": INT32, "int64": INT64}
_ATTR_FLOAT, _ATTR_INT, _ATTR_INTS = 1, 2, 7


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # negative int64s are ten-byte two's complement on the wire
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


class Message:
    """One protobuf message under construction."""

    def __init__(self) -> None:
        self.parts: list[bytes | memoryview] = []
        self.size = 0

    def _add(self, chunk: bytes | memoryview) -> None:
        self.parts.append(chunk)
        self.size += len(chunk)

    def int(self, field: int, value: int) -> Message:
        self._add(_varint(field << 3) + _varint(value))
        return self

    def float(self, field: int, value: float) -> Message:
        self._add(_varint(field << 3 | 5) + struct.pack("<f", value))
        return self

    def bytes(self, field: int, value: bytes | memoryview) -> Message:
        self._add(_varint(field << 3 | 2) + _varint(len(value)))
        self._add(value)
        return self

    def str(self, field: int, value: str) -> Message:
        return self.bytes(field, value.encode())

    def msg(self, field: int, value: Message) -> Message:
        self._add(_varint(field << 3 | 2) + _varint(value.size))
        self.parts.extend(value.parts)
        self.size += value.size
        return self

    def serialise(self) -> bytes:
        return b"".join(self.parts)


def tensor(name: str, array: Any) -> Message:
    """A TensorProto holding a C-contiguous numpy array as raw data (little-endian)."""
    t = Message()
    for dim in array.shape:
        t.int(1, dim)
    t.int(2, _DTYPES[str(array.dtype)]).str(8, name)
    return t.bytes(9, memoryview(array).cast("B"))


def node(
    op: str, inputs: list[str], outputs: list[str], *, domain: str = "", **attrs: Any
) -> Message:
    """A NodeProto; an empty input name is an omitted optional input."""
    n = Message()
    for name in inputs:
        n.str(1, name)
    for name in outputs:
        n.str(2, name)
    n.str(3, outputs[0]).str(4, op)
    for key, value in attrs.items():
        a = Message().str(1, key)
        if isinstance(value, float):
            a.float(2, value).int(20, _ATTR_FLOAT)
        elif isinstance(value, int):
            a.int(3, value).int(20, _ATTR_INT)
        else:
            for item in value:
                a.int(8, item)
            a.int(20, _ATTR_INTS)
        n.msg(5, a)
    if domain:
        n.str(7, domain)
    return n


def value_info(name: str, elem_type: int, dims: list[int | str]) -> Message:
    """A graph input/output: a tensor type whose dims are sizes or symbolic names."""
    shape = Message()
    for dim in dims:
        d = Message()
        d.int(1, dim) if isinstance(dim, int) else d.str(2, dim)
        shape.msg(1, d)
    tensor_type = Message().int(1, elem_type).msg(2, shape)
    return Message().str(1, name).msg(2, Message().msg(1, tensor_type))


def model(
    nodes: list[Message],
    initializers: list[Message],
    inputs: list[Message],
    outputs: list[Message],
    opsets: dict[str, int],
) -> bytes:
    """A serialised ModelProto (IR version 8) with one graph."""
    graph = Message()
    for n in nodes:
        graph.msg(1, n)
    graph.str(2, "main")
    for t in initializers:
        graph.msg(5, t)
    for v in inputs:
        graph.msg(11, v)
    for v in outputs:
        graph.msg(12, v)
    m = Message().int(1, 8).str(2, "agentd").msg(7, graph)
    for domain, version in opsets.items():
        m.msg(8, Message().str(1, domain).int(2, version))
    return m.serialise()

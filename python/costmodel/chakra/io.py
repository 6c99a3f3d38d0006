"""Reading and writing Chakra `.et` files.

An `.et` file is a sequence of length-delimited protobuf messages: a varint32 length,
then the message bytes. The first message is a `GlobalMetadata`, every following one a
`Node` (ASTRA-sim reads the first message as metadata unconditionally).
"""

from __future__ import annotations

import io
import os
from typing import BinaryIO, Iterable, Iterator

from . import et_def_pb2 as pb

__all__ = [
    "TraceFormatError",
    "encode_varint",
    "decode_varint",
    "write_message",
    "iter_messages",
    "encode_trace",
    "write_trace",
    "read_trace",
    "CHAKRA_VERSION",
]

CHAKRA_VERSION = "0.0.4"


class TraceFormatError(Exception):
    """A file that is not a well-formed Chakra trace (one line)."""


def encode_varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative integer."""
    if value < 0:
        raise ValueError("varint of a negative number")
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def decode_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, new position); raises TraceFormatError on a truncated or over-long varint."""
    result = 0
    shift = 0
    n = len(data)
    while True:
        if pos >= n:
            raise TraceFormatError("truncated length prefix")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 35:  # varint32
            raise TraceFormatError("length prefix longer than a varint32")


def write_message(fh: BinaryIO, message) -> None:
    data = message.SerializeToString()
    fh.write(encode_varint(len(data)))
    fh.write(data)


def iter_messages(data: bytes) -> Iterator[bytes]:
    """The raw message payloads of a length-delimited stream."""
    pos, n = 0, len(data)
    while pos < n:
        length, pos = decode_varint(data, pos)
        end = pos + length
        if end > n:
            raise TraceFormatError(f"message at byte {pos} claims {length} bytes but only {n - pos} remain")
        yield data[pos:end]
        pos = end


def make_metadata(attrs: dict | None = None) -> pb.GlobalMetadata:
    meta = pb.GlobalMetadata(version=CHAKRA_VERSION)
    for key, value in (attrs or {}).items():
        a = meta.attr.add(name=key)
        if isinstance(value, bool):
            a.bool_val = value
        elif isinstance(value, int):
            a.int64_val = value
        else:
            a.string_val = str(value)
    return meta


def encode_trace(metadata: pb.GlobalMetadata, nodes: Iterable[pb.Node], cache: dict | None = None) -> bytes:
    """The `.et` bytes. `cache` (a dict the caller keeps while every node it encodes is
    alive; it is keyed by object identity): node objects and node lists that several
    ranks share are encoded once."""
    buf = io.BytesIO()
    write_message(buf, metadata)
    if cache is None:
        for node in nodes:
            write_message(buf, node)
        return buf.getvalue()
    key = ("list", id(nodes))
    body = cache.get(key)
    if body is None:
        parts = []
        for node in nodes:
            framed = cache.get(id(node))
            if framed is None:
                data = node.SerializeToString()
                framed = cache[id(node)] = encode_varint(len(data)) + data
            parts.append(framed)
        body = cache[key] = b"".join(parts)
    buf.write(body)
    return buf.getvalue()


def write_trace(path: str, metadata: pb.GlobalMetadata, nodes: Iterable[pb.Node]) -> None:
    """Write one `.et` file (plain write: callers stage whole directories atomically)."""
    with open(path, "wb") as fh:
        fh.write(encode_trace(metadata, nodes))


def read_trace(path_or_bytes) -> tuple[pb.GlobalMetadata, list[pb.Node]]:
    """(metadata, nodes) of an `.et` file or its bytes."""
    if isinstance(path_or_bytes, (bytes, bytearray)):
        data, name = bytes(path_or_bytes), "<bytes>"
    else:
        name = os.fspath(path_or_bytes)
        try:
            with open(name, "rb") as fh:
                data = fh.read()
        except OSError as err:
            raise TraceFormatError(f"{name}: cannot read: {err.strerror}") from None
    if not data:
        raise TraceFormatError(f"{name}: empty file (no GlobalMetadata message)")
    messages = iter_messages(data)
    try:
        first = next(messages)
        meta = pb.GlobalMetadata()
        meta.ParseFromString(first)
        nodes = []
        for raw in messages:
            node = pb.Node()
            node.ParseFromString(raw)
            nodes.append(node)
    except TraceFormatError as err:
        raise TraceFormatError(f"{name}: {err}") from None
    except Exception as err:  # protobuf's DecodeError
        raise TraceFormatError(f"{name}: malformed protobuf message: {err}") from None
    return meta, nodes


# -- attributes --------------------------------------------------------------------

_INT_FIELDS = (
    "int64_val",
    "uint64_val",
    "int32_val",
    "uint32_val",
    "sint64_val",
    "sint32_val",
    "fixed64_val",
    "fixed32_val",
    "sfixed64_val",
    "sfixed32_val",
)


def attr_value(attr: pb.AttributeProto):
    """The Python value of an AttributeProto (lists as lists, bytes as bytes)."""
    which = attr.WhichOneof("value")
    if which is None:
        return None
    value = getattr(attr, which)
    if which.endswith("_list"):
        return list(value.values)
    return value


def attr_int(attr: pb.AttributeProto) -> int | None:
    """The attribute as an integer when it is held in any integer field (or a bool)."""
    which = attr.WhichOneof("value")
    if which in _INT_FIELDS or which == "bool_val":
        return int(getattr(attr, which))
    return None


def node_attrs(node: pb.Node) -> dict:
    return {a.name: a for a in node.attr}

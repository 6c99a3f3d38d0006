"""Chakra .et wire format: round trip, and bytes pinned against a hand encoding."""

from __future__ import annotations

import pytest

from costmodel.chakra import et_def_pb2 as pb
from costmodel.chakra.io import (
    TraceFormatError,
    attr_int,
    attr_value,
    decode_varint,
    encode_trace,
    encode_varint,
    make_metadata,
    read_trace,
    write_trace,
)


def test_field_numbers_match_chakra():
    node = pb.Node.DESCRIPTOR.fields_by_name
    assert {k: node[k].number for k in node} == {
        "id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5,
        "start_time_micros": 6, "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10,
    }
    meta = pb.GlobalMetadata.DESCRIPTOR.fields_by_name
    assert (meta["version"].number, meta["attr"].number) == (1, 2)
    io = pb.IOInfo.DESCRIPTOR.fields_by_name
    assert (io["values"].number, io["shapes"].number, io["types"].number) == (1, 2, 3)
    attr = pb.AttributeProto.DESCRIPTOR
    expected = [
        "double_val", "double_list", "float_val", "float_list", "int32_val", "int32_list",
        "int64_val", "int64_list", "uint32_val", "uint32_list", "uint64_val", "uint64_list",
        "sint32_val", "sint32_list", "sint64_val", "sint64_list", "fixed32_val", "fixed32_list",
        "fixed64_val", "fixed64_list", "sfixed32_val", "sfixed32_list", "sfixed64_val",
        "sfixed64_list", "bool_val", "bool_list", "string_val", "string_list", "bytes_val", "bytes_list",
    ]
    assert [f.name for f in attr.oneofs_by_name["value"].fields] == expected
    assert [attr.fields_by_name[n].number for n in expected] == list(range(3, 33))
    assert dict(pb.NodeType.items()) == {
        "INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3,
        "COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7,
    }
    assert dict(pb.CollectiveCommType.items()) == {
        "ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
        "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9,
    }


def test_varint():
    assert encode_varint(0) == b"\x00"
    assert encode_varint(1) == b"\x01"
    assert encode_varint(127) == b"\x7f"
    assert encode_varint(300) == b"\xac\x02"
    assert decode_varint(b"\xac\x02", 0) == (300, 2)
    with pytest.raises(TraceFormatError):
        decode_varint(b"\xac", 0)
    with pytest.raises(TraceFormatError):
        decode_varint(b"\xff\xff\xff\xff\xff\x01", 0)


def _tiny_trace() -> bytes:
    meta = pb.GlobalMetadata(version="0.0.4")
    comp = pb.Node(id=1, name="c", type=pb.COMP_NODE, duration_micros=5)
    comp.attr.add(name="is_cpu_op", bool_val=False)
    coll = pb.Node(id=2, name="ar", type=pb.COMM_COLL_NODE)
    coll.data_deps.append(1)
    coll.attr.add(name="comm_type", int64_val=pb.ALL_REDUCE)
    coll.attr.add(name="comm_size", int64_val=300)
    return encode_trace(meta, [comp, coll])


# Hand encoding (protobuf wire format: tag = field << 3 | wire type).
HAND = (
    # GlobalMetadata: 7 bytes; version (1, LEN) "0.0.4"
    b"\x07" + b"\x0a\x05" + b"0.0.4"
    # Node: 25 bytes
    + b"\x19"
    + b"\x08\x01"  # id (1, VARINT) = 1
    + b"\x12\x01c"  # name (2, LEN) = "c"
    + b"\x18\x04"  # type (3, VARINT) = COMP_NODE
    + b"\x38\x05"  # duration_micros (7, VARINT) = 5
    + b"\x52\x0e"  # attr (10, LEN), 14 bytes:
    + b"\x0a\x09is_cpu_op"  # name (1, LEN)
    + b"\xd8\x01\x00"  # bool_val (27, VARINT) = false: present because it is in a oneof
    # Node: 42 bytes
    + b"\x2a"
    + b"\x08\x02"  # id = 2
    + b"\x12\x02ar"  # name = "ar"
    + b"\x18\x07"  # type = COMM_COLL_NODE
    + b"\x2a\x01\x01"  # data_deps (5, LEN, packed) = [1]
    + b"\x52\x0d" + b"\x0a\x09comm_type" + b"\x48\x00"  # attr: comm_type int64_val (9) = 0
    + b"\x52\x0e" + b"\x0a\x09comm_size" + b"\x48\xac\x02"  # attr: comm_size int64_val = 300
)


def test_tiny_trace_bytes_are_pinned():
    assert _tiny_trace() == HAND


def test_hand_bytes_read_back(tmp_path):
    path = tmp_path / "t.0.et"
    path.write_bytes(HAND)
    meta, nodes = read_trace(str(path))
    assert meta.version == "0.0.4"
    assert [n.id for n in nodes] == [1, 2]
    assert nodes[0].type == pb.COMP_NODE and nodes[0].duration_micros == 5
    attrs = {a.name: a for a in nodes[1].attr}
    assert attr_int(attrs["comm_size"]) == 300
    assert attrs["comm_type"].WhichOneof("value") == "int64_val"
    assert list(nodes[1].data_deps) == [1]


def test_round_trip(tmp_path):
    meta = make_metadata({"generator": "x", "rank": 3, "flag": True})
    nodes = []
    for i in range(50):
        n = pb.Node(id=i * 7, name=f"n{i}", type=pb.COMP_NODE if i % 2 else pb.COMM_COLL_NODE)
        n.data_deps.extend(range(max(0, i - 3) * 7, i * 7, 7))
        n.ctrl_deps.extend([0] if i else [])
        n.duration_micros = i * 1000
        n.attr.add(name="u", uint64_val=2**63 + i)
        n.attr.add(name="s", string_val="g1")
        n.attr.add(name="dims", bool_list=pb.BoolList(values=[True, False]))
        n.attr.add(name="d", double_val=0.5)
        n.inputs.values = "[1]"
        nodes.append(n)
    path = tmp_path / "trace.3.et"
    write_trace(str(path), meta, nodes)
    meta2, nodes2 = read_trace(str(path))
    assert meta2 == meta
    assert nodes2 == nodes
    a = {x.name: x for x in nodes2[5].attr}
    assert attr_value(a["dims"]) == [True, False]
    assert attr_int(a["u"]) == 2**63 + 5
    assert attr_int(a["d"]) is None  # a float is not an integer attribute


def test_reader_errors(tmp_path):
    with pytest.raises(TraceFormatError, match="empty"):
        read_trace(b"")
    with pytest.raises(TraceFormatError, match="claims"):
        read_trace(HAND[:-3])
    with pytest.raises(TraceFormatError, match="cannot read"):
        read_trace(str(tmp_path / "nope.et"))
    with pytest.raises(TraceFormatError, match="malformed"):
        read_trace(b"\x07\x0a\x050.0.4" + b"\x02\xff\xff")

"""Decoding collectives (costmodel.collectives): process groups as the StableHLO spec defines
them, bytes per kind, Shardy collectives, and multiplicities through loops and calls.

Expected device ids are derived by hand from the spec's definitions (global id of process
(replica r, partition p) is r * num_partitions + p)."""

from __future__ import annotations

import os

import pytest

from conftest import shared_path

from costmodel.collectives import (
    CROSS_PARTITION,
    CROSS_REPLICA,
    CROSS_REPLICA_AND_PARTITION,
    FLATTENED_IDS,
    CollectiveError,
    compact_groups,
    decode_collective,
    find_collectives,
    grid_size,
    permute_pairs,
    process_groups,
    sdy_meshes,
)
from costmodel.ir import load_module, make_context

DATA = os.path.join(os.path.dirname(__file__), "data", "collectives")
SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "workloads")


def load(text: str):
    ctx = make_context()
    return load_module(ctx, text, "<test>")


def walk(op, name=None):
    out = []
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                if name is None or inner.name == name:
                    out.append(inner)
                out.extend(walk(inner, name))
    return out


def decode_all(module):
    r, p = grid_size(module)
    meshes = sdy_meshes(module)
    return [decode_collective(op, r, p, meshes=meshes) for op, _ in find_collectives(module)]


ADD = """({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    })"""


def module_with(body: str, replicas: int, partitions: int, args: str = "%arg0: tensor<8x4xf32>") -> str:
    return f"""module attributes {{mhlo.num_replicas = {replicas} : i32, mhlo.num_partitions = {partitions} : i32}} {{
  func.func @main({args}) {{
{body}
    return
  }}
}}"""


# ---------------------------------------------------------------------------
# The spec's four strategies, on the spec's own examples
# ---------------------------------------------------------------------------


def test_cross_replica_spec_example():
    # replica_groups = [[0, 1], [2, 3]], num_partitions = 2 (num_replicas = 4):
    # [[(0,0),(1,0)], [(0,1),(1,1)], [(2,0),(3,0)], [(2,1),(3,1)]]
    assert process_groups([[0, 1], [2, 3]], CROSS_REPLICA, 4, 2) == [[0, 2], [1, 3], [4, 6], [5, 7]]


def test_cross_partition_spec_example():
    # partition_groups = [[0, 1]], num_replicas = 4:
    # [[(0,0),(0,1)], [(1,0),(1,1)], [(2,0),(2,1)], [(3,0),(3,1)]]
    assert process_groups([[0, 1]], CROSS_PARTITION, 4, 2) == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_cross_replica_and_partition_spec_example():
    # replica_groups = [[0, 1], [2, 3]], num_partitions = 2:
    # [[(0,0),(1,0),(0,1),(1,1)], [(2,0),(3,0),(2,1),(3,1)]]
    assert process_groups([[0, 1], [2, 3]], CROSS_REPLICA_AND_PARTITION, 4, 2) == [[0, 2, 1, 3], [4, 6, 5, 7]]


def test_flattened_ids_spec_example():
    # flattened_id_groups = [[0,1,2,3],[4,5,6,7]], num_replicas = 4, num_partitions = 2
    assert process_groups([[0, 1, 2, 3], [4, 5, 6, 7]], FLATTENED_IDS, 4, 2) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_empty_groups_mean_everyone_in_the_id_space():
    assert process_groups([], CROSS_REPLICA, 2, 4) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert process_groups([], CROSS_PARTITION, 2, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert process_groups([], CROSS_REPLICA_AND_PARTITION, 2, 4) == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert process_groups([], FLATTENED_IDS, 2, 4) == [list(range(8))]


def test_ids_beyond_the_grid_are_errors():
    with pytest.raises(CollectiveError, match=r"replica 4, beyond num_replicas x num_partitions = 4 x 1"):
        process_groups([[0, 1, 2, 3, 4]], CROSS_REPLICA, 4, 1)
    with pytest.raises(CollectiveError, match="partition 2"):
        process_groups([[0, 2]], CROSS_PARTITION, 4, 2)
    with pytest.raises(CollectiveError, match="device 8"):
        process_groups([[0, 8]], FLATTENED_IDS, 4, 2)
    with pytest.raises(CollectiveError, match="twice"):
        process_groups([[0, 1], [1, 2]], FLATTENED_IDS, 4, 1)


def test_permute_pairs_modes():
    assert permute_pairs([[0, 1]], CROSS_REPLICA, 2, 4) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert permute_pairs([[0, 1], [1, 2]], CROSS_PARTITION, 2, 4) == [(0, 1), (4, 5), (1, 2), (5, 6)]
    with pytest.raises(CollectiveError, match="source_target_pairs names replica 2"):
        permute_pairs([[0, 2]], CROSS_REPLICA, 2, 1)


def test_compact_groups():
    assert compact_groups([[0, 1, 2, 3]]) == "[[0,1,2,3]]"
    big = [list(range(i * 64, i * 64 + 64)) for i in range(4)]
    assert compact_groups(big) == "[4,64]<=[256]"
    strided = [[j * 4 + i for j in range(64)] for i in range(4)]
    assert compact_groups(strided) == "[4,64]<=[64,4]T(1,0)"


# ---------------------------------------------------------------------------
# Ops: every kind and mode, through decode_collective
# ---------------------------------------------------------------------------


def test_every_mode_on_ops_2_replicas_x_4_partitions():
    body = f"""
    %0 = "stablehlo.all_reduce"(%arg0) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> {ADD} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = "stablehlo.all_gather"(%arg0) <{{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> : (tensor<8x4xf32>) -> tensor<64x4xf32>
    %2 = "stablehlo.reduce_scatter"(%arg0) <{{scatter_dimension = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}}> {ADD} : (tensor<8x4xf32>) -> tensor<2x4xf32>
    %3 = "stablehlo.all_to_all"(%arg0) <{{split_dimension = 0 : i64, concat_dimension = 1 : i64, split_count = 2 : i64, channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}}> : (tensor<8x4xf32>) -> tensor<4x8xf32>
    %4 = "stablehlo.collective_permute"(%arg0) <{{source_target_pairs = dense<[[0, 1]]> : tensor<1x2xi64>}}> : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %5 = "stablehlo.collective_permute"(%arg0) <{{channel_handle = #stablehlo.channel_handle<handle = 4, type = 1>, source_target_pairs = dense<[[0, 1], [1, 2]]> : tensor<2x2xi64>}}> : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %6 = "stablehlo.collective_broadcast"(%arg0) <{{channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}}> : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %7 = "stablehlo.all_reduce"(%arg0) <{{replica_groups = dense<> : tensor<0x0xi64>}}> {ADD} : (tensor<8x4xf32>) -> tensor<8x4xf32>"""
    infos = decode_all(load(module_with(body, 2, 4)))
    got = [(i.kind, i.mode, i.groups) for i in infos]
    assert got == [
        ("all_reduce", CROSS_REPLICA, [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("all_gather", CROSS_REPLICA_AND_PARTITION, [[0, 4, 1, 5, 2, 6, 3, 7]]),
        ("reduce_scatter", FLATTENED_IDS, [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("all_to_all", CROSS_PARTITION, [[0, 1], [4, 5], [2, 3], [6, 7]]),
        ("collective_permute", CROSS_REPLICA, [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("collective_permute", CROSS_PARTITION, [[0, 1], [4, 5], [1, 2], [5, 6]]),
        ("collective_broadcast", CROSS_PARTITION, [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("all_reduce", CROSS_REPLICA, [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ]
    assert infos[4].pairs == [(0, 4), (1, 5), (2, 6), (3, 7)]
    # bytes: operand 8x4xf32 = 128 B per device
    b = [(i.bytes_in, i.bytes_out, i.comm_bytes) for i in infos]
    assert b[0] == (128, 128, 128)  # all_reduce: per-rank buffer
    assert b[1] == (128, 1024, 128)  # all_gather: per-rank INPUT shard
    assert b[2] == (128, 32, 128)  # reduce_scatter: per-rank input buffer
    assert b[3] == (128, 128, 128)  # all_to_all: per-rank buffer
    assert b[4] == (128, 128, 128)  # permute: the message
    assert infos[1].group_size == 8 and infos[1].num_groups == 1
    assert infos[0].group_size == 2 and infos[0].num_groups == 4


def test_decode_cache_gives_the_same_infos_with_lists_of_their_own():
    """decode_collective(cache=): the groups of each distinct attribute are worked out once
    per mode; the infos equal the uncached ones, and each owns its lists (changing one
    info's groups or pairs changes no other)."""
    import dataclasses

    body = f"""
    %0 = "stablehlo.all_reduce"(%arg0) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> {ADD} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %1 = "stablehlo.all_reduce"(%0) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> {ADD} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %2 = "stablehlo.all_reduce"(%1) <{{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}}> {ADD} : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %3 = "stablehlo.collective_permute"(%2) <{{source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>}}> : (tensor<8x4xf32>) -> tensor<8x4xf32>
    %4 = "stablehlo.collective_permute"(%3) <{{source_target_pairs = dense<[[0, 1], [1, 0]]> : tensor<2x2xi64>}}> : (tensor<8x4xf32>) -> tensor<8x4xf32>"""
    module = load(module_with(body, 2, 4))
    ops = [op for op, _ in find_collectives(module)]
    cache: dict = {}
    with module.context:
        cached = [decode_collective(op, 2, 4, cache=cache) for op in ops]
        plain = [decode_collective(op, 2, 4) for op in ops]
    assert [dataclasses.asdict(i) for i in cached] == [dataclasses.asdict(i) for i in plain]
    assert len(cache) == 3  # one attribute in two modes, one pairs attribute
    assert cached[0].groups == [[0, 4], [1, 5], [2, 6], [3, 7]]  # cross-replica
    assert cached[2].groups == [[0, 4, 1, 5, 2, 6, 3, 7]]  # the same attribute, cross-replica-and-partition
    cached[0].groups[0].append(99)
    cached[3].pairs.append((7, 7))
    assert cached[1].groups == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert cached[4].pairs == plain[4].pairs


def test_padded_groups_async_send_recv_broadcast():
    text = open(os.path.join(DATA, "misc_forms.mlir")).read()
    infos = decode_all(load(text))
    kinds = [(i.kind, i.groups) for i in infos]
    assert kinds == [
        ("all_reduce", [[0, 1, 2], [3]]),  # -1 padding dropped
        ("all_reduce", [[0, 1, 2, 3]]),  # empty = all replicas
        ("all_gather", [[0, 1, 2, 3]]),  # inside stablehlo.async_start
        ("send", [[0, 1], [2, 3]]),
        ("recv", [[0, 1], [2, 3]]),
        ("collective_broadcast", [[2, 1]]),
        ("send", []),  # host transfer
    ]
    send, recv, host = infos[3], infos[4], infos[6]
    assert send.pairs == [(0, 1), (2, 3)] and send.comm_bytes == 16 and send.bytes_out == 0
    assert recv.comm_bytes == 16 and recv.bytes_in == 0
    assert host.host_transfer


def test_use_global_device_ids_without_channel_is_an_error():
    body = f"""
    %0 = "stablehlo.all_reduce"(%arg0) <{{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}}> {ADD} : (tensor<8x4xf32>) -> tensor<8x4xf32>"""
    try:
        module = load(module_with(body, 2, 1))
    except Exception:  # the verifier may reject it first, which is as good
        return
    with pytest.raises(CollectiveError, match="use_global_device_ids requires"):
        decode_all(module)


def test_mesh_axes_replica_groups():
    text = """module attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]>
  func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = #stablehlo.replica_group_mesh_axes<mesh = @mesh, axes = [#stablehlo.axis_ref<name = "y", sub_axis_info = (1)2>]>, use_global_device_ids}> """ + ADD + """ : (tensor<4xf32>) -> tensor<4xf32>
    %1 = "stablehlo.all_reduce"(%0) <{channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = #stablehlo.replica_group_mesh_axes<mesh = @mesh, axes = [#stablehlo.axis_ref<name = "y">, #stablehlo.axis_ref<name = "x">]>, use_global_device_ids}> """ + ADD + """ : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
}"""
    infos = decode_all(load(text))
    # "y":(1)2 is the major half of y: device x*4 + hi*2 + lo varies in hi
    assert infos[0].groups == [[0, 2], [1, 3], [4, 6], [5, 7]]
    # ordered by y (major) then x
    assert infos[1].groups == [[0, 4, 1, 5, 2, 6, 3, 7]]


# ---------------------------------------------------------------------------
# Shardy collectives (global view, before export)
# ---------------------------------------------------------------------------


def test_sdy_collectives():
    infos = decode_all(load(open(os.path.join(DATA, "sdy_collectives.mlir")).read()))
    got = [(i.kind, i.bytes_in, i.bytes_out, i.comm_bytes, i.groups) for i in infos]
    # 16x32xf32 on a 2x4 mesh; local [{"x"},{"y"}] block is 8x8 = 256 B
    assert got[0] == ("all_gather", 256, 1024, 256, [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert got[1] == ("all_slice", 1024, 256, 0, [[0, 1, 2, 3], [4, 5, 6, 7]])
    assert got[2] == ("all_to_all", 256, 256, 256, [[0, 4], [1, 5], [2, 6], [3, 7]])
    # [{}, {"y","x"}] -> [{}, {"x","y"}]: device (x, y) needs tile x*4+y, held by (x', y') with y'*2+x' = x*4+y
    assert got[3][0] == "collective_permute"
    assert infos[3].pairs == [(4, 1), (1, 2), (5, 3), (2, 4), (6, 5), (3, 6)]
    assert got[4] == ("all_reduce", 512, 512, 512, [[0, 4], [1, 5], [2, 6], [3, 7]])
    assert got[5] == ("reduce_scatter", 512, 256, 512, [[0, 4], [1, 5], [2, 6], [3, 7]])


def test_sdy_mesh_device_ids_and_sub_axes():
    text = """module {
  sdy.mesh @mesh = <["x"=2, "y"=4], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]>
  func.func @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y":(1)2}]>}) -> tensor<16x32xf32> {
    %0 = sdy.all_reduce {"y":(2)2} %arg0 out_sharding=<@mesh, [{}, {"y":(1)2}]> : tensor<16x32xf32>
    return %0 : tensor<16x32xf32>
  }
}"""
    (info,) = decode_all(load(text))
    # minor half of y: positions x*4 + hi*2 + lo vary in lo -> [[0,1],[2,3],[4,5],[6,7]] -> device ids
    assert info.groups == [[7, 6], [5, 4], [3, 2], [1, 0]]
    assert info.comm_bytes == 16 * 16 * 4  # dim 1 split in 2 by "y":(1)2


# ---------------------------------------------------------------------------
# Multiplicities: while trip counts, calls, unreachable functions
# ---------------------------------------------------------------------------

LOOP_CALL = """module attributes {mhlo.num_replicas = 4 : i32} {
  func.func private @inner(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ADD : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func private @unused(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ADD : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func private @twice(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = func.call @inner(%x) : (tensor<4xf32>) -> tensor<4xf32>
    %1 = func.call @inner(%0) : (tensor<4xf32>) -> tensor<4xf32>
    return %1 : tensor<4xf32>
  }
  func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %r:2 = stablehlo.while(%i = %c0, %v = %arg0) : tensor<i32>, tensor<4xf32>
    cond {
      %p = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %n = stablehlo.add %i, %c1 : tensor<i32>
      %w = func.call @twice(%v) : (tensor<4xf32>) -> tensor<4xf32>
      %g = "stablehlo.all_gather"(%w) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> : (tensor<4xf32>) -> tensor<16xf32>
      stablehlo.return %n, %w : tensor<i32>, tensor<4xf32>
    }
    %t = func.call @inner(%r#1) : (tensor<4xf32>) -> tensor<4xf32>
    return %t : tensor<4xf32>
  }
}""".replace("ADD", ADD)


def test_multiplicities_through_while_and_calls():
    module = load(LOOP_CALL)
    found = [(op.name, op.parent.name if hasattr(op.parent, "name") else "", m) for op, m in find_collectives(module)]
    mults = [m for _, _, m in found]
    # @inner's all_reduce: 3 iterations x 2 calls via @twice + 1 direct call = 7
    # @unused: not reachable -> 0; all_gather in the loop body: 3
    assert mults == [7, 0, 3]


def test_trip_count_from_annotate_cost(annotate):
    res = annotate(LOOP_CALL)
    while_op = res.ops("stablehlo.while")[0]
    assert res.cost(while_op)["trip_count"] == 3
    # a trip_count written by annotate-cost wins over inference
    from costmodel.ir import ir

    with res.module.context:
        d = ir.DictAttr(while_op.attributes["costmodel.cost"])
        entries = {d[i].name: d[i].attr for i in range(len(d))}
        entries["trip_count"] = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), 10)
        while_op.attributes["costmodel.cost"] = ir.DictAttr.get(entries)
    assert [m for _, m in find_collectives(res.module)] == [21, 0, 10]


def test_unknown_trip_count_counts_once_and_reports():
    text = LOOP_CALL.replace("%p = stablehlo.compare LT, %i, %c3", "%p = stablehlo.compare LT, %i, %i")
    module = load(text)
    seen = []
    mults = [m for _, m in find_collectives(module, on_unknown_trip_count=seen.append)]
    assert mults == [3, 0, 1] and len(seen) == 1


# ---------------------------------------------------------------------------
# JAX shard_map programs (checked in; generate.py made them)
# ---------------------------------------------------------------------------


def test_jax_shard_map_collectives():
    module = load(open(os.path.join(DATA, "shard_map_collectives.mlir")).read())
    assert grid_size(module) == (1, 8)
    infos = decode_all(module)
    got = [(i.kind, i.mode, i.groups, i.comm_bytes) for i in infos]
    assert got == [
        ("all_reduce", FLATTENED_IDS, [[0, 1, 2, 3], [4, 5, 6, 7]], 256),
        ("all_gather", FLATTENED_IDS, [[0, 4], [1, 5], [2, 6], [3, 7]], 256),
        ("collective_permute", CROSS_PARTITION, [[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [7, 4]], 256),
        ("all_to_all", CROSS_PARTITION, [[0, 1, 2, 3], [4, 5, 6, 7]], 256),
        ("reduce_scatter", FLATTENED_IDS, [list(range(8))], 256),
    ]
    assert infos[1].bytes_out == 512 and infos[4].bytes_out == 32


def test_jax_shard_map_loop_and_call():
    module = load(open(os.path.join(DATA, "shard_map_loop_call.mlir")).read())
    found = [(op.name, m) for op, m in find_collectives(module)]
    # psum inside fori_loop(0, 5) through a call; all_gather in a function called twice
    assert found == [("stablehlo.all_reduce", 5), ("stablehlo.all_gather", 2)]


# ---------------------------------------------------------------------------
# Third-party workloads
# ---------------------------------------------------------------------------


def _nbytes(t) -> int:
    from costmodel.shapes import type_info

    return type_info(t).nbytes


def test_split_replica_groups_workload():
    module = load(open(shared_path("test_split_replica_groups.mlir")).read())
    infos = decode_all(module)
    assert [i.groups for i in infos] == [[[0, 1], [2, 3]], [[0, 1, 2, 3]]]
    assert [i.comm_bytes for i in infos] == [128 * 512 * 4] * 2


def test_jax_example_single_replica():
    module = load(open(shared_path("jax_example.mlir")).read())
    infos = decode_all(module)
    assert len(infos) == 6
    assert all(i.groups == [[0]] and i.group_size == 1 for i in infos)


def test_ragged_all_to_all_is_an_all_to_all_of_its_operand():
    """lax.ragged_all_to_all exports as a custom call: decoded as an all_to_all of its data
    operand (an upper bound on what it sends: the sizes are data), its groups and channel
    read from backend_config (channel 1: cross-partition ids)."""
    from conftest import RAGGED_ALL_TO_ALL

    module = load(RAGGED_ALL_TO_ALL)
    (info,) = decode_all(module)
    assert info.kind == "all_to_all" and info.mode == CROSS_PARTITION
    assert info.comm_bytes == info.bytes_in == 64 * 128 * 2  # operand 0 only, bf16
    assert info.groups == [[0, 1, 2, 3], [4, 5, 6, 7]]

"""XLA's SPMD partitioner as the reference for `propagate-shardings`.

For each case of tests/data/sharded/generate.py a subprocess (8 host CPU devices) lowers
the JAX program and compiles it with `--xla_dump_hlo_pass_re=spmd-partitioning`; the HLO
right after XLA's `spmd-partitioning` pass is converted with `hlo_to_stablehlo`. We run
our pass on the lowered (unpartitioned) module and compare the collectives: the same
multiset of (kind, group size), the same device groups, and equal per-kind operand bytes.

Known, tested difference: XLA's all-to-all works on a reshaped operand
(`tensor<8x8x8xf32>`, split dimension made explicit) where Shardy's is on the 2-D
operand (`tensor<8x64xf32>`); the bytes and groups are equal, the types are not.
"""

from __future__ import annotations

import collections
import os
import re
import sys

import numpy as np
import pytest

import jax  # noqa: E402,F401  (the [test] extra installs it)

from costmodel.ir import DiagnosticEngine, ir, load_module, make_context  # noqa: E402
from costmodel.passes import PassSession, get_pass  # noqa: E402
from costmodel.shapes import type_info  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from collective_oracle import KINDS, groups_from_mesh_axes, run_generator  # noqa: E402

HERE = os.path.dirname(__file__)
GENERATE = os.path.join(HERE, "data", "sharded", "generate.py")

# case -> what it must contain (kind -> count), so that a case that silently lost its
# collectives on both sides does not pass. Every case's collectives equal XLA's: the
# multiset of (kind, group size), per-kind operand bytes and the device groups.
EXPECTED_KINDS = {
    "dp_mlp": {"all_reduce": 2},
    "tp_mlp": {"all_reduce": 1},
    "fsdp_mlp": {"all_gather": 2},
    "fsdp_mlp_constrained": {"all_gather": 2},
    "transformer_dp_tp": {"all_reduce": 2},
    "reshard_all_to_all": {"all_to_all": 1},
    "reshard_permute": {"collective_permute": 1},
    "shard_map": {"all_reduce": 1},
    "tp_mlp_gspmd": {"all_reduce": 1},
    "transformer_dp_tp_gspmd": {"all_reduce": 2},
    "reshard_all_to_all_gspmd": {"all_to_all": 1},
    "private_calls": {"all_reduce": 1},
    "private_calls_gspmd": {"all_reduce": 1},
    "tp_layernorm": {"all_reduce": 1},
    "fsdp_train": {"all_gather": 4, "all_to_all": 3, "all_reduce": 1},
    "fori_tp": {"all_reduce": 1},
    "fori_tp_gspmd": {"all_reduce": 1},
    # issue 10
    "scan_dp": {"all_reduce": 2},
    "scan_fsdp": {"all_gather": 4, "all_reduce": 2},
    "scan_dp_tp": {"all_reduce": 4},
    "scan_dp_tp_gspmd": {"all_reduce": 4},
    "scan_layer_sharded": {"all_gather": 2},
    "remat_dp_tp": {"all_reduce": 7},
    "remat_dp_tp_gspmd": {"all_reduce": 7},
    "custom_vjp_tp": {"all_reduce": 2},
    "custom_vjp_tp_gspmd": {"all_reduce": 2},
    "gqa_attention": {"all_reduce": 1},
    "gqa_attention_gspmd": {"all_reduce": 1},
    "gqa_train": {"all_reduce": 7, "all_gather": 2},
    "gqa_train_gspmd": {"all_reduce": 7, "all_gather": 2},
    "vocab_embed": {"all_reduce": 1},
    "vocab_embed_gspmd": {"all_reduce": 1},
    "vocab_embed_train": {"all_reduce": 7},
    "vocab_embed_train_gspmd": {"all_reduce": 7},
    "vocab_xent": {"all_reduce": 4},
    "argmax_vocab": {"all_gather": 2},
    "max_vocab": {"all_reduce": 1},
    "topk_vocab": {"all_gather": 1},
    "cumsum_vocab": {"all_gather": 1},
    "adamw_fsdp_donated": {"all_gather": 1, "all_reduce": 1},
    "donated_dp": {"all_reduce": 1},
    "adamw_fsdp_donated_gspmd": {"all_gather": 1, "all_reduce": 1},
    "donated_dp_gspmd": {"all_reduce": 1},
    "shard_map_gspmd": {"all_reduce": 1},
    "shard_map_full": {"all_reduce": 1, "collective_permute": 1, "all_gather": 1},
    "shard_map_full_gspmd": {"all_reduce": 1, "collective_permute": 1, "all_gather": 1},
    "shard_map_partial": {"all_reduce": 1},
    "shard_map_partial_gspmd": {"all_reduce": 1},
    "uneven_constraint": {"all_gather": 2},
    "uneven_constraint_gspmd": {"all_gather": 2},
    "scan_remat_transformer": {"all_gather": 12, "all_reduce": 13},
    "scan_remat_transformer_gspmd": {"all_gather": 12, "all_reduce": 13},
}

# Known differences, each tested for what it is (test_known_differences):
# - mid_reshard(_gspmd): the reshard {} x {data, model} -> {data} x {model} is an all-gather-free
#   all-to-all + collective-permute in both, the same count and bytes, but Shardy permutes
#   first and exchanges over "data" ({0,4}, ...), XLA exchanges over pairs of "model"
#   ({0,1}, ...) and permutes after.
# - scan_dp_gspmd, scan_fsdp_gspmd: XLA propagates GSPMD shardings with GSPMD, we with Shardy;
#   GSPMD's propagation through the while loop gives the stashed residuals another sharding.
KNOWN_DIFFERENCES = ["mid_reshard", "mid_reshard_gspmd", "scan_dp_gspmd", "scan_fsdp_gspmd"]
CASES = list(EXPECTED_KINDS)



def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _walk(child.operation)


def _reachable_ops(module):
    """The ops @main runs, callees followed at each call site (hlo_to_stablehlo also keeps a
    while loop's body and condition as private functions nobody calls: not counted)."""
    funcs = {}
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func":
            funcs[ir.StringAttr(op.attributes["sym_name"]).value] = op
    stack = []

    def visit(fn):
        name = ir.StringAttr(fn.attributes["sym_name"]).value
        assert name not in stack, f"recursive call to @{name}"
        stack.append(name)
        for op in _walk(fn):
            yield op
            if op.name == "func.call":
                yield from visit(funcs[ir.FlatSymbolRefAttr(op.attributes["callee"]).value])
        stack.pop()

    yield from visit(funcs["main"])


def collectives(module, groups_by_channel=None):
    """[(kind, group_size, operand_bytes, groups (frozenset of frozensets), operand type)]
    of the collectives that @main runs (statically: an op in a loop body counts once).
    `groups_by_channel` (channel id -> groups, from XLA's HLO text) overrides groups
    written as `replica_group_mesh_axes`, whose mesh lost its device order."""
    out = []
    for op in _reachable_ops(module):
        if op.name not in KINDS:
            continue
        kind = op.name.split(".", 1)[1]
        nbytes = sum(type_info(v.type).nbytes for v in op.operands)
        if kind == "collective_permute":
            pairs = np.array(ir.DenseIntElementsAttr(op.attributes["source_target_pairs"])).reshape(-1, 2)
            moved = [(int(a), int(b)) for a, b in pairs if a != b]
            size = len(moved)
            groups = frozenset(frozenset(p) for p in moved)
        else:
            attr = op.attributes["replica_groups"]
            try:
                dense = ir.DenseIntElementsAttr(attr)
                rows = np.array(dense).reshape(dense.type.shape).tolist()
            except ValueError:
                channel = re.search(r"handle = (\d+)", str(op.attributes["channel_handle"])) if "channel_handle" in op.attributes else None
                if groups_by_channel is not None and channel and channel.group(1) in groups_by_channel:
                    rows = groups_by_channel[channel.group(1)]
                else:
                    rows = groups_from_mesh_axes(module, str(attr))
            size = len(rows[0]) if rows else 0
            groups = frozenset(frozenset(r) for r in rows)
        out.append((kind, size, nbytes, groups, str(op.operands[0].type)))
    return out


def summary(colls):
    kinds = collections.Counter((k, g) for k, g, *_ in colls)
    per_kind_bytes = collections.Counter()
    for k, _, b, *_ in colls:
        per_kind_bytes[k] += b
    return kinds, dict(per_kind_bytes), collections.Counter((k, grp) for k, _, _, grp, _ in colls)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("spmd_oracle")
    run_generator(GENERATE, out, ["--oracle", *CASES, *KNOWN_DIFFERENCES], timeout=300)
    return out


@pytest.fixture(scope="module")
def ctx():
    return make_context()


def _ours(ctx, path):
    with open(path) as fh:
        module = load_module(ctx, fh.read(), str(path))
    session = PassSession(DiagnosticEngine(str(path)))
    info = get_pass("propagate-shardings")
    # XLA CPU forms no reduce-scatters: compare with ours left as all_reduce + slice
    info.run(module, {"per-device": True, "reduce-scatter": False, "extra": {}}, session)
    assert not session.diagnostics.has_errors, [d.render() for d in session.diagnostics.diagnostics]
    return module


def _xla(ctx, path):
    with open(path, "rb") as fh:
        return load_module(ctx, fh.read(), str(path))


def xla_collectives(ctx, path):
    """The collectives of XLA's partitioned program `<case>.xla.mlirbc`, with the device
    groups of `<case>.xla.groups.json`."""
    import json

    groups = None
    side = str(path)[: -len(".mlirbc")] + ".groups.json"
    if os.path.exists(side):
        with open(side) as fh:
            groups = json.load(fh)
    return collectives(_xla(ctx, path), groups)


@pytest.mark.parametrize("case", CASES)
def test_collectives_match_xla_spmd_partitioner(generated, ctx, case):
    ours = collectives(_ours(ctx, generated / f"{case}.mlir"))
    xla = xla_collectives(ctx, generated / f"{case}.xla.mlirbc")
    o_kinds, o_bytes, o_groups = summary(ours)
    x_kinds, x_bytes, x_groups = summary(xla)
    assert o_kinds == x_kinds, f"{case}: kinds/group sizes differ: ours {o_kinds} xla {x_kinds}"
    assert o_bytes == x_bytes, f"{case}: per-kind bytes differ: ours {o_bytes} xla {x_bytes}"
    assert o_groups == x_groups, f"{case}: device groups differ"
    expected = collections.Counter({k: n for k, n in EXPECTED_KINDS[case].items()})
    assert collections.Counter(k for k, *_ in ours) == expected


def test_known_differences(generated, ctx):
    """Where we and XLA differ, and how (KNOWN_DIFFERENCES)."""
    for case in ("mid_reshard", "mid_reshard_gspmd"):
        o_kinds, o_bytes, o_groups = summary(collectives(_ours(ctx, generated / f"{case}.mlir")))
        x_kinds, x_bytes, x_groups = summary(xla_collectives(ctx, generated / f"{case}.xla.mlirbc"))
        assert (o_kinds, o_bytes) == (x_kinds, x_bytes), case  # count and bytes equal
        pairs_over_data = frozenset(frozenset((m, m + 4)) for m in range(4))
        pairs_in_model = frozenset(frozenset((2 * k, 2 * k + 1)) for k in range(4))
        assert o_groups[("all_to_all", pairs_over_data)] == 1 and x_groups[("all_to_all", pairs_in_model)] == 1, case
    for case, xla_extra in (("scan_dp_gspmd", {"all_gather": 1}), ("scan_fsdp_gspmd", {"all_to_all": 2, "all_gather": 1})):
        ours = collections.Counter(k for k, *_ in collectives(_ours(ctx, generated / f"{case}.mlir")))
        xla = collections.Counter(k for k, *_ in xla_collectives(ctx, generated / f"{case}.xla.mlirbc"))
        # we partition as XLA partitions the Shardy export of the same program ...
        assert ours == collections.Counter(EXPECTED_KINDS[case.replace("_gspmd", "")]), case
        # ... GSPMD propagation adds collectives around the loops
        for kind, extra in xla_extra.items():
            assert xla[kind] - ours[kind] >= extra, (case, kind)


@pytest.mark.parametrize("case", ["reshard_all_to_all", "reshard_all_to_all_gspmd"])
def test_all_to_all_operand_shape_differs_but_bytes_equal(generated, ctx, case):
    (ours,) = collectives(_ours(ctx, generated / f"{case}.mlir"))
    (xla,) = xla_collectives(ctx, generated / f"{case}.xla.mlirbc")
    assert ours[4] == "tensor<8x64xf32>"  # Shardy: split_dimension=1, concat_dimension=0 on the local 2-D tile
    assert xla[4] == "tensor<8x8x8xf32>"  # XLA: reshaped so the split dimension is explicit
    assert ours[:4] == xla[:4]


def test_per_device_shapes_match_xla(generated, ctx):
    """Entry-function argument types are the per-device shards in both programs."""
    for case in ("tp_mlp", "transformer_dp_tp", "fsdp_mlp", "tp_mlp_gspmd"):
        ours = _ours(ctx, generated / f"{case}.mlir")
        xla = _xla(ctx, generated / f"{case}.xla.mlirbc")

        def main_inputs(m):
            for op in m.regions[0].blocks[0].operations:
                op = op.operation
                if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
                    return [str(t) for t in ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value).inputs]
            raise AssertionError("no main")

        assert main_inputs(ours) == main_inputs(xla), case

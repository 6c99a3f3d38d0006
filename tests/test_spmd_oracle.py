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
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import jax  # noqa: E402,F401  (the [test] extra installs it)

from costmodel.ir import DiagnosticEngine, ir, load_module, make_context  # noqa: E402
from costmodel.passes import PassSession, get_pass  # noqa: E402
from costmodel.shapes import type_info  # noqa: E402

HERE = os.path.dirname(__file__)
GENERATE = os.path.join(HERE, "data", "sharded", "generate.py")

CASES = [
    "dp_mlp",
    "tp_mlp",
    "fsdp_mlp",
    "fsdp_mlp_constrained",
    "transformer_dp_tp",
    "reshard_all_to_all",
    "reshard_permute",
    "shard_map",
    "tp_mlp_gspmd",
    "transformer_dp_tp_gspmd",
    "reshard_all_to_all_gspmd",
    "private_calls",
]

# What each case must contain (kind -> count), so that a case that silently lost its
# collectives on both sides does not pass.
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
}

KINDS = {
    "stablehlo.all_reduce",
    "stablehlo.all_gather",
    "stablehlo.reduce_scatter",
    "stablehlo.all_to_all",
    "stablehlo.collective_permute",
    "stablehlo.collective_broadcast",
}


def _walk(op):
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from _walk(child.operation)


def _mesh(module, name):
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "sdy.mesh" and ir.StringAttr(op.attributes["sym_name"]).value == name:
            text = str(op.attributes["mesh"])
            axes = [(a, int(s)) for a, s in re.findall(r'"([^"]+)"\s*=\s*(\d+)', text)]
            ids = re.search(r"device_ids\s*=\s*\[([^\]]*)\]", text)
            n = math.prod(s for _, s in axes)
            dev = [int(x) for x in ids.group(1).split(",")] if ids else list(range(n))
            return axes, dev
    raise AssertionError(f"no sdy.mesh @{name}")


def _groups_from_mesh_axes(module, text):
    """`#stablehlo.replica_group_mesh_axes<mesh = @m, axes = [...]>` -> device groups."""
    mesh = re.search(r"mesh\s*=\s*@([\w.$-]+)", text).group(1)
    axes, dev = _mesh(module, mesh)
    refs = re.findall(r'#stablehlo\.axis_ref<name = "([^"]+)"([^>]*)>', text)
    assert all("sub_axis" not in rest for _, rest in refs), f"sub-axes not handled in this test: {text}"
    names = [n for n, _ in refs]
    arr = np.array(dev).reshape([s for _, s in axes])
    group_dims = [i for i, (a, _) in enumerate(axes) if a in names]
    other = [i for i in range(len(axes)) if i not in group_dims]
    # order group dims as listed in the attribute (major to minor)
    group_dims = sorted(group_dims, key=lambda i: names.index(axes[i][0]))
    arr = arr.transpose(other + group_dims).reshape(-1, math.prod(axes[i][1] for i in group_dims) if group_dims else 1)
    return [list(map(int, g)) for g in arr]


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
                    rows = _groups_from_mesh_axes(module, str(attr))
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
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, GENERATE, str(out), "--oracle", *CASES],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.fail(f"generate.py failed:\n{proc.stderr[-4000:]}")
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

"""`costmodel workloads export llama3-*`: the LLaMA-3 training steps (docs/workloads.md),
and their partitioning checked against XLA's SPMD partitioner.

One child process (tests/data/sharded/llama_oracle.py, 8 host CPU devices) lowers every
case with the exporter and compiles the oracle cases with XLA, keeping the HLO right
after XLA's `spmd-partitioning` pass; this process never creates jax's CPU backend.
Sequences of 32 tokens and 2 per data-parallel device, 2 layers: the collectives' count
does not depend on the sizes (their bytes do, on both sides alike).

Compared per case, as in tests/test_spmd_oracle.py: the multiset of (kind, group size),
per-kind operand bytes and the device groups of our `propagate-shardings` (with
`reduce-scatter=false`: XLA CPU forms none) against XLA's. XLA's side is first put
through what its GPU pipeline runs right after partitioning, AllReduceFolder (two
all-reduces in a row over orthogonal groups, the first used only by the second, are one
all-reduce over the product groups: XLA's partitioner reduces over an FSDP x TP sharded
tensor one mesh axis at a time; Shardy over both at once).
"""

from __future__ import annotations

import collections
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from costmodel.ir import DiagnosticEngine, ir, load_module, make_context, walk_ops
from costmodel.passes import PassSession, get_pass
from costmodel.shapes import type_info
from costmodel.workloads import configs

HERE = os.path.dirname(__file__)
ORACLE = os.path.join(HERE, "data", "sharded", "llama_oracle.py")
sys.path.insert(0, os.path.join(HERE, "data", "sharded"))
import llama_oracle  # noqa: E402

from collective_oracle import KINDS, groups_from_mesh_axes, run_generator  # noqa: E402

ORACLE_CASES = list(llama_oracle.CASES)
EXPORT_CASES = list(llama_oracle.EXPORTS)


# ---------------------------------------------------------------------------
# configurations (no jax)
# ---------------------------------------------------------------------------


def test_paper_100m_is_the_published_maxtext_config():
    """hespas docs/tutorials/ispass_2026_workshop.rst, llama3-100m.yml: base_emb_dim 576,
    9 query and 9 kv heads, head_dim 128, 7 decoder layers, mlp_dim 2016, vocab 128256,
    logits_via_embedding False, rope_max_timescale 500000, epsilon 1e-5."""
    c = configs.LLAMA_MODELS["llama3-100m"]
    assert (c.hidden, c.heads, c.kv_heads, c.head_dim, c.layers, c.ffn, c.vocab) == (576, 9, 9, 128, 7, 2016, 128256)
    assert not c.tied_embeddings and c.rope_theta == 500000.0 and c.norm_eps == 1e-5


@pytest.mark.parametrize(
    "name, total",
    [
        # Meta's published sizes (Hugging Face model cards: 1.24B, 3.21B, 8.03B)
        ("llama3-1b", 1_235_814_400),
        ("llama3-3b", 3_212_749_824),
        ("llama3-8b", 8_030_261_248),
    ],
)
def test_meta_param_counts(name, total):
    assert configs.llama_param_count(configs.LLAMA_MODELS[name]) == total


def test_param_count_formula():
    c = configs.LLAMA_MODELS["llama3-8b"]
    d, v, f, kv_dim = 4096, 128256, 14336, 8 * 128
    layer = d * d + 2 * d * kv_dim + d * d + 3 * d * f + 2 * d  # wq, wk + wv, wo, SwiGLU, 2 norms
    assert configs.llama_layer_params(c) == layer
    assert configs.llama_param_count(c) == v * d + 32 * layer + d + d * v  # embedding, layers, final norm, head
    assert configs.llama_nominal_params(c) == configs.llama_param_count(c) - d * v


@pytest.mark.parametrize("name", list(configs.LLAMA_MODELS))
def test_nominal_size_matches_the_name(name):
    c = configs.LLAMA_MODELS[name]
    nominal = {"m": 1e6, "b": 1e9}[name[-1]] * float(name.split("-")[1][:-1])
    # the paper's 100m is 117M by this count; ours are within 25 % of their name
    assert 0.75 * nominal <= configs.llama_nominal_params(c) <= 1.25 * nominal
    assert c.heads % c.kv_heads == 0 and c.head_dim % 2 == 0 and c.source


# ---------------------------------------------------------------------------
# CLI errors (one line, before anything is lowered)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["llama3-100m", "--mesh", "tp=4"], "llama3-100m has 9 attention heads, not divisible by tp=4"),
        (["llama3-1b", "--mesh", "tp=16"], "llama3-1b has 8 key/value heads, not divisible by tp=16"),
        (["llama3-100m", "--mesh", "fsdp=5"], "hidden size 576 is not divisible by fsdp=5"),
        (["llama3-1b", "--mesh", "dp=2,fsdp=2", "--global-batch", "6"], "global batch 6 is not divisible by the 4"),
        (["llama3-1b", "--mesh", "pp=2"], "bad mesh 'pp=2': expected AXIS=SIZE items with AXIS one of dp, fsdp, tp"),
        (["llama3-1b", "--mesh", "dp=0"], "size of dp must be >= 1"),
        (["llama3-1b", "--mesh", "dp=2,dp=2"], "axis dp given twice"),
        (["llama3-1b", "--seq-len", "0"], "sequence length must be a positive integer"),
        (["llama3-1b", "--sharding", "auto"], "unknown sharding 'auto' (choose from shardy, gspmd)"),
        (["llama3-1b", "--param-dtype", "f16"], "unknown parameter dtype 'f16'"),
        (["llama3-1b", "--devices", "4"], "--devices: ResNet options, not for llama3-1b"),
        (["llama3-1b", "--no-sync-batch-stats"], "--no-sync-batch-stats: ResNet options, not for llama3-1b"),
        (["resnet18", "--mesh", "fsdp=4"], "--mesh: LLaMA-3 options, not for resnet18"),
        (["resnet18", "--scan"], "--scan: LLaMA-3 options, not for resnet18"),
        (["llama3-7b"], "unknown model 'llama3-7b'"),
    ],
)
def test_export_errors_are_one_line(argv, message, capsys, tmp_path):
    from costmodel.cli import main

    out = tmp_path / "never.mlir"
    assert main(["workloads", "export", *argv, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("costmodel: error: ") and message in err, err
    assert err.count("\n") == 1
    assert not out.exists()


def test_list(capsys):
    from costmodel.cli import main

    assert main(["workloads", "list"]) == 0
    out = capsys.readouterr().out
    for name, cfg in configs.LLAMA_MODELS.items():
        line = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
        assert f"{configs.llama_param_count(cfg):,}" in line and cfg.source in line


# ---------------------------------------------------------------------------
# the exports (one child process)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama_oracle")
    run_generator(ORACLE, out, [*ORACLE_CASES, *EXPORT_CASES], timeout=600)
    return out


@pytest.fixture(scope="module")
def ctx():
    return make_context()


def _load(ctx, path):
    with open(path, "rb") as fh:
        return load_module(ctx, fh.read(), str(path))


def _main(module):
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise AssertionError("no main")


def _arg_types(module):
    ft = ir.FunctionType(ir.TypeAttr(_main(module).attributes["function_type"]).value)
    return [ir.RankedTensorType(t) for t in ft.inputs]


def _arg_attr_count(module, name):
    attrs = ir.ArrayAttr(_main(module).attributes["arg_attrs"])
    return sum(1 for d in attrs if name in ir.DictAttr(d))


def _hist(module):
    return collections.Counter(op.name for op in walk_ops(module))


def test_full_depth_export(generated, ctx):
    """llama3-100m as the paper has it (7 layers) on dp=2 x fsdp=2."""
    cfg = configs.LLAMA_MODELS["llama3-100m"]
    opts = llama_oracle.options("export_100m")
    m = _load(ctx, generated / "export_100m.mlir")
    with ctx:
        assert ir.IntegerAttr(m.attributes["mhlo.num_partitions"]).value == 4
        assert 'sdy.mesh @mesh = <["dp"=2, "fsdp"=2]>' in str(m)
        types = _arg_types(m)
        n = configs.llama_param_leaves(cfg)
        # jax flattens (params, opt_state, batch): the parameters come first
        assert sum(math.prod(t.shape) for t in types[:n]) == configs.llama_param_count(cfg)
        assert {str(t.element_type) for t in types[:n]} == {"f32"}
        # AdamW's two moments per parameter, step counts, the batch's inputs and targets
        counts = [t for t in types[n:-2] if t.rank == 0]
        moments = [t for t in types[n:-2] if t.rank > 0]
        assert sum(math.prod(t.shape) for t in moments) == 2 * configs.llama_param_count(cfg)
        assert len(counts) >= 1 and all(str(t.element_type) == "i32" for t in counts)
        assert [(list(t.shape), str(t.element_type)) for t in types[-2:]] == [([opts.batch, opts.seq_len], "i32")] * 2
        # parameters and optimizer state donated, the batch not
        assert _arg_attr_count(m, "tf.aliasing_output") == len(types) - 2
    hist = _hist(m)
    # per layer 7 projections + 2 attention products forward, each with two backward
    # products (the input's and the weight's; the attention products both inputs'),
    # and the output head likewise; the embedding lookup is a gather
    assert hist["stablehlo.dot_general"] == 3 * (9 * cfg.layers + 1)
    assert hist["stablehlo.gather"] == 1
    assert hist["stablehlo.rsqrt"] >= 2 * cfg.layers + 1  # RMSNorm


def test_scan_export(generated, ctx):
    """--scan: one while loop over stacked layer parameters (forward and backward)."""
    m = _load(ctx, generated / "export_scan.mlir")
    hist = _hist(m)
    assert hist["stablehlo.while"] == 2
    with ctx:
        shapes = [list(t.shape) for t in _arg_types(m)]
    assert [3, 576, 9, 128] in shapes and [3, 2016, 576] in shapes  # wq, w_down stacked over 3 layers
    assert hist["stablehlo.dot_general"] < 3 * (9 * 3 + 1)  # the layer's products once per loop body


def test_8b_export(generated, ctx):
    """Llama 3 8B's widths (one layer): GQA 32/8 heads of 128, SwiGLU 14336, untied head,
    on fsdp=2 x tp=4; abstract arguments, nothing allocated."""
    m = _load(ctx, generated / "export_8b.mlir")
    text = str(m)
    with ctx:
        shapes = [list(t.shape) for t in _arg_types(m)]
    for shape in ([128256, 4096], [4096, 32, 128], [4096, 8, 128], [32, 128, 4096], [4096, 14336], [4096, 128256]):
        assert shape in shapes, shape
    assert 'sdy.sharding<@mesh, [{"fsdp"}, {"tp"}, {}]>' in text  # wq / wk / wv: column parallel
    assert 'sdy.sharding<@mesh, [{"tp"}, {}, {"fsdp"}]>' in text  # wo: row parallel


def test_cli_export_equals_the_library_lowering(generated, tmp_path):
    """The command writes what `lower_llama` lowers (deterministic, the same bytes)."""
    out = tmp_path / "cli.mlir"
    opts = llama_oracle.options("dp_tp")
    proc = subprocess.run(
        [
            sys.executable, "-m", "costmodel.cli", "workloads", "export", opts.model, "--mesh", opts.mesh_text(),
            "--seq-len", str(opts.seq_len), "--global-batch", str(opts.batch), "--layers", str(opts.layers), "-o", str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes() == (generated / "dp_tp.mlir").read_bytes()


# ---------------------------------------------------------------------------
# the SPMD-partitioner oracle
# ---------------------------------------------------------------------------


def _groups(module, op, by_channel=None):
    if by_channel is not None:
        # XLA's side: the groups read from its HLO text (llama_oracle.py), by channel id
        handle = re.search(r"handle = (\d+)", str(op.attributes["channel_handle"])).group(1)
        return frozenset(frozenset(int(x) for x in r) for r in by_channel[handle])
    attr = op.attributes["replica_groups"]
    try:
        dense = ir.DenseIntElementsAttr(attr)
        rows = np.array(dense).reshape(dense.type.shape).tolist()
    except ValueError:
        rows = groups_from_mesh_axes(module, str(attr))
    return frozenset(frozenset(int(x) for x in r) for r in rows)


def _body(op):
    return tuple(o.operation.name for r in op.regions for b in r.blocks for o in b.operations)


def collectives(module, *, fold_all_reduces: bool = False, by_channel=None):
    """[(kind, group size, operand bytes, groups)]; `fold_all_reduces`: as XLA's
    AllReduceFolder (module doc); `by_channel`: groups by channel id (XLA's side)."""
    entries = []
    index = {}
    for op in walk_ops(module):
        if op.name not in KINDS:
            continue
        kind = op.name.split(".", 1)[1]
        nbytes = sum(type_info(v.type).nbytes for v in op.operands)
        if kind == "collective_permute":
            pairs = np.array(ir.DenseIntElementsAttr(op.attributes["source_target_pairs"])).reshape(-1, 2)
            groups = frozenset(frozenset((int(a), int(b))) for a, b in pairs if a != b)
        else:
            groups = _groups(module, op, by_channel)
        index[op] = len(entries)
        entries.append([kind, nbytes, groups, op])
    if fold_all_reduces:
        for e in entries:
            kind, _, groups, op = e
            if kind != "all_reduce" or len(op.operands) != 1:
                continue
            owner = op.operands[0].owner
            first = index.get(getattr(owner, "operation", None))
            if first is None:
                continue
            f = entries[first]
            if f[0] != "all_reduce" or len(list(f[3].results[0].uses)) != 1 or _body(f[3]) != _body(op):
                continue
            merged = _product(f[2], groups)
            if merged is None:
                continue
            e[0] = "folded"
            f[2] = merged
    return [(k, len(next(iter(g))) if g else 0, b, g) for k, b, g, _ in entries if k != "folded"]


def _product(a, b):
    """The groups of two all-reduces in a row, if every merged group is a product of one
    group of each (orthogonal groups); else None."""
    parent = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    for g in (*a, *b):
        g = sorted(g)
        for x in g[1:]:
            parent[find(x)] = find(g[0])
    merged = collections.defaultdict(set)
    for g in (*a, *b):
        for x in g:
            merged[find(x)].add(x)
    size = len(next(iter(a))) * len(next(iter(b)))
    if any(len(g) != size for g in merged.values()):
        return None
    return frozenset(frozenset(g) for g in merged.values())


def summary(colls):
    kinds = collections.Counter((k, n) for k, n, _, _ in colls)
    per_kind_bytes = collections.Counter()
    for k, _, b, _ in colls:
        per_kind_bytes[k] += b
    groups = collections.Counter((k, g) for k, _, _, g in colls)
    return kinds, dict(per_kind_bytes), groups


def _xla(ctx, generated, case, fold_all_reduces=False):
    with open(generated / f"{case}.xla.groups.json") as fh:
        by_channel = json.load(fh)
    module = _load(ctx, generated / f"{case}.xla.mlirbc")
    return collectives(module, fold_all_reduces=fold_all_reduces, by_channel=by_channel)


_PARTITIONED: dict = {}


def _partition(ctx, path, reduce_scatter: bool):
    """Our per-device program (cached: several tests read the same case)."""
    key = (str(path), reduce_scatter)
    if key not in _PARTITIONED:
        _PARTITIONED[key] = _run_partition(ctx, path, reduce_scatter)
    return _PARTITIONED[key]


def _run_partition(ctx, path, reduce_scatter: bool):
    module = _load(ctx, path)
    session = PassSession(DiagnosticEngine(str(path)))
    get_pass("propagate-shardings").run(module, {"per-device": True, "reduce-scatter": reduce_scatter, "extra": {}}, session)
    assert not session.diagnostics.has_errors, [d.render() for d in session.diagnostics.diagnostics]
    return module


def _weight_matrices(case):
    model, _, layers, _, _ = llama_oracle.CASES[case]
    cfg = configs.LLAMA_MODELS[model]
    return 7 * layers + 1 + (0 if cfg.tied_embeddings else 1)


@pytest.mark.parametrize("case", ORACLE_CASES)
def test_collectives_match_xla_spmd_partitioner(generated, ctx, case):
    ours = collectives(_partition(ctx, generated / f"{case}.mlir", reduce_scatter=False))
    xla = _xla(ctx, generated, case, fold_all_reduces=True)
    o_kinds, o_bytes, o_groups = summary(ours)
    x_kinds, x_bytes, x_groups = summary(xla)
    assert o_kinds == x_kinds, f"{case}: kinds/group sizes differ: ours {o_kinds} xla {x_kinds}"
    assert o_bytes == x_bytes, f"{case}: per-kind bytes differ: ours {o_bytes} xla {x_bytes}"
    assert o_groups == x_groups, f"{case}: device groups differ"
    # what each case must contain, so that one that lost its collectives on both sides fails
    _, mesh, _, _, _ = llama_oracle.CASES[case]
    gathers = sum(1 for k, *_ in ours if k == "all_gather")
    reduces = sum(1 for k, *_ in ours if k == "all_reduce")
    # FSDP all-gathers every weight matrix once (forward and backward share it)
    assert gathers == (_weight_matrices(case) if mesh["fsdp"] > 1 else 0)
    assert reduces >= _weight_matrices(case)  # at least every matrix's gradient (or TP partial sums)


def test_xla_splits_fsdp_x_tp_reductions_that_allreducefolder_merges(generated, ctx):
    """Why XLA's side is folded: on fsdp=2 x tp=4 XLA reduces a gradient's squared norm
    over one mesh axis, then the other (two all-reduces over 2 and 4 devices); Shardy and
    XLA's GPU pipeline after AllReduceFolder use one over all 8."""
    raw, folded = _xla(ctx, generated, "fsdp_tp"), _xla(ctx, generated, "fsdp_tp", fold_all_reduces=True)
    pairs = len(raw) - len(folded)
    assert pairs > 0
    assert collections.Counter(n for k, n, *_ in folded if k == "all_reduce")[8] == pairs


@pytest.mark.parametrize("case", ["fsdp", "fsdp_tp"])
def test_fsdp_gradients_become_reduce_scatters(generated, ctx, case):
    """With reduce-scatter on (GPU/TPU), each all-reduce whose users all keep 1/n of it
    becomes a reduce-scatter over the same group and operand: the same count and bytes
    as the all-reduces it replaces, one per FSDP-sharded weight matrix (as XLA GPU forms
    them: the ISPASS paper's llama3-100m export has 51 reduce-scatters = 7 x 7 layer
    matrices + embedding + head, hespas docs/tutorials/ispass_2026_workshop.rst)."""
    without = collectives(_partition(ctx, generated / f"{case}.mlir", reduce_scatter=False))
    with_rs = collectives(_partition(ctx, generated / f"{case}.mlir", reduce_scatter=True))

    def tally(colls, kinds):
        picked = [(n, b) for k, n, b, _ in colls if k in kinds]
        return len(picked), sum(b for _, b in picked), collections.Counter(n for n, _ in picked)

    assert tally(with_rs, {"all_reduce", "reduce_scatter"}) == tally(without, {"all_reduce"})
    # one per FSDP-sharded weight matrix; but a tied embedding's gradient is the sum of
    # two all-reduces (the lookup's and the output head's) before its slice, which only
    # XLA's AllReduceReassociate would turn into one all-reduce (not modelled): it stays
    model = llama_oracle.CASES[case][0]
    tied = configs.LLAMA_MODELS[model].tied_embeddings
    assert sum(1 for k, *_ in with_rs if k == "reduce_scatter") == _weight_matrices(case) - (1 if tied else 0)
    assert [c for c in with_rs if c[0] not in ("all_reduce", "reduce_scatter")] == [
        c for c in without if c[0] != "all_reduce"
    ]


def test_hybrid_gradients_split_into_reduce_scatter_and_all_reduce(generated, ctx):
    """dp=2 x fsdp=4: a gradient all-reduced over all 8 devices of which each keeps 1/4 is,
    on XLA GPU, split by AllReduceSplitter (an all-reduce over the fsdp groups, the slice,
    an all-reduce of the slice over the dp groups), and the first becomes a reduce-scatter
    (ReduceScatterCreator): per FSDP weight matrix one reduce-scatter over {0..3},{4..7}
    with the bytes of the all-reduce it replaces, and one all-reduce over {0,4},{1,5}...
    of a quarter of them."""
    without = collectives(_partition(ctx, generated / "dp_fsdp.mlir", reduce_scatter=False))
    with_rs = collectives(_partition(ctx, generated / "dp_fsdp.mlir", reduce_scatter=True))
    fsdp_groups = frozenset({frozenset(range(4)), frozenset(range(4, 8))})
    dp_groups = frozenset(frozenset((g, g + 4)) for g in range(4))
    everyone = frozenset({frozenset(range(8))})
    rs = [(b, groups) for k, _n, b, groups in with_rs if k == "reduce_scatter"]
    split_ar = sorted(b for k, _n, b, groups in with_rs if k == "all_reduce" and groups == dp_groups)
    model = llama_oracle.CASES["dp_fsdp"][0]
    tied = configs.LLAMA_MODELS[model].tied_embeddings
    assert len(rs) == _weight_matrices("dp_fsdp") - (1 if tied else 0)
    assert all(groups == fsdp_groups for _, groups in rs)
    assert split_ar == sorted(b // 4 for b, _ in rs)  # the slice each device keeps, reduced over dp
    # the reduce-scatters take exactly the place of all-reduces over all 8 devices
    full_before = sorted(b for k, _n, b, groups in without if k == "all_reduce" and groups == everyone)
    full_after = sorted(b for k, _n, b, groups in with_rs if k == "all_reduce" and groups == everyone)
    assert sorted(full_after + [b for b, _ in rs]) == full_before
    # nothing else changes
    others = lambda colls: sorted((k, b) for k, _n, b, groups in colls if k != "reduce_scatter" and not (
        k == "all_reduce" and groups in (everyone, dp_groups)))
    assert others(with_rs) == others(without)


def test_dp_tp_shardy_and_gspmd_exports_partition_alike(generated, ctx):
    ours_sdy = summary(collectives(_partition(ctx, generated / "dp_tp.mlir", reduce_scatter=False)))
    ours_gspmd = summary(collectives(_partition(ctx, generated / "dp_tp_gspmd.mlir", reduce_scatter=False)))
    assert ours_sdy[:2] == ours_gspmd[:2]
    text = (generated / "dp_tp_gspmd.mlir").read_text()
    assert "mhlo.sharding" in text and "sdy.sharding" not in text


def test_options_travel_to_the_child_process_as_json():
    """export_text lowers in a child process (`python -m costmodel.workloads.export JSON`)
    when this one's jax has too few devices: the JSON names the options' class."""
    from costmodel.workloads.export import ExportOptions, LlamaExportOptions, options_from_json

    opts = LlamaExportOptions("llama3-8b", mesh={"dp": 2, "fsdp": 2, "tp": 2}, seq_len=16, layers=1, scan=True)
    back = options_from_json(opts.to_json())
    assert isinstance(back, LlamaExportOptions) and back == opts and back.devices == 8 and back.batch == 4
    resnet = ExportOptions("resnet18", devices=2, global_batch=4)
    assert options_from_json(resnet.to_json()) == resnet

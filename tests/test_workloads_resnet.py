"""`costmodel workloads`: the exported ResNet steps (docs/workloads.md).

The two exports run `costmodel` in child processes, so this pytest process never creates
jax's CPU backend with 4 devices (other tests use jax in-process). Small on purpose:
global batch 8 on 4 devices, 64x64 images (the op structure does not depend on either).
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys

import pytest

from costmodel.ir import ir, load_module, make_context, walk_ops
from costmodel.workloads import configs

DEVICES = 4
GLOBAL_BATCH = 8
IMAGE_SIZE = 64
R18 = configs.MODELS["resnet18"]
R50 = configs.MODELS["resnet50"]


def _costmodel(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "costmodel.cli", *args], capture_output=True, text=True)


def _export(tmp_path_factory, name: str, *extra: str) -> str:
    path = str(tmp_path_factory.mktemp("workloads") / f"{name}.mlir")
    common = ["--devices", str(DEVICES), "--global-batch", str(GLOBAL_BATCH), "--image-size", str(IMAGE_SIZE)]
    proc = _costmodel("workloads", "export", "resnet18", *common, *extra, "-o", path)
    assert proc.returncode == 0, proc.stderr
    return path


class Module:
    def __init__(self, path: str) -> None:
        self.path = path
        self.ctx = make_context()
        with self.ctx:
            self.op = load_module(self.ctx, open(path, encoding="utf-8").read(), path)
            self.ops = list(walk_ops(self.op))
            self.hist = collections.Counter(op.name for op in self.ops)

    def attr_int(self, name: str) -> int:
        with self.ctx:
            return ir.IntegerAttr(self.op.attributes[name]).value

    def main(self):
        return next(
            op for op in self.ops if op.name == "func.func" and ir.StringAttr(op.attributes["sym_name"]).value == "main"
        )

    def named(self, name: str) -> list:
        return [op for op in self.ops if op.name == name]

    @staticmethod
    def shape(value) -> tuple[tuple[int, ...], str]:
        t = ir.RankedTensorType(value.type)
        return tuple(t.shape), str(t.element_type)


@pytest.fixture(scope="module")
def train_bf16(tmp_path_factory) -> Module:
    return Module(_export(tmp_path_factory, "train_bf16", "--mode", "train", "--dtype", "bf16"))


@pytest.fixture(scope="module")
def inference_f32(tmp_path_factory) -> Module:
    return Module(_export(tmp_path_factory, "inference_f32", "--mode", "inference", "--dtype", "f32"))


# ---------------------------------------------------------------------------
# configurations (no jax)
# ---------------------------------------------------------------------------


def test_configs_depth_and_conv_formula():
    for name, cfg in configs.MODELS.items():
        assert f"resnet{cfg.depth}" == name
        convs = configs.forward_convs(cfg)
        # F = 1 stem + (2 basic | 3 bottleneck) per block + one projection per stage
        # whose first block changes the shape (basic: 3, bottleneck: 4)
        assert len(convs) == configs.num_forward_convs(cfg)
        assert sum(c.name.endswith(".proj") for c in convs) == configs.num_projections(cfg)
    assert configs.num_forward_convs(R18) == 1 + 2 * (2 + 2 + 2 + 2) + 3 == 20
    assert configs.num_forward_convs(R50) == 1 + 3 * (3 + 4 + 6 + 3) + 4 == 53


def test_configs_match_published_sizes():
    # torchvision's parameter counts (the same architecture: no conv bias, BN scale+bias)
    assert configs.param_count(R18) == 11_689_512
    assert configs.param_count(configs.MODELS["resnet34"]) == 21_797_672
    assert configs.param_count(R50) == 25_557_032
    assert configs.param_count(configs.MODELS["resnet101"]) == 44_549_160
    # 1.82 GMACs (torchvision's "GFLOPS" for resnet18) = 3.63 GFLOP at 224x224
    assert configs.forward_flops_per_image(R18) == 3_628_146_688
    # spatial sizes: 224 -> 112 (stem) -> 56 (pool) -> 56, 28, 14, 7
    assert [c.out_size for c in configs.forward_convs(R18) if c.name.endswith("conv2")][::2] == [56, 28, 14, 7]


def test_flax_model_parameter_count():
    """The flax model has exactly the parameters of configs.param_count (abstract init only)."""
    import math

    import jax

    from costmodel.workloads.export import ExportOptions, abstract_state_and_batch

    for cfg in (R18, R50):
        opts = ExportOptions(cfg.name, global_batch=GLOBAL_BATCH, image_size=IMAGE_SIZE)
        _model, state, batch = abstract_state_and_batch(opts)
        leaves = jax.tree_util.tree_leaves(state.params)
        assert len(leaves) == configs.param_leaves(cfg)
        assert sum(math.prod(x.shape) for x in leaves) == configs.param_count(cfg)
        stats = jax.tree_util.tree_leaves(state.batch_stats)
        assert sum(math.prod(x.shape) for x in stats) == configs.batch_stat_count(cfg)
        assert batch["image"].shape == (DEVICES, GLOBAL_BATCH // DEVICES, IMAGE_SIZE, IMAGE_SIZE, 3)


# ---------------------------------------------------------------------------
# the exported modules
# ---------------------------------------------------------------------------


def test_replica_form(train_bf16):
    m = train_bf16
    assert m.attr_int("mhlo.num_replicas") == DEVICES
    assert m.attr_int("mhlo.num_partitions") == 1
    assert not [op.name for op in m.ops if op.name.startswith("sdy.")]
    for op in m.named("stablehlo.all_reduce"):
        assert "channel_handle" not in op.attributes  # cross-replica mode
        assert str(op.attributes["replica_groups"]).startswith("dense<[[0, 1, 2, 3]]>")


def test_train_convolutions(train_bf16):
    convs = train_bf16.named("stablehlo.convolution")
    f = configs.num_forward_convs(R18)  # 20
    # F forward + F weight gradients + (F - 1) input gradients (none for the image) = 3F - 1
    assert len(convs) == 3 * f - 1 == configs.num_train_convs(R18) == 59
    # a weight-gradient convolution yields a kernel (H x W x Cin x Cout), the others a
    # batch of activations (per-device batch first)
    kernel_shapes = collections.Counter(
        (c.kernel, c.kernel, c.in_channels, c.out_channels) for c in configs.forward_convs(R18)
    )
    weight_grads = collections.Counter(
        Module.shape(op.results[0])[0] for op in convs if Module.shape(op.results[0])[0][0] != GLOBAL_BATCH // DEVICES
    )
    assert weight_grads == kernel_shapes


def test_train_mixed_precision(train_bf16):
    """bf16 convolutions on f32 parameters (cast in the step), f32 gradient all_reduces."""
    m = train_bf16
    for op in m.named("stablehlo.convolution"):
        types = {Module.shape(v)[1] for v in list(op.operands) + list(op.results)}
        assert types == {"bf16"}
    main = m.main()
    arg_types = collections.Counter(Module.shape(a) for a in main.regions[0].blocks[0].arguments)
    for c in configs.forward_convs(R18):
        assert arg_types[((c.kernel, c.kernel, c.in_channels, c.out_channels), "f32")] >= 1
    per_device = GLOBAL_BATCH // DEVICES
    assert arg_types[((1, per_device, IMAGE_SIZE, IMAGE_SIZE, 3), "bf16")] == 1  # this replica's images
    assert {Module.shape(op.operands[0])[1] for op in m.named("stablehlo.all_reduce")} == {"f32"}
    assert m.hist["stablehlo.is_finite"] == configs.param_leaves(R18)  # dynamic loss scaling (auto for bf16)


def test_train_all_reduces(train_bf16):
    m = train_bf16
    f = configs.num_forward_convs(R18)
    # (3F + 2) gradients + F forward and F backward batch statistics + 2 metrics
    # + 2F synchronised running statistics = 7F + 4
    assert m.hist["stablehlo.all_reduce"] == (3 * f + 2) + 2 * f + 2 + 2 * f == configs.train_all_reduces(R18) == 144
    stats = [op for op in m.named("stablehlo.all_reduce") if Module.shape(op.operands[0])[0][:1] == (2,)]
    assert len(stats) == 2 * f  # [mean; mean of squares] stacked, forward and backward
    assert m.hist["stablehlo.concatenate"] == f
    assert m.hist["stablehlo.reduce_window"] == 1 and m.hist["stablehlo.select_and_scatter"] == 1  # max pool


def test_inference_f32(inference_f32):
    m = inference_f32
    assert m.attr_int("mhlo.num_replicas") == DEVICES
    assert m.hist["stablehlo.convolution"] == configs.num_forward_convs(R18) == 20
    assert {Module.shape(op.results[0])[1] for op in m.named("stablehlo.convolution")} == {"f32"}
    assert m.hist["stablehlo.all_reduce"] == 0  # running statistics, no metrics: no collective
    main = m.main()
    results = [Module.shape(v) for v in main.regions[0].blocks[0].operations[-1].operands]
    assert results == [((1, GLOBAL_BATCH // DEVICES, configs.NUM_CLASSES), "f32")]


def test_costs_and_collectives(train_bf16, tmp_path):
    from costmodel.driver import main as stablehlo_opt

    out = str(tmp_path / "r18.cost.mlir")
    rc = stablehlo_opt(
        [train_bf16.path, "--annotate-cost", "--extract-collectives=system=a100-40gb-x4 chakra=false", "-o", out]
    )
    assert rc == 0
    m = Module(out)
    with m.ctx:
        summary = ir.DictAttr(m.op.attributes["costmodel.summary"])
        assert ir.IntegerAttr(summary["unsupported_count"]).value == 0
        assert ir.IntegerAttr(summary["collective_count"]).value == configs.train_all_reduces(R18)
        assert ir.IntegerAttr(summary["total_flops"]).value > 0
    assert len([op for op in m.ops if "costmodel.collective" in op.attributes]) == 144


def test_child_process_export():
    """export_text's other path: a child Python process with its own device count."""
    from costmodel.workloads.export import ExportOptions, export_text

    opts = ExportOptions("resnet18", mode="inference", devices=2, global_batch=2, image_size=32, dtype="f32")
    text = export_text(opts, allow_in_process=False)
    header = "module @pmap_inference_step attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32}"
    assert text.startswith(header)
    assert text.count("stablehlo.convolution") == 20


# ---------------------------------------------------------------------------
# the CLI: one-line errors, list
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["resnet18", "--global-batch", "10"], "global batch 10 is not divisible by 4 devices"),
        (["resnet19"], "unknown model 'resnet19' (choose from resnet18, resnet34, resnet50, resnet101, resnet200, llama3-100m,"),
        (["resnet18", "--mode", "eval"], "unknown mode 'eval'"),
        (["resnet18", "--dtype", "f16"], "unknown dtype 'f16'"),
        (["resnet18", "--devices", "0"], "devices must be a positive integer"),
        (
            ["resnet18", "--mode", "inference", "--loss-scale", "dynamic"],
            "loss scaling applies to the training step only",
        ),
    ],
)
def test_export_errors_are_one_line(argv, message, capsys, tmp_path):
    from costmodel.cli import main

    out = tmp_path / "never.mlir"
    assert main(["workloads", "export", *argv, "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("costmodel: error: ") and message in err
    assert err.count("\n") == 1
    assert not out.exists()


def test_list(capsys):
    from costmodel.cli import main

    assert main(["workloads", "list"]) == 0
    out = capsys.readouterr().out
    for name, cfg in configs.MODELS.items():
        line = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
        assert f"{configs.param_count(cfg):,}" in line
        assert "-".join(map(str, cfg.stage_sizes)) in line
        assert cfg.block in line


def test_jax_not_imported_by_list_or_errors():
    """`list` and argument errors work without importing jax (fast, and without the extra)."""
    code = (
        "import sys; from costmodel.cli import main; "
        "rc = main(['workloads', 'list']); rc2 = main(['workloads', 'export', 'resnet19']); "
        "sys.exit(0 if rc == 0 and rc2 == 1 and 'jax' not in sys.modules and 'flax' not in sys.modules else 3)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------
# the replica-form rewrite on its own (no jax)
# ---------------------------------------------------------------------------

SHARD_MAP_PMAP = """
module @jit_f attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["b"=2]>
  func.func public @main(%arg0: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, %arg1: tensor<2x3xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"b"}, {}]>}) -> (tensor<4xf32> {jax.result_info = "s"}, tensor<2xui32> {jax.result_info = "p", sdy.sharding = #sdy.sharding<@mesh, [{"b"}]>}) {
    %0:2 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{}]>, <@mesh, [{"b"}, {}]>] out_shardings=[<@mesh, [{}]>, <@mesh, [{"b"}]>] manual_axes={"b"} (%a: tensor<4xf32>, %x: tensor<1x3xf32>) {
      %p = stablehlo.partition_id : tensor<ui32>
      %s = "stablehlo.all_reduce"(%a) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
      ^bb0(%l: tensor<f32>, %r: tensor<f32>):
        %t = stablehlo.add %l, %r : tensor<f32>
        stablehlo.return %t : tensor<f32>
      }) : (tensor<4xf32>) -> tensor<4xf32>
      %q = stablehlo.reshape %p : (tensor<ui32>) -> tensor<1xui32>
      sdy.return %s, %q : tensor<4xf32>, tensor<1xui32>
    } : (tensor<4xf32>, tensor<2x3xf32>) -> (tensor<4xf32>, tensor<2xui32>)
    return %0#0, %0#1 : tensor<4xf32>, tensor<2xui32>
  }
}
"""


def test_replica_form_rewrite():
    from costmodel.workloads.replicas import to_replica_form

    text = to_replica_form(SHARD_MAP_PMAP, 2, module_name="pmap_f")
    assert text.startswith("module @pmap_f attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 2 : i32} {\n")
    assert "sdy." not in text and "channel_handle" not in text and "use_global_device_ids" not in text
    assert "stablehlo.replica_id : tensor<ui32>" in text and "partition_id" not in text
    assert (
        "@main(%arg0: tensor<4xf32> {mhlo.is_same_data_across_replicas = true}, %arg1: tensor<1x3xf32>)"
        ' -> (tensor<4xf32> {jax.result_info = "s"}, tensor<1xui32> {jax.result_info = "p"})'
    ) in text
    assert "replica_groups = dense<[[0, 1]]>" in text


def test_replica_form_refuses_other_modules():
    from costmodel.workloads.replicas import ReplicaFormError, to_replica_form

    with pytest.raises(ReplicaFormError, match="expected mhlo.num_partitions = 4"):
        to_replica_form(SHARD_MAP_PMAP, 4)
    plain = "module attributes {mhlo.num_partitions = 2 : i32} {\n  func.func public @main() {\n    return\n  }\n}\n"
    with pytest.raises(ReplicaFormError, match="expected one sdy.mesh"):
        to_replica_form(plain, 2)


def test_single_device_export(train_bf16, tmp_path):
    """--devices 1 (the program benchmarks/gpu_measure.py times on one GPU): jax inlines
    the one-device shard_map, so the replica form only drops the mesh and shardings; the
    cross-replica means stay, over one replica, and the per-device program is the one of
    the 4-device export."""
    path = str(tmp_path / "r18_1.mlir")
    common = ["--global-batch", str(GLOBAL_BATCH // DEVICES), "--image-size", str(IMAGE_SIZE)]
    proc = _costmodel("workloads", "export", "resnet18", "--devices", "1", *common, "-o", path)
    assert proc.returncode == 0, proc.stderr
    one = Module(path)
    assert one.attr_int("mhlo.num_replicas") == 1 and one.attr_int("mhlo.num_partitions") == 1
    text = open(path, encoding="utf-8").read()
    assert "sdy." not in text
    assert "replica_groups = dense<0> : tensor<1x1xi64>" in text
    four = train_bf16
    assert one.hist["stablehlo.convolution"] == four.hist["stablehlo.convolution"] == configs.num_train_convs(R18)
    assert one.hist["stablehlo.all_reduce"] == four.hist["stablehlo.all_reduce"] == configs.train_all_reduces(R18)
    assert [Module.shape(a) for a in one.main().regions[0].blocks[0].arguments] == [
        Module.shape(a) for a in four.main().regions[0].blocks[0].arguments
    ]


def test_export_pipeline_simulate_end_to_end(train_bf16, tmp_path):
    """export -> kernel formation -> calibrated costs -> collectives -> Chakra -> simulate."""
    from costmodel.pipeline import predict_step

    with open(train_bf16.path, "rb") as fh:
        data = fh.read()
    cal = predict_step(data, system="a100-40gb-x4", backend="calibrated", source="r18.mlir")
    roof = predict_step(data, system="a100-40gb-x4", backend="roofline", source="r18.mlir")
    assert cal.fusion == roof.fusion == "xla-gpu"
    assert cal.num_ranks == 4 and cal.kernel_count == roof.kernel_count > 0
    # the calibrated step is never faster than its roofline, and both add up
    assert cal.step_time_ms >= roof.step_time_ms > 0
    for p in (cal, roof):
        assert p.step_time_ms == pytest.approx(p.compute_ms + p.exposed_comm_ms, rel=1e-6)
    # kernels move far fewer bytes than the ops would one by one
    unfused = predict_step(data, system="a100-40gb-x4", backend="roofline", fusion="none", source="r18.mlir")
    assert unfused.kernel_count == 0 and unfused.compute_ms > roof.compute_ms


@pytest.mark.parametrize("kw, message", [
    ({"image_size": 99999999999}, "image size 99999999999 is too large (at most 16384 pixels)"),
    ({"image_size": 16}, "image size 16 is too small"),
    ({"weight_decay": float("inf")}, "weight decay must be a finite number >= 0, got inf"),
    ({"weight_decay": float("nan")}, "weight decay must be a finite number >= 0, got nan"),
])
def test_export_options_out_of_range_are_refused(kw, message):
    """A hostile audit exported --image-size 99999999999 (its convolutions then took
    minutes to cost) and --weight-decay inf: both are one-line errors now."""
    from costmodel.workloads.export import ExportError, ExportOptions

    with pytest.raises(ExportError, match=re.escape(message)):
        ExportOptions("resnet18", devices=2, global_batch=4, **kw).validate()


def test_debug_info_export_keeps_op_names_for_scopes(tmp_path_factory, capsys):
    """--debug-info keeps JAX's op names through the replica form; `costmodel kernels --by
    scope` then sums the step's time by flax module, forward and backward apart."""
    from costmodel.cli import main

    path = _export(tmp_path_factory, "r18_debug", "--debug-info")
    assert main(["kernels", path, "--hardware", "h100-sxm", "--by", "scope", "--depth", "2", "--top", "50", "--json"]) == 0
    scopes = {s["scope"] for s in json.loads(capsys.readouterr().out)["scopes"]}
    blocks = [f"jvp(ResNet)/ResNetBlock_{i}" for i in range(sum(R18.stage_sizes))]
    assert set(blocks) <= scopes
    assert {f"transpose({b.split('/')[0]})/{b.split('/')[1]}" for b in blocks} <= scopes

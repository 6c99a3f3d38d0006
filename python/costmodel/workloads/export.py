"""Export a data-parallel JAX ResNet training (or inference) step, or a sharded LLaMA-3
training step (`LlamaExportOptions`, `lower_llama`; the model and its shardings are in
`llama.py`), as StableHLO text.

The step is the one of flax's examples/imagenet `train.py`, the recipe the ISPASS 2026
paper's workloads (imec hespas) were made with (docs/workloads.md compares the result
with the paper's own file):

- `jax.pmap(step, axis_name="batch", in_axes=(None, 0), out_axes=(None, 0))`: the train
  state is replicated, the batch is split over the devices (per-device batch =
  global / devices);
- loss: softmax cross-entropy over the classes (one-hot labels) + L2 weight decay
  (0.5 x wd x sum of squares of every parameter array with ndim > 1);
- gradients averaged with `lax.pmean` (or by flax's `DynamicScale` with
  `axis_name="batch"` when loss scaling is on);
- optimizer: `optax.sgd(lr_schedule, momentum=0.9, nesterov=False)` (option `nesterov`:
  True, as in flax's example and the paper's files); the schedule is flax's example
  one (linear warm-up over 5 epochs, cosine decay over the rest of 100 epochs of
  ImageNet's 1,281,167 images, base lr 0.1 x global_batch / 256) or constant;
- batch norm in training mode with cross-replica batch statistics
  (`BatchNorm(axis_name="batch")`), the new running statistics averaged over the
  replicas at the end of the step (`sync_batch_stats`), loss and accuracy `pmean`-ed;
- inference: the same state and batch in, the logits out (batch norm uses the running
  statistics; no collective).

Nothing is compiled or run: the step is lowered from abstract arguments
(`jax.ShapeDtypeStruct`) with `.lower(...).as_text()`.

jax 0.10 (the version this project pins) implements `pmap` as `jit(shard_map)`: the
lowering has `mhlo.num_partitions = N`, an `sdy.mesh` and one fully manual
`sdy.manual_computation`.
By default (`form="replicas"`) `replicas.to_replica_form` turns that into the module the
classic `pmap` lowering wrote (and the paper's files are): `mhlo.num_replicas = N`, the
per-device body as `main`, cross-replica collectives.

The lowering needs N jax devices. On the host CPU their number is fixed when jax first
creates its backends (`jax_num_cpu_devices`, or `XLA_FLAGS=
--xla_force_host_platform_device_count=N`). `export_text` lowers in this process when
that is still possible (or already true), and otherwise in a child Python process
(`python -m costmodel.workloads.export`) with that environment.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

from .configs import IMAGE_SIZE, LLAMA_MODELS, MODELS, NUM_CLASSES

# the largest image an export accepts: a 64-channel activation of one 16384 x 16384 image
# is 2^34 elements, already past any GPU's memory; larger sizes only overflow shapes
MAX_IMAGE_SIZE = 16384

MODES = ("train", "inference")
DTYPES = ("bf16", "f32")
LOSS_SCALES = ("auto", "dynamic", "none")
LR_SCHEDULES = ("warmup-cosine", "constant")
FORMS = ("replicas", "shard-map")

IMAGENET_TRAIN_IMAGES = 1_281_167
NUM_EPOCHS = 100
WARMUP_EPOCHS = 5
BASE_LR_PER_256 = 0.1


class ExportError(Exception):
    """A bad export request or a failed lowering; str() is one line."""


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    model: str
    mode: str = "train"
    devices: int = 4
    global_batch: int = 1024
    dtype: str = "bf16"
    image_size: int = IMAGE_SIZE
    num_classes: int = NUM_CLASSES
    loss_scale: str = "auto"  # auto: dynamic for bf16 (as the paper's file), none for f32
    lr_schedule: str = "warmup-cosine"
    weight_decay: float = 1e-4
    momentum: float = 0.9
    nesterov: bool = False
    sync_batch_stats: bool = True
    form: str = "replicas"
    # keep JAX's op names and source locations (`as_text(debug_info=True)`): `costmodel
    # kernels --by scope` sums time by them
    debug_info: bool = False

    def validate(self) -> "ExportOptions":
        def choice(what, value, allowed):
            if value not in allowed:
                raise ExportError(f"unknown {what} '{value}' (choose from {', '.join(allowed)})")

        choice("model", self.model, (*MODELS, *LLAMA_MODELS))
        if self.model in LLAMA_MODELS:
            raise ExportError(f"{self.model} is a LLaMA-3 model: export it with LlamaExportOptions")
        choice("mode", self.mode, MODES)
        choice("dtype", self.dtype, DTYPES)
        choice("loss scale", self.loss_scale, LOSS_SCALES)
        choice("lr schedule", self.lr_schedule, LR_SCHEDULES)
        choice("form", self.form, FORMS)
        for what, value in (
            ("devices", self.devices),
            ("global batch", self.global_batch),
            ("image size", self.image_size),
            ("number of classes", self.num_classes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ExportError(f"{what} must be a positive integer, got {value!r}")
        if self.global_batch % self.devices:
            raise ExportError(
                f"global batch {self.global_batch} is not divisible by {self.devices} devices"
            )
        if self.image_size < 32:
            raise ExportError(f"image size {self.image_size} is too small (the network downsamples by 32; use >= 32)")
        if self.image_size > MAX_IMAGE_SIZE:
            raise ExportError(f"image size {self.image_size} is too large (at most {MAX_IMAGE_SIZE} pixels)")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise ExportError(f"weight decay must be a finite number >= 0, got {self.weight_decay}")
        if not 0 <= self.momentum < 1:
            raise ExportError(f"momentum must be in [0, 1), got {self.momentum}")
        if self.dynamic_loss_scale and self.mode != "train":
            raise ExportError("loss scaling applies to the training step only (use --loss-scale auto or none)")
        return self

    @property
    def per_device_batch(self) -> int:
        return self.global_batch // self.devices

    @property
    def dynamic_loss_scale(self) -> bool:
        if self.loss_scale == "auto":
            return self.mode == "train" and self.dtype == "bf16"
        return self.loss_scale == "dynamic"

    @property
    def steps_per_epoch(self) -> int:
        return max(1, IMAGENET_TRAIN_IMAGES // self.global_batch)

    @property
    def base_learning_rate(self) -> float:
        return BASE_LR_PER_256 * self.global_batch / 256

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ExportOptions":
        return cls(**json.loads(text))


# ---------------------------------------------------------------------------
# LLaMA-3 training steps (llama.py)
# ---------------------------------------------------------------------------

LLAMA_MESH_AXES = ("dp", "fsdp", "tp")
SHARDINGS = ("shardy", "gspmd")
PARAM_DTYPES = ("f32", "bf16")


def parse_mesh(text: str) -> dict[str, int]:
    """`dp=2,fsdp=4,tp=1` -> {"dp": 2, "fsdp": 4, "tp": 1}; axes left out are 1."""
    sizes = {a: 1 for a in LLAMA_MESH_AXES}
    seen = set()
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or name not in sizes:
            raise ExportError(f"bad mesh '{text}': expected AXIS=SIZE items with AXIS one of {', '.join(LLAMA_MESH_AXES)}")
        if name in seen:
            raise ExportError(f"bad mesh '{text}': axis {name} given twice")
        seen.add(name)
        try:
            size = int(value)
        except ValueError:
            raise ExportError(f"bad mesh '{text}': size of {name} is not an integer ('{value.strip()}')") from None
        if size < 1:
            raise ExportError(f"bad mesh '{text}': size of {name} must be >= 1")
        sizes[name] = size
    if not seen:
        raise ExportError(f"bad mesh '{text}': no axis (example: dp=1,fsdp=4,tp=1)")
    return sizes


@dataclasses.dataclass(frozen=True)
class LlamaExportOptions:
    """A LLaMA-3 training step: model, mesh `{dp, fsdp, tp}`, tokens per step, precision,
    sharding format, layers as a Python loop or one `lax.scan`; `layers` overrides the
    configuration's depth (quick experiments, tests)."""

    model: str
    mesh: dict = dataclasses.field(default_factory=lambda: {"dp": 1, "fsdp": 4, "tp": 1})
    seq_len: int = 2048
    global_batch: int | None = None  # None: one sequence per data-parallel device
    dtype: str = "bf16"
    param_dtype: str = "f32"
    sharding: str = "shardy"
    scan: bool = False
    layers: int | None = None
    debug_info: bool = False  # as ExportOptions.debug_info

    @property
    def devices(self) -> int:
        return self.mesh["dp"] * self.mesh["fsdp"] * self.mesh["tp"]

    @property
    def data_parallel(self) -> int:
        return self.mesh["dp"] * self.mesh["fsdp"]

    @property
    def batch(self) -> int:
        return self.data_parallel if self.global_batch is None else self.global_batch

    @property
    def config(self):
        cfg = LLAMA_MODELS[self.model]
        return cfg if self.layers is None else cfg.with_layers(self.layers)

    def mesh_text(self) -> str:
        return ",".join(f"{a}={self.mesh[a]}" for a in LLAMA_MESH_AXES)

    def validate(self) -> "LlamaExportOptions":
        def choice(what, value, allowed):
            if value not in allowed:
                raise ExportError(f"unknown {what} '{value}' (choose from {', '.join(allowed)})")

        choice("model", self.model, tuple(LLAMA_MODELS))
        choice("dtype", self.dtype, DTYPES)
        choice("parameter dtype", self.param_dtype, PARAM_DTYPES)
        choice("sharding", self.sharding, SHARDINGS)
        if set(self.mesh) != set(LLAMA_MESH_AXES) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in self.mesh.values()
        ):
            raise ExportError(f"bad mesh {self.mesh!r}: sizes of dp, fsdp and tp, each a positive integer")
        for what, value in (("sequence length", self.seq_len), ("global batch", self.batch), ("layers", self.layers)):
            if value is None and what == "layers":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ExportError(f"{what} must be a positive integer, got {value!r}")
        if self.batch % self.data_parallel:
            raise ExportError(
                f"global batch {self.batch} is not divisible by the {self.data_parallel} data-parallel devices "
                f"(dp x fsdp = {self.mesh['dp']} x {self.mesh['fsdp']})"
            )
        cfg, tp, fsdp = self.config, self.mesh["tp"], self.mesh["fsdp"]
        for what, n in (
            ("attention heads", cfg.heads),
            ("key/value heads", cfg.kv_heads),
            ("MLP width", cfg.ffn),
            ("vocabulary", cfg.vocab),
        ):
            if n % tp:
                raise ExportError(f"{self.model} has {n} {what}, not divisible by tp={tp} (Megatron tensor parallelism)")
        if cfg.hidden % fsdp:
            raise ExportError(f"{self.model}'s hidden size {cfg.hidden} is not divisible by fsdp={fsdp}")
        return self

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "LlamaExportOptions":
        return cls(**json.loads(text))


def options_from_json(text: str):
    """ExportOptions or LlamaExportOptions, by the model's name."""
    data = json.loads(text)
    cls = LlamaExportOptions if data.get("model") in LLAMA_MODELS else ExportOptions
    return cls(**data)


# ---------------------------------------------------------------------------
# choosing where to lower
# ---------------------------------------------------------------------------


def _in_process_possible(devices: int, *, cpu_only: bool = False) -> bool:
    """True when this process has (or can still be given) `devices` host CPU devices.
    Configures jax's CPU backend when it has not been created yet; `cpu_only` (the
    process is ours, e.g. the `costmodel` command) also keeps jax off any accelerator."""
    import jax
    from jax._src import xla_bridge

    if not xla_bridge.backends_are_initialized() and cpu_only and not jax.config.jax_platforms:
        jax.config.update("jax_platforms", "cpu")
    if xla_bridge.backends_are_initialized():
        return _cpu_device_count() >= devices
    current = int(jax.config.jax_num_cpu_devices)
    if max(current, _xla_flag_devices() or 0) < devices:
        jax.config.update("jax_num_cpu_devices", devices)
    # creating the backends, XLA logs every host device at INFO level on fd 2: drop those
    # lines, pass on anything else
    from ..ir import captured_stderr

    with captured_stderr() as cap:
        count = _cpu_device_count()
    for line in cap.text.splitlines():
        if line.strip() and not _XLA_INFO_LINE.match(line):
            sys.stderr.write(line + "\n")
    return count >= devices


_XLA_INFO_LINE = re.compile(r"I\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\] ")


def _cpu_device_count() -> int:
    import jax

    try:
        return len(jax.devices("cpu"))
    except RuntimeError:
        return 0


def _xla_flag_devices() -> int | None:
    for token in os.environ.get("XLA_FLAGS", "").split():
        if token.startswith("--xla_force_host_platform_device_count="):
            try:
                return int(token.split("=", 1)[1])
            except ValueError:
                return None
    return None


def _require_jax() -> None:
    missing = []
    for name in ("jax", "flax", "optax"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ExportError(
            f"exporting workloads needs {', '.join(missing)}: pip install 'stablehlo-costmodel[jax]'"
        )


def export_text(
    opts: "ExportOptions | LlamaExportOptions", *, allow_in_process: bool = True, cpu_only: bool = False
) -> str:
    """The StableHLO text of the step (see the module doc; a LLaMA step for
    LlamaExportOptions, `lower_llama`). Raises ExportError.

    `allow_in_process=False` always lowers in a child process; `cpu_only` lets an
    in-process lowering restrict this process's jax to the CPU (for a process of our own,
    such as the `costmodel` command: jax would otherwise also start any accelerator)."""
    opts.validate()
    _require_jax()
    if allow_in_process and _in_process_possible(opts.devices, cpu_only=cpu_only):
        return _export_in_process(opts)
    return _export_in_subprocess(opts)


def _export_in_subprocess(opts) -> str:
    env = dict(os.environ)
    flags = [t for t in env.get("XLA_FLAGS", "").split() if not t.startswith("--xla_force_host_platform_device_count=")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={opts.devices}"])
    env["JAX_PLATFORMS"] = "cpu"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    proc = subprocess.run(
        [sys.executable, "-m", "costmodel.workloads.export", opts.to_json()],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {proc.returncode}"
        raise ExportError(f"lowering {opts.model} in a child process failed: {last}")
    return proc.stdout


def _export_in_process(opts) -> str:
    import jax

    if isinstance(opts, LlamaExportOptions):
        return lower_llama(opts, jax.devices("cpu")[: opts.devices]).as_text(debug_info=opts.debug_info)
    text = lower_step(opts, jax.devices("cpu")[: opts.devices])
    if opts.form == "replicas":
        from .replicas import to_replica_form

        text = to_replica_form(text, opts.devices, module_name=f"pmap_{opts.mode}_step", debug_info=opts.debug_info)
    return text


# ---------------------------------------------------------------------------
# the step (imports jax, flax, optax)
# ---------------------------------------------------------------------------


def abstract_state_and_batch(opts: ExportOptions):
    """(model, abstract TrainState, abstract global batch) of `opts`; nothing is allocated."""
    import jax
    import jax.numpy as jnp

    model, init = model_and_init(opts)
    state = jax.eval_shape(init)
    dtype = jnp.bfloat16 if opts.dtype == "bf16" else jnp.float32
    n, b, s = opts.devices, opts.per_device_batch, opts.image_size
    batch = {
        "image": jax.ShapeDtypeStruct((n, b, s, s, 3), dtype),
        "label": jax.ShapeDtypeStruct((n, b), jnp.int32),
    }
    return model, state, batch


def model_and_init(opts: ExportOptions):
    """(model, init): `init()` builds the TrainState of `opts` (jax.eval_shape it for the
    abstract state, jax.jit it for a real one, as benchmarks/gpu_measure.py does)."""
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import dynamic_scale as dynamic_scale_lib
    from flax.training import train_state

    from .resnet import make_model

    dtype = jnp.bfloat16 if opts.dtype == "bf16" else jnp.float32
    model = make_model(MODELS[opts.model], dtype=dtype, num_classes=opts.num_classes)

    class TrainState(train_state.TrainState):
        batch_stats: object
        dynamic_scale: object

    tx = optax.sgd(learning_rate=learning_rate_fn(opts), momentum=opts.momentum, nesterov=opts.nesterov)

    def init():
        image = jnp.zeros((1, opts.image_size, opts.image_size, 3), dtype)
        variables = model.init(jax.random.PRNGKey(0), image, train=False)
        return TrainState.create(
            apply_fn=model.apply,
            params=variables["params"],
            tx=tx,
            batch_stats=variables["batch_stats"],
            dynamic_scale=dynamic_scale_lib.DynamicScale() if opts.dynamic_loss_scale else None,
        )

    return model, init


def learning_rate_fn(opts: ExportOptions):
    import optax

    base = opts.base_learning_rate
    if opts.lr_schedule == "constant":
        return optax.constant_schedule(base)
    steps = opts.steps_per_epoch
    warmup = optax.linear_schedule(init_value=0.0, end_value=base, transition_steps=WARMUP_EPOCHS * steps)
    cosine = optax.cosine_decay_schedule(init_value=base, decay_steps=max(NUM_EPOCHS - WARMUP_EPOCHS, 1) * steps)
    return optax.join_schedules(schedules=[warmup, cosine], boundaries=[WARMUP_EPOCHS * steps])


def make_step(opts: ExportOptions):
    """The per-device step function `step(state, batch) -> (new_state, metrics)` (train)
    or `-> logits` (inference)."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    num_classes = opts.num_classes
    lr_fn = learning_rate_fn(opts)

    def cross_entropy_loss(logits, labels):
        one_hot = jax.nn.one_hot(labels, num_classes)
        return jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))

    def compute_metrics(logits, labels):
        metrics = {
            "loss": cross_entropy_loss(logits, labels),
            "accuracy": jnp.mean(jnp.argmax(logits, -1) == labels),
        }
        return lax.pmean(metrics, axis_name="batch")

    def train_step(state, batch):
        def loss_fn(params):
            logits, new_model_state = state.apply_fn(
                {"params": params, "batch_stats": state.batch_stats}, batch["image"], mutable=["batch_stats"]
            )
            loss = cross_entropy_loss(logits, batch["label"])
            if opts.weight_decay:
                weight_l2 = sum(jnp.sum(x**2) for x in jax.tree_util.tree_leaves(params) if x.ndim > 1)
                loss = loss + opts.weight_decay * 0.5 * weight_l2
            return loss, (new_model_state, logits)

        lr = lr_fn(state.step)
        dynamic_scale = state.dynamic_scale
        if dynamic_scale is not None:
            grad_fn = dynamic_scale.value_and_grad(loss_fn, has_aux=True, axis_name="batch")
            dynamic_scale, is_finite, aux, grads = grad_fn(state.params)  # grads are pmean-ed
        else:
            aux, grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
            grads = lax.pmean(grads, axis_name="batch")
        new_model_state, logits = aux[1]
        metrics = compute_metrics(logits, batch["label"])
        metrics["learning_rate"] = lr
        batch_stats = new_model_state["batch_stats"]
        if opts.sync_batch_stats:
            batch_stats = lax.pmean(batch_stats, axis_name="batch")
        new_state = state.apply_gradients(grads=grads, batch_stats=batch_stats)
        if dynamic_scale is not None:
            # a step whose gradients are not finite keeps the old parameters and optimizer state
            keep = lambda new, old: jax.tree_util.tree_map(lambda a, b: jnp.where(is_finite, a, b), new, old)  # noqa: E731
            new_state = new_state.replace(
                opt_state=keep(new_state.opt_state, state.opt_state),
                params=keep(new_state.params, state.params),
                dynamic_scale=dynamic_scale,
            )
            metrics["scale"] = dynamic_scale.scale
        return new_state, metrics

    def inference_step(state, batch):
        variables = {"params": state.params, "batch_stats": state.batch_stats}
        return state.apply_fn(variables, batch["image"], train=False, mutable=False)

    return train_step if opts.mode == "train" else inference_step


def lower_step(opts: ExportOptions, devices) -> str:
    """jax's own lowering (shard_map form) of the pmap-ed step on `devices`."""
    import jax

    opts.validate()
    if len(devices) != opts.devices:
        raise ExportError(f"{opts.devices} devices requested but {len(devices)} available to jax")
    _model, state, batch = abstract_state_and_batch(opts)
    out_axes = (None, 0) if opts.mode == "train" else 0
    step = jax.pmap(make_step(opts), axis_name="batch", in_axes=(None, 0), out_axes=out_axes, devices=devices)
    return step.lower(state, batch).as_text(debug_info=opts.debug_info)


def lower_llama(opts: LlamaExportOptions, devices):
    """jax's `Lowered` of the LLaMA training step (`llama.jitted_step`) on a mesh of
    `devices` (abstract arguments only: nothing is allocated, whatever the model size).
    `.as_text()` is the export; the SPMD-partitioner oracle compiles the same object."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType

    from . import llama

    opts.validate()
    if len(devices) != opts.devices:
        raise ExportError(f"{opts.devices} devices requested but {len(devices)} available to jax")
    axes = [a for a in LLAMA_MESH_AXES if opts.mesh[a] > 1] or ["dp"]
    mesh = jax.make_mesh(
        tuple(opts.mesh[a] for a in axes), tuple(axes), axis_types=(AxisType.Auto,) * len(axes), devices=devices
    )
    dtype = jnp.bfloat16 if opts.dtype == "bf16" else jnp.float32
    param_dtype = jnp.bfloat16 if opts.param_dtype == "bf16" else jnp.float32
    fn, args = llama.jitted_step(
        opts.config, mesh, global_batch=opts.batch, seq_len=opts.seq_len, dtype=dtype, param_dtype=param_dtype,
        scan=opts.scan,
    )
    previous = jax.config.jax_use_shardy_partitioner
    jax.config.update("jax_use_shardy_partitioner", opts.sharding == "shardy")
    try:
        return fn.lower(*args)
    finally:
        jax.config.update("jax_use_shardy_partitioner", previous)


def main(argv: list[str] | None = None) -> int:
    """`python -m costmodel.workloads.export OPTIONS_JSON`: the text on stdout (the child
    process of `export_text`)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m costmodel.workloads.export OPTIONS_JSON\n")
        return 2
    try:
        opts = options_from_json(argv[0]).validate()
        _require_jax()
        if not _in_process_possible(opts.devices, cpu_only=True):
            raise ExportError(f"jax has fewer than {opts.devices} host CPU devices in the child process")
        sys.stdout.write(_export_in_process(opts))
    except (ExportError, TypeError, ValueError) as err:
        sys.stderr.write(f"error: {err}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Export a data-parallel JAX ResNet training (or inference) step as StableHLO text.

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
import os
import re
import subprocess
import sys

from .configs import IMAGE_SIZE, MODELS, NUM_CLASSES

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

    def validate(self) -> "ExportOptions":
        def choice(what, value, allowed):
            if value not in allowed:
                raise ExportError(f"unknown {what} '{value}' (choose from {', '.join(allowed)})")

        choice("model", self.model, tuple(MODELS))
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
        if not self.weight_decay >= 0:
            raise ExportError(f"weight decay must be >= 0, got {self.weight_decay}")
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


def export_text(opts: ExportOptions, *, allow_in_process: bool = True, cpu_only: bool = False) -> str:
    """The StableHLO text of the step (see the module doc). Raises ExportError.

    `allow_in_process=False` always lowers in a child process; `cpu_only` lets an
    in-process lowering restrict this process's jax to the CPU (for a process of our own,
    such as the `costmodel` command: jax would otherwise also start any accelerator)."""
    opts.validate()
    _require_jax()
    if allow_in_process and _in_process_possible(opts.devices, cpu_only=cpu_only):
        return _export_in_process(opts)
    return _export_in_subprocess(opts)


def _export_in_subprocess(opts: ExportOptions) -> str:
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


def _export_in_process(opts: ExportOptions) -> str:
    import jax

    text = lower_step(opts, jax.devices("cpu")[: opts.devices])
    if opts.form == "replicas":
        from .replicas import to_replica_form

        text = to_replica_form(text, opts.devices, module_name=f"pmap_{opts.mode}_step")
    return text


# ---------------------------------------------------------------------------
# the step (imports jax, flax, optax)
# ---------------------------------------------------------------------------


def abstract_state_and_batch(opts: ExportOptions):
    """(model, abstract TrainState, abstract global batch) of `opts`; nothing is allocated."""
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

    state = jax.eval_shape(init)
    n, b, s = opts.devices, opts.per_device_batch, opts.image_size
    batch = {
        "image": jax.ShapeDtypeStruct((n, b, s, s, 3), dtype),
        "label": jax.ShapeDtypeStruct((n, b), jnp.int32),
    }
    return model, state, batch


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
    return step.lower(state, batch).as_text()


def main(argv: list[str] | None = None) -> int:
    """`python -m costmodel.workloads.export OPTIONS_JSON`: the text on stdout (the child
    process of `export_text`)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: python -m costmodel.workloads.export OPTIONS_JSON\n")
        return 2
    try:
        opts = ExportOptions.from_json(argv[0]).validate()
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

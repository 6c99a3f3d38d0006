#!/usr/bin/env python3
"""Our per-device peak memory (costmodel.memory) against XLA's own buffer assignment.

    python benchmarks/memory_vs_xla.py            # the validation table of docs/memory.md
    python benchmarks/memory_vs_xla.py --json

Each program is built with jax in-process, lowered to StableHLO text
(`jax.jit(f).lower(...).as_text()`) and compiled by XLA on the CPU. XLA's footprint is
`compiled.memory_analysis()`: arguments + outputs + temporaries - aliased (donated)
bytes. Ours is `peak_memory(module).peak_bytes` on the StableHLO text, with every op its
own buffer (`fusion="none"`, the policy of our `cpu` preset) and with XLA GPU's kernels
(`fusion="xla-gpu"`, what `costmodel predict` uses for GPUs). With the paper's workloads
in ../shared/workloads, a second table compares our analysis of the ResNet-18 export with
our analysis of the same step as XLA GPU compiled it (its own fusions, "given").

tests/test_memory.py imports PROGRAMS and measure() from here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(REPO), "shared", "workloads")


# ---------------------------------------------------------------------------
# the programs
# ---------------------------------------------------------------------------


def _f32(*shape):
    """An abstract f32 argument: the programs are lowered and compiled, never run."""
    import jax
    import jax.numpy as jnp

    return jax.ShapeDtypeStruct(shape, jnp.float32)


def _mlp():
    import jax
    import jax.numpy as jnp

    params = [(_f32(a, b), _f32(b)) for a, b in zip([512, 1024, 1024], [1024, 1024, 10])]

    def loss(ps, x, y):
        h = x
        for w, b in ps[:-1]:
            h = jax.nn.relu(h @ w + b)
        w, b = ps[-1]
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ w + b) * y, axis=-1))

    return _sgd(loss), (params, _f32(256, 512), _f32(256, 10))


def _sgd(loss):
    import jax

    def step(ps, x, y):
        grads = jax.grad(loss)(ps, x, y)
        return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, ps, grads)

    return step


def _convnet(pool: str):
    import jax
    import jax.numpy as jnp
    from jax import lax

    params = {"c1": _f32(3, 3, 3, 32), "c2": _f32(3, 3, 32, 64), "fc": _f32(64, 10)}
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(p, x, y):
        h = jax.nn.relu(lax.conv_general_dilated(x, p["c1"], (1, 1), "SAME", dimension_numbers=dn))
        if pool == "max":
            h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        else:
            h = lax.reduce_window(h, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") * 0.25
        h = jax.nn.relu(lax.conv_general_dilated(h, p["c2"], (1, 1), "SAME", dimension_numbers=dn))
        h = jnp.mean(h, axis=(1, 2))
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ p["fc"]) * y, axis=-1))

    return _sgd(loss), (params, _f32(32, 32, 32, 3), _f32(32, 10))


def _fori_loop():
    import jax.numpy as jnp
    from jax import lax

    def f(x, w):
        return lax.fori_loop(0, 8, lambda i, c: jnp.tanh(c @ w), x)

    return f, (_f32(256, 512), _f32(512, 512))


def _scan_fn(w, xs):
    import jax.numpy as jnp
    from jax import lax

    def body(c, x):
        h = jnp.tanh(x @ w + c)
        return h, jnp.sum(h * h, axis=-1)

    return lax.scan(body, jnp.zeros((128, 512)), xs)


def _scan():
    return _scan_fn, (_f32(512, 512), _f32(16, 128, 512))


def _scan_grad():
    import jax
    import jax.numpy as jnp

    def f(w, xs):
        def loss(w):
            c, ys = _scan_fn(w, xs)
            return jnp.sum(c) + jnp.sum(ys)

        return jax.grad(loss)(w)

    return f, (_f32(512, 512), _f32(16, 128, 512))


# name -> (builder, donate_argnums, what it is)
PROGRAMS = {
    "mlp_sgd": (_mlp, (), "MLP 512-1024-1024-10, batch 256, SGD step"),
    "mlp_sgd_donated": (_mlp, (0,), "the same, parameters donated"),
    "convnet_sgd": (lambda: _convnet("avg"), (), "2 convs (32x32x3 -> 32 -> 64 ch), avg pool, batch 32, SGD step"),
    "convnet_sgd_donated": (lambda: _convnet("avg"), (0,), "the same, parameters donated"),
    "fori_loop": (_fori_loop, (), "fori_loop of 8 x tanh(x @ w), x 256x512"),
    "scan": (_scan, (), "scan of an RNN cell over 16 steps, carry 128x512"),
    "scan_grad": (_scan_grad, (), "gradient of that scan"),
    "convnet_maxpool_sgd": (lambda: _convnet("max"), (), "the conv net with max pooling (XLA CPU expands select_and_scatter)"),
}


# ---------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------


@dataclass
class Row:
    program: str
    xla_bytes: int  # argument + output + temp - alias
    xla_argument_bytes: int
    xla_output_bytes: int
    xla_temp_bytes: int
    xla_alias_bytes: int
    ours_none_bytes: int
    ours_xla_gpu_bytes: int
    ours_xla_gpu_schedule: str
    ours_alias_bytes: int

    def diff(self, which: str = "none") -> float:
        ours = self.ours_none_bytes if which == "none" else self.ours_xla_gpu_bytes
        return (ours - self.xla_bytes) / self.xla_bytes


def lower(name: str):
    """(lowered jax computation, StableHLO text)."""
    import jax

    build, donate, _ = PROGRAMS[name]
    fn, args = build()
    lowered = jax.jit(fn, donate_argnums=donate).lower(*args)
    return lowered, lowered.as_text()


def ours(text: str, name: str = "<program>", upcast: bool = False, annotate: bool = False, **kw):
    """Our peak memory of the program. `upcast`: with XLA GPU's float normalization of
    its convolutions applied first (f32 convolutions, docs/memory.md); `annotate`: of the
    module as annotate-cost leaves it (xla-gpu kernels, calls kept)."""
    from costmodel.ir import DiagnosticEngine, load_module, make_context
    from costmodel.kernels.float_normalization import upcast_convolutions
    from costmodel.memory import peak_memory
    from costmodel.passes.annotate_cost import annotate_module

    ctx = make_context()
    module = load_module(ctx, text, name)
    with ctx:
        if upcast:
            upcast_convolutions(module)
        if annotate:
            annotate_module(module, DiagnosticEngine(name), hardware="a100-40gb", fusion="xla-gpu")
    return peak_memory(module, **kw)


def measure(name: str) -> Row:
    lowered, text = lower(name)
    m = lowered.compile().memory_analysis()
    xla = m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    none = ours(text, name, fusion="none")
    gpu = ours(text, name, fusion="xla-gpu")
    return Row(
        name,
        xla,
        m.argument_size_in_bytes,
        m.output_size_in_bytes,
        m.temp_size_in_bytes,
        m.alias_size_in_bytes,
        none.peak_bytes,
        gpu.peak_bytes,
        gpu.schedule,
        gpu.alias_bytes,
    )


def shared_rows() -> list[dict]:
    """Model against model on the paper's ResNet-18 step (when ../shared is present): our
    analysis of XLA GPU's compiled module (its own fusions, `given`), of the export with
    our xla-gpu kernels formed after inlining the calls (peak_memory's default), and of
    the export annotated by annotate-cost as it stands (calls kept as kernel boundaries:
    what predict_step analyses today, its `inline` pass being a no-op)."""
    export = os.path.join(SHARED, "resnet18_train_4_devices.mlir")
    opt = os.path.join(SHARED, "resnet18_train_4_devices-opt.mlir")
    if not (os.path.exists(export) and os.path.exists(opt)):
        return []
    with open(export) as f:
        text = f.read()
    with open(opt) as f:
        ours_opt = ours(f.read(), opt)
    return [
        {
            "program": "resnet18_train_4_devices (per device)",
            "xla_gpu_compiled_bytes": ours_opt.peak_bytes,
            "export_inlined_xla_gpu_bytes": ours(text, export).peak_bytes,
            "export_annotated_calls_kept_bytes": ours(text, export, annotate=True).peak_bytes,
            "upcast_inlined_xla_gpu_bytes": ours(text, export, upcast=True).peak_bytes,
            "upcast_annotated_calls_kept_bytes": ours(text, export, upcast=True, annotate=True).peak_bytes,
        }
    ]


# ---------------------------------------------------------------------------
# printing
# ---------------------------------------------------------------------------


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.2f}"


def table(rows: list[Row]) -> str:
    lines = [
        "| program | XLA CPU (MiB) | ours, fusion=none (MiB) | diff | ours, xla-gpu kernels (MiB) | diff |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.program} | {_mib(r.xla_bytes)} | {_mib(r.ours_none_bytes)} | {100 * r.diff('none'):+.1f}% "
            f"| {_mib(r.ours_xla_gpu_bytes)} | {100 * r.diff('xla-gpu'):+.1f}% |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("programs", nargs="*", help=f"subset of: {', '.join(PROGRAMS)}")
    args = parser.parse_args(argv)
    names = args.programs or list(PROGRAMS)
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s): {', '.join(unknown)}")
    rows = [measure(n) for n in names]
    extra = shared_rows() if not args.programs else []
    if args.json:
        print(json.dumps({"programs": [asdict(r) for r in rows], "shared": extra}, indent=2))
        return 0
    print(table(rows))
    print("\nXLA CPU parts (MiB): argument / output / temp / alias")
    for r in rows:
        print(
            f"  {r.program}: {_mib(r.xla_argument_bytes)} / {_mib(r.xla_output_bytes)} / "
            f"{_mib(r.xla_temp_bytes)} / {_mib(r.xla_alias_bytes)}; ours xla-gpu schedule: {r.ours_xla_gpu_schedule}"
        )
    for e in extra:
        base = e["xla_gpu_compiled_bytes"]
        print(f"\n{e['program']}, our analysis of (GiB):")
        for key, label in (
            ("xla_gpu_compiled_bytes", "XLA GPU's compiled module (its fusions)"),
            ("export_inlined_xla_gpu_bytes", "the export, calls inlined, xla-gpu kernels"),
            ("export_annotated_calls_kept_bytes", "the export as annotate-cost leaves it (calls kept)"),
            ("upcast_inlined_xla_gpu_bytes", "  the same, convolutions in f32 as XLA's: inlined"),
            ("upcast_annotated_calls_kept_bytes", "  the same, convolutions in f32 as XLA's: calls kept"),
        ):
            print(f"  {label:<52} {e[key] / (1 << 30):6.2f}  ({100 * (e[key] - base) / base:+.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

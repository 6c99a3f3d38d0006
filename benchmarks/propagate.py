#!/usr/bin/env python3
"""Speed of `--propagate-shardings`, and what crash isolation costs (a benchmark, not a test).

    python benchmarks/propagate.py                    # the held-in programs + a generated large step
    python benchmarks/propagate.py --layers 48 --repeat 5
    python benchmarks/propagate.py --no-generate      # checked-in programs only (no JAX needed)

For each sharded program it prints, measured in-process (best of N after a warm-up):

  isolated     the pass as it runs by default: Shardy in a forked child (fork, bytecode
               of the module both ways, a fresh single-threaded context in the child)
  in-process   the same with isolate=false (a Shardy crash would end the process)
  overhead     isolated - in-process, in ms and relative

The generated program is a DP x TP transformer training step on a 2x4 mesh with
`--layers` unrolled layers (exported with JAX on 8 host CPU devices in a child process),
the size of a real model's step (thousands of ops).
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(REPO, "tests", "data", "sharded")

GENERATE = textwrap.dedent(
    """
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax, jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    layers, out = int(sys.argv[1]), sys.argv[2]
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    d, f, h = 512, 2048, 8
    def sds(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))
    def block(x, p):
        b, s, _ = x.shape
        y = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
        q, k, v = (jnp.einsum("bsd,dk->bsk", y, p[n]).reshape(b, s, h, d // h) for n in ("q", "k", "v"))
        a = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k) / (d // h) ** 0.5, -1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, s, d) @ p["o"]
        y = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
        return x + (jax.nn.silu(y @ p["w1"]) * (y @ p["w3"])) @ p["w2"]
    def step(params, x):
        def loss(ps):
            h_ = x
            for p in ps:
                h_ = block(h_, p)
            return jnp.mean(h_.astype(jnp.float32) ** 2)
        g = jax.grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 1e-3 * g, params, g)
    col, row = P(None, "model"), P("model", None)
    layer = {"q": sds((d, d), col), "k": sds((d, d), col), "v": sds((d, d), col), "o": sds((d, d), row),
             "w1": sds((d, f), col), "w3": sds((d, f), col), "w2": sds((f, d), row)}
    params = [layer] * layers
    text = jax.jit(step).lower(params, sds((8, 256, d), P("data"))).as_text()
    open(out, "w").write(text)
    """
)


def _generate(layers: int, path: str) -> bool:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run([sys.executable, "-c", GENERATE, str(layers), path], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        print(f"(no generated program: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'failed'})")
        return False
    return True


def _time(text: str, name: str, isolate: bool, repeat: int) -> float:
    from costmodel.ir import DiagnosticEngine, load_module, make_context
    from costmodel.passes import PassSession, get_pass, parse_options

    info = get_pass("propagate-shardings")
    options = parse_options(info, f"isolate={'true' if isolate else 'false'}")
    best = float("inf")
    for i in range(repeat + 1):  # the first run warms up
        ctx = make_context()
        module = load_module(ctx, text, name)
        session = PassSession(DiagnosticEngine(name))
        t0 = time.perf_counter()
        info.run(module, options, session)
        dt = time.perf_counter() - t0
        assert not session.diagnostics.has_errors, [d.render() for d in session.diagnostics.diagnostics]
        if i:
            best = min(best, dt)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=24, help="layers of the generated transformer step")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-generate", action="store_true", help="only the checked-in programs")
    args = ap.parse_args(argv)

    files = sorted(f for f in glob.glob(os.path.join(DATA, "*.mlir")) if not os.path.basename(f).startswith("bad_"))
    files.append(os.path.join(REPO, "examples", "transformer_train_2x4.mlir"))
    tmp = tempfile.mkdtemp(prefix="propagate_bench_")
    if not args.no_generate:
        big = os.path.join(tmp, f"transformer_{args.layers}layers_2x4.mlir")
        if _generate(args.layers, big):
            files.append(big)

    print(f"{'program':40s} {'ops':>7s} {'isolated ms':>12s} {'in-process ms':>14s} {'overhead ms':>12s} {'overhead':>9s}")
    for path in files:
        with open(path) as fh:
            text = fh.read()
        ops = sum(1 for line in text.splitlines() if " = " in line and ("stablehlo." in line or "sdy." in line))
        iso = _time(text, os.path.basename(path), True, args.repeat)
        inp = _time(text, os.path.basename(path), False, args.repeat)
        print(
            f"{os.path.basename(path)[:40]:40s} {ops:7d} {iso * 1e3:12.1f} {inp * 1e3:14.1f} "
            f"{(iso - inp) * 1e3:12.1f} {100 * (iso - inp) / inp:8.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(REPO, "python"))
    sys.exit(main())

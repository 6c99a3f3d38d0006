#!/usr/bin/env python3
"""Programs a user brings, through `costmodel predict` (a benchmark, not a test).

    python benchmarks/user_programs.py [--system dgx-h100] [--keep DIR]

Exports JAX programs that the test suites do not hold (ViT attention, depthwise
convolutions with a resize and their gradient, MoE routing, FFT/sort/cumprod in a loop,
an RNN scan gradient, int8 and complex matmuls, linear algebra, a shape-polymorphic
export, a loop until convergence, a ragged all-to-all under shard_map; ragged_dot and host
offloading exported for CUDA, a vocabulary-sharded cross-entropy), runs `costmodel
predict` on each (roofline and calibrated, one system) and prints per program:

  xla/ours XLA's flops (HloCostAnalysis of the unoptimized module) over ours, loops
           counted once as XLA does, one-device programs only: 1.0000 is equal
           (docs/cost-rules.md lists the deliberate differences; XLA counts no flops
           for a custom call, such as linalg's LAPACK calls)
  uncosted ops annotate-cost could not cost (predict's `not_costed` note)
  warnings annotate-cost's other warnings (predict's `warnings`)
  step     the predicted step, roofline and calibrated

The programs run on the host CPU (8 host devices for the sharded one).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))


def programs():
    """(name, text, one_device) of every program."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import export, lax
    from jax.sharding import Mesh, PartitionSpec as P

    S = jax.ShapeDtypeStruct
    out = []

    def add(name, f, *args, **kw):
        out.append((name, jax.jit(f, **kw).lower(*args).as_text(), True))

    def vit(x, wq, wk, wv, wo, w1, w2):
        h = (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-6)
        q, k, v = h @ wq, h @ wk, h @ wv
        b, t, d = q.shape
        a = jax.nn.dot_product_attention(*(y.reshape(b, t, 8, d // 8) for y in (q, k, v)), is_causal=True)
        x = x + a.reshape(b, t, d) @ wo
        return x + jax.nn.gelu(x @ w1) @ w2

    d = 512
    add("vit", vit, S((8, 256, d), jnp.bfloat16), *[S((d, d), jnp.bfloat16)] * 4, S((d, 4 * d), jnp.bfloat16),
        S((4 * d, d), jnp.bfloat16))

    def convnet(x, w_dw, w_pw):
        y = lax.conv_general_dilated(x, w_dw, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                     feature_group_count=x.shape[-1])
        y = lax.conv_general_dilated(jax.nn.relu6(y), w_pw, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        y = lax.reduce_window(y, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID") / 4
        return jax.image.resize(y, (y.shape[0], y.shape[1] * 2, y.shape[2] * 2, y.shape[3]), "bilinear")

    cargs = (S((16, 64, 64, 32), jnp.float32), S((3, 3, 1, 32), jnp.float32), S((1, 1, 32, 64), jnp.float32))
    add("convnet", convnet, *cargs)
    add("convnet_grad", jax.grad(lambda x, a, b: convnet(x, a, b).sum(), argnums=(1, 2)), *cargs)

    def moe(x, wr, we):
        vals, idx = lax.top_k(x @ wr, 2)
        gates = jax.nn.softmax(vals, -1)
        order = jnp.argsort(idx[:, 0])
        ye = jnp.einsum("td,edf->tef", jnp.take(x, order, axis=0), we)
        y = jnp.take_along_axis(ye, idx[order][:, :1, None], axis=1)[:, 0]
        return jax.ops.segment_sum(y * gates[order][:, :1], order, num_segments=x.shape[0])

    add("moe", moe, S((1024, 256), jnp.float32), S((256, 8), jnp.float32), S((8, 256, 256), jnp.float32))

    def misc(x):
        c = jnp.cumprod(1 + jnp.sort(jnp.abs(jnp.fft.rfft(x, axis=-1)), axis=-1) * 1e-3, axis=-1)
        body = lambda i, acc: lax.dynamic_update_slice(acc, lax.dynamic_slice_in_dim(c, i, 1) * i, (i, 0))  # noqa: E731
        return lax.fori_loop(0, x.shape[0], body, jnp.zeros_like(c))

    add("fft_sort_loop", misc, S((64, 1024), jnp.float32))

    def rnn(xs, w, h0):
        return lax.scan(lambda h, x: (jnp.tanh(h @ w + x),) * 2, h0, xs)

    add("rnn_grad", jax.grad(lambda xs, w, h: rnn(xs, w, h)[0].sum(), argnums=1), S((128, 32, 256), jnp.float32),
        S((256, 256), jnp.float32), S((32, 256), jnp.float32))
    add("int8", lambda a, b, sa, sb: lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32
                                                     ).astype(jnp.float32) * sa * sb,
        S((512, 1024), jnp.int8), S((1024, 512), jnp.int8), S((), jnp.float32), S((), jnp.float32))
    add("complex", lambda a, b: jnp.real(jnp.matmul(a, b) * jnp.exp(1j * jnp.angle(a[:, :1]))),
        S((128, 128), jnp.complex64), S((128, 128), jnp.complex64))
    add("linalg", lambda k, a: (jnp.linalg.solve(a @ a.T + jnp.eye(a.shape[0]), jax.random.normal(k, a.shape)),
                                jnp.linalg.eigh(a + a.T)[0]), jax.random.key(0), S((64, 64), jnp.float32))
    add("until_converged", lambda x: lax.while_loop(lambda c: c.sum() < 1e6, lambda c: c * 1.5 + 1, x),
        S((256, 256), jnp.float32))
    (b,) = export.symbolic_shape("b")
    exp = export.export(jax.jit(lambda x, w: jax.nn.relu(x @ w).sum(0)))(S((b, 128), jnp.float32), S((128, 64), jnp.float32))
    out.append(("shape_polymorphic", exp.mlir_module(), False))  # XLA cannot cost it either

    # exported for CUDA, as a GPU user ships them: ragged_dot as its composite, host
    # offloading as annotate_device_placement custom calls (reported as not costed)
    def ragged(x, w, g):
        return lax.ragged_dot(x, w, g)

    e = export.export(jax.jit(ragged), platforms=["cuda"])(S((2048, 512), jnp.bfloat16), S((8, 512, 1024), jnp.bfloat16),
                                                            S((8,), jnp.int32))
    out.append(("ragged_dot_cuda", e.mlir_module(), False))  # a composite: XLA's CPU converter differs

    def offload(x):
        y = jax.device_put(x * 2, jax.memory.Space.Host)
        return jax.device_put(y, jax.memory.Space.Device) + 1

    e = export.export(jax.jit(offload), platforms=["cuda"])(S((1024, 1024), jnp.float32))
    out.append(("host_offload_cuda", e.mlir_module(), False))

    mesh = Mesh(np.array(jax.devices()[:8]), ("x",))

    def ragged(operand, output, in_off, send, out_off, recv):
        return lax.ragged_all_to_all(operand, output, in_off, send, out_off, recv, axis_name="x")

    sm = jax.shard_map(ragged, mesh=mesh, in_specs=(P("x"),) * 6, out_specs=P("x"))
    rargs = (S((8 * 64, 128), jnp.bfloat16),) * 2 + tuple(S((64,), jnp.int32) for _ in range(4))
    out.append(("ragged_all_to_all_8dev", jax.jit(sm).lower(*rargs).as_text(), False))

    # cross-entropy of vocabulary-sharded logits (optax's integer-label loss): predict
    # partitions it; Shardy's malformed constants are replaced (docs/sharding.md)
    from jax.sharding import NamedSharding

    m24 = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))

    def xent(logits, labels):
        lp = jax.nn.log_softmax(logits, axis=-1)
        return -jnp.take_along_axis(lp, labels[..., None], axis=-1).mean()

    xargs = (S((8, 128, 32000), jnp.float32, sharding=NamedSharding(m24, P("data", None, "model"))),
             S((8, 128), jnp.int32, sharding=NamedSharding(m24, P("data"))))
    out.append(("vocab_xent_8dev", jax.jit(xent).lower(*xargs).as_text(), False))
    return out


def xla_flops(text: str) -> int:
    from jax._src import xla_bridge
    from jax._src.lib import _jax

    comp = _jax.mlir.mlir_module_to_xla_computation(text, use_tuple_args=False)
    return int(_jax.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), comp.as_hlo_module()).get("flops", 0))


def ours_flops(text: str) -> int:
    """Our flops counted as XLA counts them: a loop's body once (tests/test_oracle_xla.py)."""
    from test_oracle_xla import ours

    return ours(text)[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--system", default="dgx-h100")
    ap.add_argument("--keep", metavar="DIR", help="keep the exported programs in DIR")
    args = ap.parse_args(argv)
    from costmodel.predict import predict

    tmp = args.keep or tempfile.mkdtemp(prefix="costmodel-user-")
    os.makedirs(tmp, exist_ok=True)
    print(f"{'program':<24} {'xla/ours':>9} {'uncosted':>8} {'warnings':>8} {'roofline':>11} {'calibrated':>11}")
    for name, text, one_device in programs():
        path = os.path.join(tmp, f"{name}.mlir")
        with open(path, "w") as fh:
            fh.write(text)
        ratio = "-"
        if one_device:
            try:
                ratio = f"{xla_flops(text) / max(ours_flops(text), 1):.4f}"
            except Exception as err:  # a program XLA's converter or our engine refuses
                ratio = type(err).__name__
        res = predict(path, systems=[args.system], backends=["roofline", "calibrated"], top=0)
        uncosted = res.program.get("not_costed", "")
        n_unc = uncosted.split(" ", 1)[0] if uncosted else "0"
        steps = {r.backend: f"{r.step_time_ms * 1e3:9.1f}us" for r in res.rows}
        print(f"{name:<24} {ratio:>9} {n_unc:>8} {len(res.program.get('warnings', [])):>8} "
              f"{steps.get('roofline', '-'):>11} {steps.get('calibrated', '-'):>11}")
    print(f"(programs in {tmp}; system {args.system}; xla/ours: flops, one-device programs)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

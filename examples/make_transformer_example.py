"""Regenerate transformer_train_2x4.mlir: one training step of a transformer block
(attention + MLP, bf16) with data parallelism x tensor parallelism on a 2x4 mesh,
exported by JAX with Shardy shardings (not yet partitioned).

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/make_transformer_example.py
"""

import os
import sys

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

B, S, D, H, F = 16, 512, 1024, 16, 4096  # batch, sequence, model dim, heads, MLP dim


def block(params, x):
    wq, wk, wv, wo, w1, w2 = params
    q = (x @ wq).reshape(B, S, H, D // H)
    k = (x @ wk).reshape(B, S, H, D // H)
    v = (x @ wv).reshape(B, S, H, D // H)
    scores = jnp.einsum("bshd,bthd->bhst", q, k) / jnp.sqrt(D // H).astype(x.dtype)
    attn = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
    y = jnp.einsum("bhst,bthd->bshd", attn, v).reshape(B, S, D) @ wo
    x = x + y
    h = jax.nn.gelu(x @ w1)
    return x + h @ w2


def loss(params, x):
    return jnp.mean(block(params, x).astype(jnp.float32) ** 2)


def train_step(params, x):
    l, grads = jax.value_and_grad(loss)(params, x)
    return l, jax.tree.map(lambda p, g: p - 1e-3 * g.astype(p.dtype), params, grads)


def main(out_path):
    mesh = Mesh(np.array(jax.devices()[:8]).reshape(2, 4), ("data", "model"))
    col = NamedSharding(mesh, P(None, "model"))
    row = NamedSharding(mesh, P("model", None))
    data = NamedSharding(mesh, P("data", None, None))
    bf = jnp.bfloat16
    params = (
        jax.ShapeDtypeStruct((D, D), bf, sharding=col),
        jax.ShapeDtypeStruct((D, D), bf, sharding=col),
        jax.ShapeDtypeStruct((D, D), bf, sharding=col),
        jax.ShapeDtypeStruct((D, D), bf, sharding=row),
        jax.ShapeDtypeStruct((D, F), bf, sharding=col),
        jax.ShapeDtypeStruct((F, D), bf, sharding=row),
    )
    x = jax.ShapeDtypeStruct((B, S, D), bf, sharding=data)
    text = jax.jit(train_step).lower(params, x).as_text()
    with open(out_path, "w") as fh:
        fh.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "transformer_train_2x4.mlir"))

"""A LLaMA-3-architecture decoder and its training step in plain JAX (+ optax's AdamW),
with the FSDP / tensor-parallel / data-parallel shardings of every array.

Imports jax and optax: only the exporter (`export.py`) imports this module, after it has
chosen the devices. The configurations and their sizes are in `configs.py`; the tests
check the parameter count against `configs.llama_param_count`.

Model (Meta's Llama 3): token embedding; L pre-norm decoder layers
`h = x + Attention(RMSNorm(x)); out = h + SwiGLU(RMSNorm(h))`; final RMSNorm; output
projection (the embedding's transpose when tied). Attention: grouped-query (H query
heads share KV key/value heads, H / KV per group), rotary position embedding
(rotate-half form, theta 500000) on queries and keys, causal mask, softmax in f32.
SwiGLU: `down(silu(x gate) * (x up))`. No biases, no dropout.

Precision (`dtype` bf16, the default): parameters, gradients and AdamW's moments in
`param_dtype` (f32 master weights by default; bf16 as the paper's MaxText export with
`weight_dtype=bfloat16`); every matmul and the activations in `dtype`; RMSNorm, RoPE,
softmax and the loss in f32.

Loss: next-token cross-entropy, mean over the B x S tokens: the batch carries `inputs`
and `targets` (the inputs shifted by one, as data loaders produce them), both int32
`[B, S]`. Optimizer: `optax.chain(clip_by_global_norm(1.0), adamw(schedule, b1=0.9,
b2=0.95, eps=1e-8, weight_decay=0.1, decay on matrices only))`, with a linear warm-up
and cosine decay (Llama 3's recipe, arXiv:2407.21783 Section 3.4.1: peak 3e-4).

Shardings (mesh axes `dp`, `fsdp`, `tp`; an axis of size 1 is left out of the mesh):
- batch: `[B, S]` split over (`dp`, `fsdp`) on B;
- parameters and their AdamW moments: FSDP splits each matrix's model dimension d over
  `fsdp` (ZeRO-3: gathered before use, gradients reduce-scattered); tensor parallelism is
  Megatron's: wq/wk/wv and the MLP's gate/up are column-parallel (heads / F over `tp`),
  wo and down row-parallel, the embedding and the output projection split the vocabulary
  over `tp`; RMSNorm scales are replicated;
- activations are constrained at the layer boundaries (`[B, S, d]`: B over the data axes,
  replicated over `tp`), as MaxText's logical axis rules do.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .configs import LlamaConfig

DATA_AXES = ("dp", "fsdp")
MESH_AXES = ("dp", "fsdp", "tp")

PEAK_LR = 3e-4
WARMUP_STEPS = 2000
DECAY_STEPS = 100_000
END_LR_FRACTION = 0.1
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.95, 1e-8
WEIGHT_DECAY = 0.1
CLIP_NORM = 1.0


class Shardings:
    """PartitionSpecs on a mesh whose size-1 axes were dropped: `spec(...)` names each
    dimension's axes (None, an axis, or a tuple of axes) and drops absent ones."""

    def __init__(self, mesh: jax.sharding.Mesh):
        self.mesh = mesh
        self.axes = set(mesh.axis_names)

    def _dim(self, d):
        if d is None:
            return None
        names = tuple(a for a in ((d,) if isinstance(d, str) else d) if a in self.axes)
        if not names:
            return None
        return names[0] if len(names) == 1 else names

    def spec(self, *dims) -> P:
        return P(*(self._dim(d) for d in dims))

    def named(self, *dims) -> NamedSharding:
        return NamedSharding(self.mesh, self.spec(*dims))

    def constrain(self, x, *dims):
        return jax.lax.with_sharding_constraint(x, self.named(*dims))

    def gather(self, w, dims, dtype):
        """The weight `w` (sharded as `dims`) cast to `dtype` on its shard, then gathered
        over `fsdp` for its use (ZeRO-3 with PyTorch FSDP's mixed precision: the
        all-gather moves `dtype`, the gradient's reduce-scatter too). Both steps are
        explicit constraints, so that every partitioner casts before it gathers and
        gathers the weight rather than resharding the activations."""
        kept = tuple(None if d == "fsdp" else d for d in dims)
        return self.constrain(self.constrain(w.astype(dtype), *dims), *kept)


# ---------------------------------------------------------------------------
# parameters
# ---------------------------------------------------------------------------


def layer_shapes(cfg: LlamaConfig) -> dict[str, tuple[tuple[int, ...], tuple]]:
    """name -> (shape, per-dimension mesh axes) of one decoder layer's parameters."""
    d, h, kv, hd, f = cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.ffn
    return {
        "attn_norm": ((d,), (None,)),
        "wq": ((d, h, hd), ("fsdp", "tp", None)),
        "wk": ((d, kv, hd), ("fsdp", "tp", None)),
        "wv": ((d, kv, hd), ("fsdp", "tp", None)),
        "wo": ((h, hd, d), ("tp", None, "fsdp")),
        "mlp_norm": ((d,), (None,)),
        "w_gate": ((d, f), ("fsdp", "tp")),
        "w_up": ((d, f), ("fsdp", "tp")),
        "w_down": ((f, d), ("tp", "fsdp")),
    }


def param_tree(cfg: LlamaConfig, shard: Shardings, param_dtype, *, scan: bool):
    """(abstract parameters, their NamedShardings): `{embed, layers, final_norm[, head]}`,
    `layers` a list of per-layer dicts, or (scan) one dict of arrays stacked on a leading
    layer axis."""
    params: dict[str, Any] = {}
    shardings: dict[str, Any] = {}

    def leaf(shape, dims):
        return jax.ShapeDtypeStruct(shape, param_dtype), shard.named(*dims)

    params["embed"], shardings["embed"] = leaf((cfg.vocab, cfg.hidden), ("tp", "fsdp"))
    per_layer = layer_shapes(cfg)
    if scan:
        stacked = {k: leaf((cfg.layers, *shape), (None, *dims)) for k, (shape, dims) in per_layer.items()}
        params["layers"] = {k: v[0] for k, v in stacked.items()}
        shardings["layers"] = {k: v[1] for k, v in stacked.items()}
    else:
        layers = [{k: leaf(shape, dims) for k, (shape, dims) in per_layer.items()} for _ in range(cfg.layers)]
        params["layers"] = [{k: v[0] for k, v in lay.items()} for lay in layers]
        shardings["layers"] = [{k: v[1] for k, v in lay.items()} for lay in layers]
    params["final_norm"], shardings["final_norm"] = leaf((cfg.hidden,), (None,))
    if not cfg.tied_embeddings:
        params["head"], shardings["head"] = leaf((cfg.hidden, cfg.vocab), ("fsdp", "tp"))
    return params, shardings


# ---------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------


def rms_norm(x, scale, eps: float, dtype):
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    return (y * scale.astype(jnp.float32)).astype(dtype)


def rope(x, theta: float):
    """Rotary embedding of `[B, S, heads, hd]` (rotate-half form), computed in f32."""
    seq, hd = x.shape[1], x.shape[-1]
    inv_freq = jnp.asarray(1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd)), jnp.float32)
    pos = jax.lax.broadcasted_iota(jnp.float32, (seq, hd // 2), 0)
    angles = pos * inv_freq[None, :]
    cos = jnp.concatenate([jnp.cos(angles)] * 2, axis=-1)[None, :, None, :]
    sin = jnp.concatenate([jnp.sin(angles)] * 2, axis=-1)[None, :, None, :]
    xf = x.astype(jnp.float32)
    x1, x2 = jnp.split(xf, 2, axis=-1)
    rotated = jnp.concatenate([-x2, x1], axis=-1)
    return (xf * cos + rotated * sin).astype(x.dtype)


def _w(shard: Shardings, cfg: LlamaConfig, lp, name: str, dtype):
    return shard.gather(lp[name], layer_shapes(cfg)[name][1], dtype)


def attention(cfg: LlamaConfig, shard: Shardings, x, lp, dtype):
    b, s, _ = x.shape
    kv, groups, hd = cfg.kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim
    q = jnp.einsum("bsd,dhk->bshk", x, _w(shard, cfg, lp, "wq", dtype))
    k = jnp.einsum("bsd,dhk->bshk", x, _w(shard, cfg, lp, "wk", dtype))
    v = jnp.einsum("bsd,dhk->bshk", x, _w(shard, cfg, lp, "wv", dtype))
    q = shard.constrain(rope(q, cfg.rope_theta), DATA_AXES, None, "tp", None)
    k = shard.constrain(rope(k, cfg.rope_theta), DATA_AXES, None, "tp", None)
    v = shard.constrain(v, DATA_AXES, None, "tp", None)
    q = q.reshape(b, s, kv, groups, hd)
    scores = jnp.einsum("bskgh,btkh->bkgst", q, k) * jnp.asarray(1.0 / math.sqrt(hd), dtype)
    causal = jax.lax.broadcasted_iota(jnp.int32, (s, s), 0) >= jax.lax.broadcasted_iota(jnp.int32, (s, s), 1)
    scores = jnp.where(causal[None, None, None], scores.astype(jnp.float32), jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(dtype)
    out = jnp.einsum("bkgst,btkh->bskgh", probs, v).reshape(b, s, cfg.heads, hd)
    out = shard.constrain(out, DATA_AXES, None, "tp", None)
    return jnp.einsum("bshk,hkd->bsd", out, _w(shard, cfg, lp, "wo", dtype))


def mlp(cfg: LlamaConfig, shard: Shardings, x, lp, dtype):
    gate = jnp.einsum("bsd,df->bsf", x, _w(shard, cfg, lp, "w_gate", dtype))
    up = jnp.einsum("bsd,df->bsf", x, _w(shard, cfg, lp, "w_up", dtype))
    hidden = shard.constrain(jax.nn.silu(gate) * up, DATA_AXES, None, "tp")
    return jnp.einsum("bsf,fd->bsd", hidden, _w(shard, cfg, lp, "w_down", dtype))


def decoder_layer(cfg: LlamaConfig, shard: Shardings, x, lp, dtype):
    h = x + attention(cfg, shard, rms_norm(x, lp["attn_norm"], cfg.norm_eps, dtype), lp, dtype)
    h = shard.constrain(h, DATA_AXES, None, None)
    out = h + mlp(cfg, shard, rms_norm(h, lp["mlp_norm"], cfg.norm_eps, dtype), lp, dtype)
    return shard.constrain(out, DATA_AXES, None, None)


def forward(cfg: LlamaConfig, shard: Shardings, params, tokens, dtype, *, scan: bool):
    """Logits `[B, S, V]` (in `dtype`) of int32 tokens `[B, S]`."""
    embed = shard.gather(params["embed"], ("tp", "fsdp"), dtype)
    x = jnp.take(embed, tokens, axis=0)
    x = shard.constrain(x, DATA_AXES, None, None)
    if scan:

        def body(carry, lp):
            return decoder_layer(cfg, shard, carry, lp, dtype), None

        x, _ = jax.lax.scan(body, x, params["layers"])
    else:
        for lp in params["layers"]:
            x = decoder_layer(cfg, shard, x, lp, dtype)
    x = rms_norm(x, params["final_norm"], cfg.norm_eps, dtype)
    head = embed.T if cfg.tied_embeddings else shard.gather(params["head"], ("fsdp", "tp"), dtype)
    logits = jnp.einsum("bsd,dv->bsv", x, head)
    return shard.constrain(logits, DATA_AXES, None, "tp")


def cross_entropy(logits, targets):
    """Mean next-token cross-entropy (f32), one-hot form (the vocabulary may be split)."""
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    one_hot = jax.nn.one_hot(targets, logits.shape[-1], dtype=jnp.float32)
    return -jnp.mean(jnp.sum(one_hot * logp, axis=-1))


# ---------------------------------------------------------------------------
# optimizer and step
# ---------------------------------------------------------------------------


def make_optimizer():
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=PEAK_LR,
        warmup_steps=WARMUP_STEPS,
        decay_steps=DECAY_STEPS,
        end_value=PEAK_LR * END_LR_FRACTION,
    )

    def decay_mask(params):
        return jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)

    return optax.chain(
        optax.clip_by_global_norm(CLIP_NORM),
        optax.adamw(schedule, b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS, weight_decay=WEIGHT_DECAY, mask=decay_mask),
    )


def opt_state_shardings(opt_state, params, param_shardings, replicated):
    """NamedShardings of the optimizer state: a leaf whose key path ends with a
    parameter's key path (and has its shape) takes that parameter's sharding (AdamW's
    mu and nu); anything else (step counts) is replicated."""
    by_path = {}
    for (path, p), (_, s) in zip(
        jax.tree_util.tree_flatten_with_path(params)[0], jax.tree_util.tree_flatten_with_path(param_shardings)[0]
    ):
        by_path[tuple(path)] = (p.shape, s)
    longest = max(len(k) for k in by_path)

    def pick(path, leaf):
        path = tuple(path)
        for n in range(min(longest, len(path)), 0, -1):
            hit = by_path.get(path[-n:])
            if hit is not None and hit[0] == leaf.shape:
                return hit[1]
        return replicated

    return jax.tree_util.tree_map_with_path(pick, opt_state)


def make_step(cfg: LlamaConfig, shard: Shardings, dtype, *, scan: bool):
    tx = make_optimizer()

    def train_step(params, opt_state, batch):
        def loss_fn(p):
            return cross_entropy(forward(cfg, shard, p, batch["inputs"], dtype, scan=scan), batch["targets"])

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return params, opt_state, {"loss": loss}

    return tx, train_step


def jitted_step(cfg: LlamaConfig, mesh, *, global_batch: int, seq_len: int, dtype, param_dtype, scan: bool):
    """(jitted train step, abstract (params, opt_state, batch)): shardings on the mesh,
    parameters and optimizer state donated."""
    shard = Shardings(mesh)
    params, p_sh = param_tree(cfg, shard, param_dtype, scan=scan)
    tx, step = make_step(cfg, shard, dtype, scan=scan)
    opt_state = jax.eval_shape(tx.init, params)
    replicated = shard.named()
    o_sh = opt_state_shardings(opt_state, params, p_sh, replicated)
    tokens = jax.ShapeDtypeStruct((global_batch, seq_len), jnp.int32)
    batch = {"inputs": tokens, "targets": tokens}
    b_sh = {k: shard.named(DATA_AXES, None) for k in batch}
    fn = jax.jit(
        step,
        in_shardings=(p_sh, o_sh, b_sh),
        out_shardings=(p_sh, o_sh, {"loss": replicated}),
        donate_argnums=(0, 1),
    )
    return fn, (params, opt_state, batch)

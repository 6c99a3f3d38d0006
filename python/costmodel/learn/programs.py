"""Small StableHLO programs made with JAX: the held-in workloads of the CPU evaluation
(benchmarks/profiled_eval.py) and the random-but-realistic corpus of the learned
backend (`costmodel learn collect`).

    held_in_programs()           -> [Program(name, family, text)]  MLP, ResNet block, transformer block, GEMM sweep
    corpus_programs(n, seed)     -> n programs drawn from FAMILIES (GEMMs and convolutions of every
                                    layout, elementwise chains, reductions, attention, layer norm,
                                    pooling, gather/scatter, sort, fft, loops, ...)
    corpus_programs(n, seed, scale="gpu") -> from GPU_FAMILIES: training-step sizes on one GPU
                                    (bf16 convolutions and their gradients, large GEMMs,
                                    elementwise chains and reductions of 1M-128M elements)

Every program is `jax.jit(f).lower(*abstract args).as_text()` (weights are arguments, no
large constants), single device, f32 unless the family draws another element type. Needs
the `[jax]` extra. Sizes are drawn so that a program runs between ~10 us and ~20 ms on
one CPU core (the GPU families: between ~10 us and a few ms on one GPU).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = ["Program", "held_in_programs", "corpus_programs", "FAMILIES", "GPU_FAMILIES", "generate"]


@dataclass
class Program:
    name: str  # unique, stable for a seed
    family: str
    text: str


def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:  # pragma: no cover - the [jax] extra
        from ..ir import InputError

        raise InputError("generating programs needs JAX: pip install 'stablehlo-costmodel[jax]'") from None
    return jax, jnp


def _lower(f, *shapes) -> str:
    jax, jnp = _jax()
    args = [jax.ShapeDtypeStruct(s, jnp.dtype(d)) for s, d in shapes]
    return jax.jit(f).lower(*args).as_text()


# --------------------------------------------------------------------------------------
# held-in workloads
# --------------------------------------------------------------------------------------


def mlp(batch=64, sizes=(512, 1024, 1024, 10)) -> str:
    jax, jnp = _jax()
    ws = list(zip(sizes[:-1], sizes[1:]))

    def f(x, *params):
        h = x
        for i in range(len(ws)):
            w, b = params[2 * i], params[2 * i + 1]
            h = h @ w + b
            if i < len(ws) - 1:
                h = jax.nn.relu(h)
        return jax.nn.log_softmax(h)

    shapes = [((batch, sizes[0]), "float32")]
    for a, b in ws:
        shapes += [((a, b), "float32"), ((b,), "float32")]
    return _lower(f, *shapes)


def resnet_block(batch=4, hw=28, c=64, stride=1, cout=None) -> str:
    """A basic residual block (inference): conv3x3-BN-ReLU-conv3x3-BN + shortcut, ReLU; NHWC."""
    jax, jnp = _jax()
    cout = cout or c
    dn = ("NHWC", "HWIO", "NHWC")

    def bn(x, s, b):
        return x * s + b

    def f(x, w1, s1, b1, w2, s2, b2, *proj):
        h = jax.lax.conv_general_dilated(x, w1, (stride, stride), "SAME", dimension_numbers=dn)
        h = jax.nn.relu(bn(h, s1, b1))
        h = jax.lax.conv_general_dilated(h, w2, (1, 1), "SAME", dimension_numbers=dn)
        h = bn(h, s2, b2)
        sc = x
        if proj:
            sc = jax.lax.conv_general_dilated(x, proj[0], (stride, stride), "SAME", dimension_numbers=dn)
        return jax.nn.relu(h + sc)

    shapes = [
        ((batch, hw, hw, c), "float32"),
        ((3, 3, c, cout), "float32"),
        ((cout,), "float32"),
        ((cout,), "float32"),
        ((3, 3, cout, cout), "float32"),
        ((cout,), "float32"),
        ((cout,), "float32"),
    ]
    if stride != 1 or cout != c:
        shapes.append(((1, 1, c, cout), "float32"))
    return _lower(f, *shapes)


def transformer_block(batch=2, seq=128, d=256, heads=4, ff=1024) -> str:
    """Pre-LN transformer block (inference): LN, multi-head self-attention, LN, GELU MLP."""
    jax, jnp = _jax()
    dh = d // heads

    def ln(x, g, b):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    def f(x, g1, b1, wq, wk, wv, wo, g2, b2, w1, c1, w2, c2):
        h = ln(x, g1, b1)
        q = (h @ wq).reshape(batch, seq, heads, dh)
        k = (h @ wk).reshape(batch, seq, heads, dh)
        v = (h @ wv).reshape(batch, seq, heads, dh)
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(dh).astype(x.dtype)
        p = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhqk,bkhd->bqhd", p, v).reshape(batch, seq, d)
        x = x + o @ wo
        h = ln(x, g2, b2)
        h = jax.nn.gelu(h @ w1 + c1)
        return x + h @ w2 + c2

    f32 = "float32"
    shapes = [
        ((batch, seq, d), f32),
        ((d,), f32),
        ((d,), f32),
        ((d, d), f32),
        ((d, d), f32),
        ((d, d), f32),
        ((d, d), f32),
        ((d,), f32),
        ((d,), f32),
        ((d, ff), f32),
        ((ff,), f32),
        ((ff, d), f32),
        ((d,), f32),
    ]
    return _lower(f, *shapes)


def gemm(m, n, k, dtype="float32") -> str:
    return _lower(lambda a, b: a @ b, ((m, k), dtype), ((k, n), dtype))


def held_in_programs() -> list[Program]:
    """The held-in workloads of the CPU evaluation (fixed shapes)."""
    out = [
        Program("mlp-b64", "mlp", mlp(64)),
        Program("mlp-b256", "mlp", mlp(256, (256, 512, 512, 10))),
        Program("resnet-block-28x64", "resnet", resnet_block(4, 28, 64)),
        Program("resnet-block-14x128-s2", "resnet", resnet_block(4, 28, 64, stride=2, cout=128)),
        Program("transformer-block-s128-d256", "transformer", transformer_block()),
        Program("transformer-block-s64-d128", "transformer", transformer_block(4, 64, 128, 4, 512)),
    ]
    for m, n, k in ((64, 64, 64), (128, 256, 512), (256, 256, 256), (512, 512, 512), (1024, 256, 128), (32, 1024, 1024)):
        out.append(Program(f"gemm-{m}x{n}x{k}", "gemm", gemm(m, n, k)))
    return out


# --------------------------------------------------------------------------------------
# the corpus: random but realistic small programs
# --------------------------------------------------------------------------------------


def _pick(r: random.Random, xs):
    return xs[r.randrange(len(xs))]


def _gemm_prog(r):
    jax, jnp = _jax()
    m, n, k = (_pick(r, (16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)) for _ in range(3))
    layout = _pick(r, ("nn", "tn", "nt", "tt", "batched"))
    dt = _pick(r, ("float32",) * 5 + ("bfloat16", "float16"))
    if layout == "batched":
        b = _pick(r, (2, 4, 8, 16))
        m, n, k = max(16, m // 4), max(16, n // 4), max(16, k // 4)
        return f"bgemm-{b}x{m}x{n}x{k}-{dt}", _lower(lambda a, w: jnp.einsum("bmk,bkn->bmn", a, w), ((b, m, k), dt), ((b, k, n), dt))
    sa = (k, m) if layout[0] == "t" else (m, k)
    sb = (n, k) if layout[1] == "t" else (k, n)

    def f(a, w):
        a = a.T if layout[0] == "t" else a
        w = w.T if layout[1] == "t" else w
        return a @ w

    return f"gemm-{layout}-{m}x{n}x{k}-{dt}", _lower(f, (sa, dt), (sb, dt))


def _conv_prog(r):
    jax, jnp = _jax()
    layout = _pick(r, ("NHWC", "NCHW", "NHWC", "NCHW", "CHWN"))
    kern = {"NHWC": "HWIO", "NCHW": "OIHW", "CHWN": "HWIO"}[layout]
    n = _pick(r, (1, 2, 4, 8))
    hw = _pick(r, (7, 8, 14, 16, 28, 32, 56))
    c = _pick(r, (3, 8, 16, 32, 64, 128, 256))
    co = _pick(r, (8, 16, 32, 64, 128, 256))
    ksz = _pick(r, (1, 1, 3, 3, 3, 5, 7))
    stride = _pick(r, (1, 1, 1, 2))
    groups = 1
    if _pick(r, range(6)) == 0 and c >= 8:  # depthwise
        groups, co = c, c
    while n * hw * hw * c * co * ksz * ksz / groups > 6e8:
        hw = max(4, hw // 2)
        if hw == 4:
            break
    shape_x = {"NHWC": (n, hw, hw, c), "NCHW": (n, c, hw, hw), "CHWN": (c, hw, hw, n)}[layout]
    shape_w = {"HWIO": (ksz, ksz, c // groups, co), "OIHW": (co, c // groups, ksz, ksz)}[kern]
    dn = (layout, kern, layout)
    padding = _pick(r, ("SAME", "SAME", "VALID"))

    def f(x, w):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=dn, feature_group_count=groups)

    name = f"conv-{layout}-n{n}-{hw}x{hw}-c{c}-o{co}-k{ksz}-s{stride}-{padding.lower()}" + (f"-g{groups}" if groups > 1 else "")
    return name, _lower(f, (shape_x, "float32"), (shape_w, "float32"))


def _shape(r, max_elems=1 << 20):
    rank = _pick(r, (1, 2, 2, 3, 4))
    dims = [_pick(r, (4, 8, 16, 32, 64, 128, 256, 512, 1024)) for _ in range(rank)]
    while _prod(dims) > max_elems:
        i = max(range(rank), key=lambda j: dims[j])
        dims[i] //= 2
    return tuple(dims)


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def _elementwise_prog(r):
    jax, jnp = _jax()
    shape = _shape(r)
    ops = [
        ("add", lambda a, b: a + b),
        ("mul", lambda a, b: a * b),
        ("sub", lambda a, b: a - b),
        ("max", jnp.maximum),
        ("div", lambda a, b: a / (jnp.abs(b) + 1.0)),
        ("exp", lambda a, b: jnp.exp(a)),
        ("tanh", lambda a, b: jnp.tanh(a)),
        ("logistic", lambda a, b: jax.nn.sigmoid(a)),
        ("log", lambda a, b: jnp.log(jnp.abs(a) + 1.0)),
        ("sqrt", lambda a, b: jnp.sqrt(jnp.abs(a))),
        ("select", lambda a, b: jnp.where(a > b, a, b)),
        ("relu", lambda a, b: jax.nn.relu(a)),
        ("gelu", lambda a, b: jax.nn.gelu(a)),
        ("convert", lambda a, b: a.astype(jnp.bfloat16).astype(jnp.float32)),
        ("pow", lambda a, b: a**2),
    ]
    length = _pick(r, (1, 1, 2, 3, 4, 6, 8))
    chain = [_pick(r, ops) for _ in range(length)]
    bcast = _pick(r, (False, False, True))

    def f(a, b, c):
        x = a
        for _, op in chain:
            x = op(x, b)
        if bcast:
            x = x + c
        return x

    cshape = shape[-1:] if bcast else (1,)
    name = f"ew-{'-'.join(n for n, _ in chain)}-{'x'.join(map(str, shape))}" + ("-bcast" if bcast else "")
    return name, _lower(f, (shape, "float32"), (shape, "float32"), (cshape, "float32"))


def _reduce_prog(r):
    jax, jnp = _jax()
    shape = _shape(r, 1 << 21)
    if len(shape) == 1:
        shape = (shape[0], 64)
    axis = _pick(r, tuple(range(len(shape))) + (-1, None))
    kind = _pick(r, ("sum", "max", "mean", "argmax", "logsumexp", "var"))
    fn = {
        "sum": lambda x: x.sum(axis),
        "max": lambda x: x.max(axis),
        "mean": lambda x: x.mean(axis),
        "argmax": lambda x: jnp.argmax(x, axis=axis if axis is not None else None),
        "logsumexp": lambda x: jax.nn.logsumexp(x, axis=axis),
        "var": lambda x: x.var(axis),
    }[kind]
    return f"reduce-{kind}-{'x'.join(map(str, shape))}-ax{axis}", _lower(fn, (shape, "float32"))


def _attention_prog(r):
    jax, jnp = _jax()
    b = _pick(r, (1, 2, 4))
    s = _pick(r, (32, 64, 128, 256))
    h = _pick(r, (1, 2, 4, 8))
    dh = _pick(r, (32, 64))
    causal = _pick(r, (False, True))

    def f(q, k, v):
        sc = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(float(dh))
        if causal:
            mask = jnp.tril(jnp.ones((s, s), bool))
            sc = jnp.where(mask, sc, -1e9)
        p = jax.nn.softmax(sc, axis=-1)
        return jnp.einsum("bhqk,bkhd->bqhd", p, v)

    shp = ((b, s, h, dh), "float32")
    return f"attention-b{b}-s{s}-h{h}-d{dh}" + ("-causal" if causal else ""), _lower(f, shp, shp, shp)


def _layernorm_prog(r):
    jax, jnp = _jax()
    rows = _pick(r, (16, 64, 128, 256, 512, 2048))
    d = _pick(r, (64, 128, 256, 512, 768, 1024, 2048))
    rms = _pick(r, (False, True))

    def f(x, g, b):
        if rms:
            return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + 1e-5) * g + b

    return f"{'rmsnorm' if rms else 'layernorm'}-{rows}x{d}", _lower(f, ((rows, d), "float32"), ((d,), "float32"), ((d,), "float32"))


def _pool_prog(r):
    jax, jnp = _jax()
    n = _pick(r, (1, 2, 4, 8))
    hw = _pick(r, (8, 14, 16, 28, 32, 56, 112))
    c = _pick(r, (16, 32, 64, 128))
    win = _pick(r, (2, 3))
    stride = _pick(r, (1, 2))
    kind = _pick(r, ("max", "avg", "global"))
    while n * hw * hw * c > 4e6:
        hw //= 2

    def f(x):
        if kind == "global":
            return x.mean((1, 2))
        init = -jnp.inf if kind == "max" else 0.0
        op = jax.lax.max if kind == "max" else jax.lax.add
        y = jax.lax.reduce_window(x, init, op, (1, win, win, 1), (1, stride, stride, 1), "SAME")
        return y if kind == "max" else y / (win * win)

    return f"pool-{kind}-n{n}-{hw}x{hw}-c{c}-w{win}-s{stride}", _lower(f, ((n, hw, hw, c), "float32"))


def _gather_prog(r):
    jax, jnp = _jax()
    vocab = _pick(r, (256, 1024, 4096, 16384))
    d = _pick(r, (32, 64, 128, 256, 512))
    nidx = _pick(r, (16, 128, 512, 2048, 8192))
    kind = _pick(r, ("take", "take", "scatter-add", "one-hot-update"))
    if kind == "take":
        return f"gather-{vocab}x{d}-n{nidx}", _lower(lambda t, i: jnp.take(t, i, axis=0), ((vocab, d), "float32"), ((nidx,), "int32"))
    if kind == "scatter-add":
        return f"scatter-add-{vocab}x{d}-n{nidx}", _lower(
            lambda t, i, u: t.at[i].add(u), ((vocab, d), "float32"), ((nidx,), "int32"), ((nidx, d), "float32")
        )
    return f"scatter-set-{vocab}x{d}-n{nidx}", _lower(
        lambda t, i, u: t.at[i].set(u), ((vocab, d), "float32"), ((nidx,), "int32"), ((nidx, d), "float32")
    )


def _sort_prog(r):
    jax, jnp = _jax()
    rows = _pick(r, (1, 8, 64, 256))
    n = _pick(r, (64, 256, 1024, 4096))
    kind = _pick(r, ("sort", "argsort", "topk"))
    if kind == "topk":
        k = _pick(r, (1, 4, 16))
        return f"topk-{rows}x{n}-k{k}", _lower(lambda x: jax.lax.top_k(x, k)[0], ((rows, n), "float32"))
    fn = (lambda x: jnp.sort(x, -1)) if kind == "sort" else (lambda x: jnp.argsort(x, -1))
    return f"{kind}-{rows}x{n}", _lower(fn, ((rows, n), "float32"))


def _fft_prog(r):
    jax, jnp = _jax()
    rows = _pick(r, (1, 8, 64, 256))
    n = _pick(r, (64, 128, 256, 512, 1024, 4096))
    kind = _pick(r, ("rfft", "fft", "irfft"))
    if kind == "rfft":
        return f"rfft-{rows}x{n}", _lower(lambda x: jnp.abs(jnp.fft.rfft(x)), ((rows, n), "float32"))
    if kind == "fft":
        return f"fft-{rows}x{n}", _lower(lambda x: jnp.abs(jnp.fft.fft(x.astype(jnp.complex64))), ((rows, n), "float32"))
    return f"irfft-{rows}x{n}", _lower(lambda x: jnp.fft.irfft(x.astype(jnp.complex64)), ((rows, n // 2 + 1), "float32"))


def _loop_prog(r):
    jax, jnp = _jax()
    trips = _pick(r, (2, 4, 8, 16, 32))
    d = _pick(r, (32, 64, 128, 256))
    b = _pick(r, (8, 32, 128))
    kind = _pick(r, ("rnn", "power", "scan"))
    if kind == "scan":

        def f(x, w):
            def step(h, xt):
                h = jnp.tanh(h @ w + xt)
                return h, h

            return jax.lax.scan(step, jnp.zeros((b, d), x.dtype), x)[1]

        return f"scan-t{trips}-b{b}-d{d}", _lower(f, ((trips, b, d), "float32"), ((d, d), "float32"))

    def f(x, w):
        def body(i, h):
            return jnp.tanh(h @ w) if kind == "rnn" else h * 0.5 + jnp.sin(h)

        return jax.lax.fori_loop(0, trips, body, x)

    return f"loop-{kind}-t{trips}-b{b}-d{d}", _lower(f, ((b, d), "float32"), ((d, d), "float32"))


def _movement_prog(r):
    jax, jnp = _jax()
    shape = _shape(r, 1 << 21)
    kind = _pick(r, ("transpose", "concat", "pad", "slice", "reverse", "cumsum", "broadcast"))
    if len(shape) < 2:
        shape = (shape[0], 32)
    if kind == "transpose":
        perm = list(range(len(shape)))
        r.shuffle(perm)
        if perm == sorted(perm):
            perm = perm[::-1]
        return f"transpose-{'x'.join(map(str, shape))}-{''.join(map(str, perm))}", _lower(lambda x: jnp.transpose(x, perm) * 1.0 + 0.0, (shape, "float32"))
    if kind == "concat":
        return f"concat-{'x'.join(map(str, shape))}", _lower(lambda x, y: jnp.concatenate([x, y], axis=-1), (shape, "float32"), (shape, "float32"))
    if kind == "pad":
        return f"pad-{'x'.join(map(str, shape))}", _lower(lambda x: jnp.pad(x, [(1, 2)] * len(shape)), (shape, "float32"))
    if kind == "slice":
        return f"slice-{'x'.join(map(str, shape))}", _lower(lambda x: x[..., 1::2] + 1.0, (shape, "float32"))
    if kind == "reverse":
        return f"reverse-{'x'.join(map(str, shape))}", _lower(lambda x: jnp.flip(x, -1) + 1.0, (shape, "float32"))
    if kind == "cumsum":
        return f"cumsum-{'x'.join(map(str, shape))}", _lower(lambda x: jnp.cumsum(x, -1), (shape, "float32"))
    return f"broadcast-{'x'.join(map(str, shape))}", _lower(lambda x: jnp.broadcast_to(x[..., :1], shape) * 2.0, (shape, "float32"))


def _block_prog(r):
    """Small multi-op programs: a layer of an MLP, a conv-BN-ReLU, a ResNet or transformer block."""
    kind = _pick(r, ("mlp", "conv-bn-relu", "resnet", "transformer"))
    if kind == "mlp":
        b = _pick(r, (8, 32, 64, 128, 256))
        sizes = tuple(_pick(r, (64, 128, 256, 512, 1024)) for _ in range(_pick(r, (2, 3, 4))))
        return f"mlp-b{b}-{'-'.join(map(str, sizes))}", mlp(b, sizes)
    if kind == "resnet":
        n, hw, c = _pick(r, (1, 2, 4)), _pick(r, (8, 14, 16, 28)), _pick(r, (16, 32, 64))
        s = _pick(r, (1, 2))
        return f"resnet-n{n}-{hw}-c{c}-s{s}", resnet_block(n, hw, c, s, c * s)
    if kind == "transformer":
        b, s, d = _pick(r, (1, 2)), _pick(r, (32, 64, 128)), _pick(r, (64, 128, 256))
        h = _pick(r, (2, 4))
        return f"transformer-b{b}-s{s}-d{d}-h{h}", transformer_block(b, s, d, h, 4 * d)
    jax, jnp = _jax()
    n, hw, c, co = _pick(r, (1, 2, 4)), _pick(r, (8, 14, 28)), _pick(r, (16, 32, 64)), _pick(r, (16, 32, 64, 128))
    dn = ("NHWC", "HWIO", "NHWC")

    def f(x, w, s, b):
        return jax.nn.relu(jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=dn) * s + b)

    return f"conv-bn-relu-n{n}-{hw}-c{c}-o{co}", _lower(
        f, ((n, hw, hw, c), "float32"), ((3, 3, c, co), "float32"), ((co,), "float32"), ((co,), "float32")
    )


FAMILIES = {
    "gemm": (_gemm_prog, 4),
    "conv": (_conv_prog, 4),
    "elementwise": (_elementwise_prog, 3),
    "reduce": (_reduce_prog, 2),
    "attention": (_attention_prog, 2),
    "layernorm": (_layernorm_prog, 1),
    "pool": (_pool_prog, 1),
    "gather": (_gather_prog, 1),
    "sort": (_sort_prog, 1),
    "fft": (_fft_prog, 1),
    "loop": (_loop_prog, 1),
    "movement": (_movement_prog, 2),
    "block": (_block_prog, 2),
}


# --------------------------------------------------------------------------------------
# GPU scale: the sizes and element types of a training step on one GPU (tensors of
# 1 MB-1 GB, bf16 convolutions with their gradients); a CPU core would take seconds
# to minutes for one of these, a GPU tens of microseconds to milliseconds.
# --------------------------------------------------------------------------------------


def _gpu_conv_prog(r):
    """A ResNet-like NHWC bf16 convolution at training batch sizes: the forward, or the
    gradient with respect to its input or its filter (what a training step runs)."""
    jax, jnp = _jax()
    n = _pick(r, (16, 32, 64, 128, 256))
    hw, c = _pick(r, ((112, 3), (56, 64), (56, 128), (28, 128), (28, 256), (14, 256), (14, 512), (7, 512), (56, 256), (28, 512), (14, 1024), (7, 2048)))
    co = _pick(r, (64, 128, 256, 512)) if c > 3 else 64
    ksz = _pick(r, (1, 3, 3)) if c > 3 else 7
    stride = _pick(r, (1, 1, 1, 2)) if c > 3 else 2
    while n * hw * hw * c * co * ksz * ksz > 2e11 and n > 16:
        n //= 2
    what = _pick(r, ("fwd", "dx", "dw"))
    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=dn)

    xs, ws = (n, hw, hw, c), (ksz, ksz, c, co)
    name = f"gconv-{what}-n{n}-{hw}x{hw}-c{c}-o{co}-k{ksz}-s{stride}"
    if what == "fwd":
        return name, _lower(conv, (xs, "bfloat16"), (ws, "bfloat16"))
    x0 = jax.ShapeDtypeStruct(xs, jnp.bfloat16)
    w0 = jax.ShapeDtypeStruct(ws, jnp.bfloat16)
    ys = jax.eval_shape(conv, x0, w0).shape
    if what == "dx":
        return name, _lower(lambda w, g: jax.vjp(lambda x: conv(x, w), jnp.zeros(xs, jnp.bfloat16))[1](g)[0], (ws, "bfloat16"), (ys, "bfloat16"))
    return name, _lower(lambda x, g: jax.vjp(lambda w: conv(x, w), jnp.zeros(ws, jnp.bfloat16))[1](g)[0], (xs, "bfloat16"), (ys, "bfloat16"))


def _gpu_gemm_prog(r):
    m, n, k = (_pick(r, (256, 512, 1024, 2048, 4096, 8192)) for _ in range(3))
    dt = _pick(r, ("bfloat16", "bfloat16", "float32"))
    jax, jnp = _jax()
    return f"ggemm-{m}x{n}x{k}-{dt}", _lower(lambda a, w: a @ w, ((m, k), dt), ((k, n), dt))


def _gpu_shape(r, max_elems=1 << 27):
    """A 4-D activation-like shape (batch, h, w, c) or a 2-D (tokens, d) one, 1M-128M elements."""
    if _pick(r, (0, 1)):
        b, hw, c = _pick(r, (32, 64, 128, 256)), _pick(r, (7, 14, 28, 56, 112)), _pick(r, (64, 128, 256, 512, 1024, 2048))
        dims = [b, hw, hw, c]
    else:
        dims = [_pick(r, (2048, 4096, 8192, 16384)), _pick(r, (512, 768, 1024, 2048, 4096))]
    while _prod(dims) > max_elems:
        dims[0] //= 2
    while _prod(dims) < 1 << 20:
        dims[0] *= 2
    return tuple(dims)


def _gpu_elementwise_prog(r):
    jax, jnp = _jax()
    shape = _gpu_shape(r)
    dt = _pick(r, ("bfloat16", "float32"))
    ops = [("add", lambda a, b: a + b), ("mul", lambda a, b: a * b), ("relu", lambda a, b: jax.nn.relu(a)),
           ("select", lambda a, b: jnp.where(a > 0, b, 0)), ("exp", lambda a, b: jnp.exp(a)), ("gelu", lambda a, b: jax.nn.gelu(a)),
           ("convert", lambda a, b: a.astype(jnp.float32).astype(a.dtype))]
    chain = [_pick(r, ops) for _ in range(_pick(r, (1, 2, 3, 4)))]
    bcast = _pick(r, (False, True))

    def f(a, b, c):
        x = a
        for _, op in chain:
            x = op(x, b)
        return x * c if bcast else x

    cshape = shape[-1:] if bcast else (1,)
    name = f"gew-{'-'.join(n for n, _ in chain)}-{'x'.join(map(str, shape))}-{dt}" + ("-bcast" if bcast else "")
    return name, _lower(f, (shape, dt), (shape, dt), (cshape, dt))


def _gpu_reduce_prog(r):
    """Batch-norm-like statistics (all but the last dimension, in f32) or a row reduction."""
    jax, jnp = _jax()
    shape = _gpu_shape(r)
    dt = _pick(r, ("bfloat16", "float32"))
    kind = _pick(r, ("stats", "rows", "sum-sq"))
    axes = tuple(range(len(shape) - 1)) if kind != "rows" else (len(shape) - 1,)

    def f(x):
        xf = x.astype(jnp.float32)
        if kind == "sum-sq":
            return (xf * xf).sum(axes)
        return xf.sum(axes) if kind == "rows" else (xf.mean(axes), xf.var(axes))

    return f"greduce-{kind}-{'x'.join(map(str, shape))}-{dt}", _lower(f, (shape, dt))


GPU_FAMILIES = {
    "conv": (_gpu_conv_prog, 4),
    "gemm": (_gpu_gemm_prog, 2),
    "elementwise": (_gpu_elementwise_prog, 2),
    "reduce": (_gpu_reduce_prog, 2),
}
SCALES = {"cpu": FAMILIES, "gpu": GPU_FAMILIES}


def generate(family: str, seed: int, scale: str = "cpu") -> Program:
    r = random.Random(f"{family}:{seed}" if scale == "cpu" else f"{scale}:{family}:{seed}")
    fn = SCALES[scale][family][0]
    name, text = fn(r)
    return Program(f"{name}#{seed}", family, text)


def corpus_programs(n: int, seed: int = 0, families=None, scale: str = "cpu") -> list[Program]:
    """n programs, families drawn by weight; names are unique (duplicates redrawn).
    scale="gpu": the GPU_FAMILIES (training-step sizes, bf16)."""
    table = SCALES[scale]
    fams = list(families or table)
    weights = [table[f][1] for f in fams]
    r = random.Random(seed)
    out, seen = [], set()
    attempts = 0
    while len(out) < n and attempts < 20 * n:
        attempts += 1
        fam = r.choices(fams, weights)[0]
        p = generate(fam, r.randrange(1 << 30), scale)
        base = p.name.split("#")[0]
        if base in seen:
            continue
        seen.add(base)
        out.append(p)
    return out

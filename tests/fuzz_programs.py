"""Hypothesis strategies for random but valid StableHLO programs (differential fuzzing).

`programs()` draws a `Program`: a `func.func public @main` whose body is a small DAG of
ops built on function arguments, with every value that has no user returned (so no op
is dead code that XLA's converter could drop). Valid by construction: every shape is
computed here from the op's semantics; tests/test_fuzz.py parses and verifies each one.

Element types f32, bf16, f16, f64, i32, i8, i64, ui32. Op kinds: elementwise
unary/binary (transcendentals included), convert, broadcast_in_dim, transpose, reshape,
slice, concatenate, pad, dot_general (batch and contracting dims) and the legacy dot
(both now and then to a wider accumulator: bf16 -> f32, i8 -> i32), convolution (1-3
spatial dims, channels last or first, strides, padding, lhs/rhs dilation, feature or
batch groups), reduce (add/max) and a variadic argmax reduce, reduce_window,
select_and_scatter, sort (one operand, or values and indices), gather/scatter (`x[i]`,
`x[i, j]`, `x.at[i].add(u)`), dynamic_slice / dynamic_update_slice, compare + select,
while (counted or of a bound the function receives, 1-3 carries, perhaps nested), case,
func.call of a private function, clamp, iota (added to a value), map, reverse,
bitcast_convert, reduce_precision, an fp8 round trip (f8E4M3FN, f8E5M2: converts only),
integer convolutions (i8, i32; i8 -> i32), a variadic reduce_window (argmax pooling) and
is_finite + select.

Deliberately left out, so that our counts must equal XLA HloCostAnalysis's
(docs/cost-rules.md "Deliberate differences"): ops whose operands are all constants
(XLA's StableHLO->HLO conversion folds them; we count them), so every op reads at least
one function argument or a value computed from one (the only constants are loop bounds,
reduce/pad init values and the loop counter's increment, each used with a non-constant
operand); batch_norm_*, top_k, reduce_scatter and complex types (costed differently on
purpose).
"""

from __future__ import annotations

import dataclasses
import math

from hypothesis import strategies as st

FLOAT_DTYPES = ("f32", "bf16", "f16", "f64")
INT_DTYPES = ("i32", "i8", "i64", "ui32")
DTYPES = FLOAT_DTYPES + INT_DTYPES

UNARY_FLOAT = (
    "negate", "abs", "floor", "ceil", "sign", "round_nearest_even",
    # transcendentals
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh",
    "sqrt", "rsqrt", "cbrt", "sine", "cosine",
)
UNARY_INT = ("negate", "abs", "sign", "not", "popcnt")
UNARY_UNSIGNED = ("not", "popcnt")  # abs, sign and negate are for signed integers
BINARY_FLOAT = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder", "power", "atan2")
BINARY_INT = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder", "power", "and", "or",
              "xor", "shift_left", "shift_right_logical")
COMPARE_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")

OP_KINDS = (
    "unary", "binary", "convert", "broadcast_in_dim", "transpose", "reshape", "slice", "concatenate", "pad",
    "dot_general", "dot", "convolution", "reduce", "argmax", "reduce_window", "select_and_scatter", "sort",
    "gather", "scatter", "dynamic_slice", "dynamic_update_slice", "select", "while", "case", "call",
    "clamp", "iota", "map", "reverse", "bitcast_convert", "reduce_precision", "fp8_convert", "int_convolution",
    "argmax_window", "is_finite",
)
# 8-bit floats (convert only: XLA's CPU converter upcasts their arithmetic; a convert to and
# from them is what quantized programs hold)
FP8_DTYPES = ("f8E4M3FN", "f8E5M2")
BITS = {"f32": 32, "bf16": 16, "f16": 16, "f64": 64, "i32": 32, "i8": 8, "i64": 64, "ui32": 32}
SAME_WIDTH = {32: ("f32", "i32", "ui32"), 16: ("bf16", "f16"), 64: ("f64", "i64"), 8: ("i8",)}

# _IDENTITY_NOTE: movement ops that change nothing (broadcast/reshape to the same shape,
# the identity transpose or one that moves size-1 dimensions only, a full slice, a zero
# pad) are never generated: XLA's conversion folds them away, so `subtract(x, broadcast(x))` becomes `subtract(x, x)` and then 0
# (folded, not counted) while we count the program as written. For the same reason two
# operands of one op are never the same value (select(p, a, a) -> a).
MAX_DIM = 5
MAX_RANK = 4  # of drawn shapes; a 3-D convolution makes rank-5 values


def ttype(shape: tuple[int, ...], dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def _ilist(xs) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def _zero(dtype: str) -> str:
    return "0" if is_int(dtype) else "0.000000e+00"


@dataclasses.dataclass
class Value:
    name: str  # SSA reference, e.g. "%3" or "%w4#1"
    shape: tuple[int, ...]
    dtype: str

    @property
    def type(self) -> str:
        return ttype(self.shape, self.dtype)


@dataclasses.dataclass
class Program:
    text: str
    op_kinds: frozenset  # the OP_KINDS used
    hardware: str = "a100-40gb"  # the preset it is annotated for

    def __repr__(self) -> str:  # hypothesis prints the falsifying example with this
        return f"Program(op_kinds={sorted(self.op_kinds)!r}, hardware={self.hardware!r}, text=\n{self.text}\n)"


class _Builder:
    def __init__(self, draw):
        self.draw = draw
        self.args: list[Value] = []
        self.lines: list[str] = []
        self.values: list[Value] = []
        self.used: set[str] = set()
        self.counter = 0
        self.kinds: set[str] = set()
        self.funcs: list[str] = []  # private functions of op_call

    # -- names and values ---------------------------------------------------------
    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def arg(self, shape, dtype) -> Value:
        v = Value(f"%arg{len(self.args)}", tuple(shape), dtype)
        self.args.append(v)
        return v

    def use(self, *vals: Value) -> None:
        for v in vals:
            self.used.add(v.name)

    def emit(self, line: str, indent: int = 2) -> None:
        self.lines.append(" " * indent + line)

    def add(self, v: Value) -> Value:
        self.values.append(v)
        return v

    def shape(self, min_rank: int = 0, max_rank: int = MAX_RANK, min_dim: int = 1) -> tuple[int, ...]:
        rank = self.draw(st.integers(min_rank, max_rank))
        return tuple(self.draw(st.lists(st.integers(min_dim, MAX_DIM), min_size=rank, max_size=rank)))

    def pick(self, pred=lambda v: True) -> Value | None:
        pool = [v for v in self.values if pred(v)]
        if not pool:
            return None
        return self.draw(st.sampled_from(pool))

    def same_type(self, x: Value, *avoid: Value) -> Value:
        """Another value of x's type, or a new argument; never x or `avoid` (XLA's
        conversion folds ops on one value twice, select(p, a, a) -> a, and drops them: our
        count of the program as written would differ, docs/cost-rules.md)."""
        taken = {x.name} | {v.name for v in avoid}
        pool = [v for v in self.values if v.shape == x.shape and v.dtype == x.dtype and v.name not in taken]
        if self.draw(st.booleans()) or not pool:
            return self.arg(x.shape, x.dtype)
        return self.draw(st.sampled_from(pool))

    # -- op kinds: each returns the new value, or None when x does not suit it -----
    def unary_line(self, x: Value, out: str, indent: int = 2) -> Value:
        ops = UNARY_UNSIGNED if x.dtype.startswith("ui") else UNARY_INT if is_int(x.dtype) else UNARY_FLOAT
        op = self.draw(st.sampled_from(ops))
        self.emit(f"{out} = stablehlo.{op} {x.name} : {x.type}", indent)
        return Value(out, x.shape, x.dtype)

    def op_unary(self, x):
        self.use(x)
        return self.unary_line(x, self.fresh())

    def op_binary(self, x):
        y = self.same_type(x)
        self.use(x, y)
        ops = BINARY_INT if is_int(x.dtype) else BINARY_FLOAT
        op = self.draw(st.sampled_from(ops))
        out = self.fresh()
        self.emit(f"{out} = stablehlo.{op} {x.name}, {y.name} : {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_convert(self, x):
        dtype = self.draw(st.sampled_from([d for d in DTYPES if d != x.dtype]))
        self.use(x)
        out = self.fresh()
        r = Value(out, x.shape, dtype)
        self.emit(f"{out} = stablehlo.convert {x.name} : ({x.type}) -> {r.type}")
        return r

    def op_broadcast_in_dim(self, x):
        extra = self.draw(st.integers(0, max(0, MAX_RANK - len(x.shape))))
        rank = len(x.shape) + extra
        dims = sorted(self.draw(st.permutations(range(rank)))[: len(x.shape)])
        shape = [0] * rank
        for src, d in zip(x.shape, dims):
            # a size-1 operand dimension may broadcast to any size
            shape[d] = self.draw(st.integers(1, MAX_DIM)) if src == 1 else src
        for d in range(rank):
            if d not in dims:
                shape[d] = self.draw(st.integers(1, MAX_DIM))
        if tuple(shape) == x.shape:
            return None  # an identity (see _IDENTITY_NOTE)
        self.use(x)
        out = self.fresh()
        r = Value(out, tuple(shape), x.dtype)
        self.emit(f"{out} = stablehlo.broadcast_in_dim {x.name}, dims = {_ilist(dims)} : ({x.type}) -> {r.type}")
        return r

    def op_transpose(self, x):
        perm = self.draw(st.permutations(range(len(x.shape))))
        moved = [p for p in perm if x.shape[p] != 1]  # the dimensions with data, in their new order
        if tuple(x.shape[p] for p in perm) == x.shape and moved == sorted(moved):
            return None  # an identity, perhaps moving size-1 dimensions only (see _IDENTITY_NOTE)
        self.use(x)
        out = self.fresh()
        r = Value(out, tuple(x.shape[p] for p in perm), x.dtype)
        self.emit(f"{out} = stablehlo.transpose {x.name}, dims = {_ilist(perm)} : ({x.type}) -> {r.type}")
        return r

    def op_reshape(self, x):
        n = math.prod(x.shape)
        factors, m, p = [], n, 2
        while m > 1:
            while m % p == 0:
                factors.append(p)
                m //= p
            p += 1
        rank = self.draw(st.integers(1 if factors else 0, MAX_RANK))
        if rank == 0:
            shape = ()
        else:
            shape = [1] * rank
            for f in factors:
                shape[self.draw(st.integers(0, rank - 1))] *= f
        if tuple(shape) == x.shape:
            return None  # an identity (see _IDENTITY_NOTE)
        self.use(x)
        out = self.fresh()
        r = Value(out, tuple(shape), x.dtype)
        self.emit(f"{out} = stablehlo.reshape {x.name} : ({x.type}) -> {r.type}")
        return r

    def op_slice(self, x):
        if not x.shape:
            return None
        parts, shape = [], []
        for d in x.shape:
            start = self.draw(st.integers(0, d - 1))
            limit = self.draw(st.integers(start + 1, d))
            stride = self.draw(st.integers(1, 3))
            parts.append(f"{start}:{limit}" + (f":{stride}" if stride != 1 else ""))
            shape.append(-(-(limit - start) // stride))
        if tuple(shape) == x.shape:
            return None  # an identity (see _IDENTITY_NOTE)
        self.use(x)
        out = self.fresh()
        r = Value(out, tuple(shape), x.dtype)
        self.emit(f"{out} = stablehlo.slice {x.name} [{', '.join(parts)}] : ({x.type}) -> {r.type}")
        return r

    def op_concatenate(self, x):
        if not x.shape:
            return None
        dim = self.draw(st.integers(0, len(x.shape) - 1))
        other = list(x.shape)
        other[dim] = self.draw(st.integers(1, MAX_DIM))
        pool = [v for v in self.values if v.dtype == x.dtype and v.shape == tuple(other)]
        y = self.draw(st.sampled_from(pool)) if pool and self.draw(st.booleans()) else self.arg(other, x.dtype)
        self.use(x, y)
        shape = list(x.shape)
        shape[dim] += other[dim]
        out = self.fresh()
        r = Value(out, tuple(shape), x.dtype)
        self.emit(f"{out} = stablehlo.concatenate {x.name}, {y.name}, dim = {dim} : ({x.type}, {y.type}) -> {r.type}")
        return r

    def op_pad(self, x):
        lo = [self.draw(st.integers(0, 2)) for _ in x.shape]
        hi = [self.draw(st.integers(0, 2)) for _ in x.shape]
        interior = [self.draw(st.integers(0, 1)) for _ in x.shape]
        shape = tuple(d + a + b + max(d - 1, 0) * i for d, a, b, i in zip(x.shape, lo, hi, interior))
        if shape == x.shape:
            return None  # an identity (see _IDENTITY_NOTE)
        pv = self.fresh("c")
        self.emit(f"{pv} = stablehlo.constant dense<{_zero(x.dtype)}> : {ttype((), x.dtype)}")
        self.use(x)
        out = self.fresh()
        r = Value(out, shape, x.dtype)
        self.emit(
            f"{out} = stablehlo.pad {x.name}, {pv}, low = {_ilist(lo)}, high = {_ilist(hi)}, "
            f"interior = {_ilist(interior)} : ({x.type}, {ttype((), x.dtype)}) -> {r.type}"
        )
        return r

    def op_dot_general(self, x):
        if not x.shape:
            return None
        rank = len(x.shape)
        order = self.draw(st.permutations(range(rank)))
        n_contract = self.draw(st.integers(1, rank))
        n_batch = self.draw(st.integers(0, rank - n_contract))
        contract_l = sorted(order[:n_contract])
        batch_l = sorted(order[n_contract:n_contract + n_batch])
        free_l = [d for d in range(rank) if d not in contract_l and d not in batch_l]
        n_free_r = self.draw(st.integers(0, max(0, MAX_RANK - n_batch - max(len(free_l), n_contract))))
        free_r_sizes = [self.draw(st.integers(1, MAX_DIM)) for _ in range(n_free_r)]
        # rhs dims: batch, contracting and free in a random order
        roles = [("b", i) for i in range(n_batch)] + [("c", i) for i in range(n_contract)] + [("f", i) for i in range(n_free_r)]
        roles = self.draw(st.permutations(roles))
        rshape, batch_r, contract_r = [0] * len(roles), [0] * n_batch, [0] * n_contract
        for pos, (role, i) in enumerate(roles):
            if role == "b":
                rshape[pos], batch_r[i] = x.shape[batch_l[i]], pos
            elif role == "c":
                rshape[pos], contract_r[i] = x.shape[contract_l[i]], pos
            else:
                rshape[pos] = free_r_sizes[i]
        y = self.arg(rshape, x.dtype)
        self.use(x, y)
        # the result: batch dims, lhs free dims, rhs free dims (each in operand order)
        free_r = [rshape[pos] for pos, (role, _) in enumerate(roles) if role == "f"]
        shape = [x.shape[d] for d in batch_l] + [x.shape[d] for d in free_l] + free_r
        out = self.fresh()
        r = Value(out, tuple(shape), self._dot_result_dtype(x.dtype))
        batching = f"batching_dims = {_ilist(batch_l)} x {_ilist(batch_r)}, " if n_batch else ""
        self.emit(
            f"{out} = stablehlo.dot_general {x.name}, {y.name}, {batching}"
            f"contracting_dims = {_ilist(contract_l)} x {_ilist(contract_r)} : ({x.type}, {y.type}) -> {r.type}"
        )
        return r

    def _dot_result_dtype(self, dtype: str) -> str:
        """The operands' type, or now and then a wider accumulator (mixed precision:
        bf16 x bf16 -> f32 as JAX's preferred_element_type, i8 x i8 -> i32)."""
        wider = {"bf16": "f32", "f16": "f32", "i8": "i32"}.get(dtype)
        return wider if wider and self.draw(st.booleans()) else dtype

    def op_dot(self, x):
        """The legacy `stablehlo.dot`: vector or matrix times vector or matrix."""
        if len(x.shape) not in (1, 2):
            return None
        k = x.shape[-1]
        rshape = (k,) if self.draw(st.booleans()) else (k, self.draw(st.integers(1, MAX_DIM)))
        y = self.arg(rshape, x.dtype)
        self.use(x, y)
        out = self.fresh()
        r = Value(out, x.shape[:-1] + rshape[1:], self._dot_result_dtype(x.dtype))
        self.emit(f"{out} = stablehlo.dot {x.name}, {y.name} : ({x.type}, {y.type}) -> {r.type}")
        return r

    def op_convolution(self, x):
        """1-3 spatial dimensions, channels last (NHWC/HWIO) or first (NCHW/OIHW), kernel
        1-3, strides, padding, input (lhs) and kernel (rhs) dilation, feature groups, now
        and then batch groups (the filter gradient's form)."""
        nsp = self.draw(st.integers(1, 3))
        if len(x.shape) != nsp + 2 or is_int(x.dtype):
            x = self.arg(self.shape(nsp + 2, nsp + 2), self.draw(st.sampled_from(FLOAT_DTYPES)))
        last = self.draw(st.booleans())
        if last:
            n, spatial_in, c = x.shape[0], x.shape[1:-1], x.shape[-1]
        else:
            n, c, spatial_in = x.shape[0], x.shape[1], x.shape[2:]
        bgroups = 1
        if self.draw(st.integers(0, 4)) == 0:  # batch groups: feature groups are then 1
            bgroups = self.draw(st.sampled_from([g for g in range(1, n + 1) if n % g == 0]))
        groups = 1 if bgroups > 1 else self.draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
        out_f = groups * bgroups * self.draw(st.integers(1, 3))
        kern, out_sp, strides, pads, ldil, rdil = [], [], [], [], [], []
        for size in spatial_in:
            k = self.draw(st.integers(1, 3))
            d = self.draw(st.integers(1, 2))
            ld = self.draw(st.integers(1, 2))
            s = self.draw(st.integers(1, 2))
            lo, hi = self.draw(st.integers(0, 2)), self.draw(st.integers(0, 2))
            eff_k = (k - 1) * d + 1
            eff_in = (size - 1) * ld + 1 + lo + hi
            if eff_in < eff_k:
                hi += eff_k - eff_in
                eff_in = eff_k
            kern.append(k)
            out_sp.append((eff_in - eff_k) // s + 1)
            strides.append(s)
            pads.append((lo, hi))
            ldil.append(ld)
            rdil.append(d)
        sp = ", ".join(str(i) for i in range(nsp))
        if last:
            wv = self.arg((*kern, c // groups, out_f), x.dtype)
            r_shape = (n // bgroups, *out_sp, out_f)
            dims = f"[b, {sp}, f]x[{sp}, i, o]->[b, {sp}, f]"
        else:
            wv = self.arg((out_f, c // groups, *kern), x.dtype)
            r_shape = (n // bgroups, out_f, *out_sp)
            dims = f"[b, f, {sp}]x[o, i, {sp}]->[b, f, {sp}]"
        self.use(x, wv)
        out = self.fresh()
        r = Value(out, r_shape, x.dtype)
        pad_txt = "[" + ", ".join(f"[{a}, {b}]" for a, b in pads) + "]"
        self.emit(
            f"{out} = stablehlo.convolution({x.name}, {wv.name}) dim_numbers = {dims}, "
            f"window = {{stride = {_ilist(strides)}, pad = {pad_txt}, lhs_dilate = {_ilist(ldil)}, rhs_dilate = {_ilist(rdil)}}} "
            f"{{batch_group_count = {bgroups} : i64, feature_group_count = {groups} : i64}} : ({x.type}, {wv.type}) -> {r.type}"
        )
        return r

    def op_reduce(self, x):
        if not x.shape:
            return None
        rank = len(x.shape)
        k = self.draw(st.integers(1, rank))
        dims = sorted(self.draw(st.permutations(range(rank)))[:k])
        op = self.draw(st.sampled_from(["add", "maximum"]))
        init = self.fresh("c")
        self.emit(f"{init} = stablehlo.constant dense<{_zero(x.dtype)}> : {ttype((), x.dtype)}")
        self.use(x)
        out = self.fresh()
        r = Value(out, tuple(s for i, s in enumerate(x.shape) if i not in dims), x.dtype)
        self.emit(
            f"{out} = stablehlo.reduce({x.name} init: {init}) applies stablehlo.{op} across dimensions = {_ilist(dims)} "
            f": ({x.type}, {ttype((), x.dtype)}) -> {r.type}"
        )
        return r

    def op_reduce_window(self, x):
        """Pooling: a window of 1-3 per dimension (not all 1: an identity), strides 1-2,
        padding 0-1 on each side, add or max over it."""
        if not x.shape:
            return None
        win, strides, pads, shape = self._window(x)
        if all(w == 1 for w in win):
            return None  # an identity (see _IDENTITY_NOTE)
        op = self.draw(st.sampled_from(["add", "maximum"]))
        init, a, b, t = self.fresh("c"), self.fresh("a"), self.fresh("b"), self.fresh("t")
        scalar = ttype((), x.dtype)
        self.emit(f"{init} = stablehlo.constant dense<{_zero(x.dtype)}> : {scalar}")
        self.use(x)
        out = self.fresh()
        r = Value(out, shape, x.dtype)
        self.emit(f'{out} = "stablehlo.reduce_window"({x.name}, {init}) <{{{self._window_attrs(win, strides, pads)}}}> ({{')
        self.emit(f"^bb0({a}: {scalar}, {b}: {scalar}):", 2)
        self.emit(f"{t} = stablehlo.{op} {a}, {b} : {scalar}", 4)
        self.emit(f"stablehlo.return {t} : {scalar}", 4)
        self.emit(f"}}) : ({x.type}, {scalar}) -> {r.type}")
        return r

    def op_argmax(self, x):
        """A variadic reduce: the maximum and its index along some dimensions (jnp.argmax's
        form: values and an i32 index operand reduced together by a compare + 2 selects)."""
        if not x.shape or is_int(x.dtype):
            return None
        rank = len(x.shape)
        k = self.draw(st.integers(1, rank))
        dims = sorted(self.draw(st.permutations(range(rank)))[:k])
        shape = tuple(n for j, n in enumerate(x.shape) if j not in dims)
        return self._argmax(x, shape, '"stablehlo.reduce"', "", f" {{dimensions = array<i64: {', '.join(map(str, dims))}>}}")

    def _argmax(self, x, shape, op: str, props: str, attrs: str) -> Value:
        """A variadic `op` (reduce or reduce_window) of x and an i32 index operand whose
        body keeps the larger value and its index (compare + 2 selects); `props`: its
        properties (`<{...}>`), `attrs`: its attribute dictionary."""
        idx = self.arg(x.shape, "i32")
        self.use(x, idx)
        s, si = ttype((), x.dtype), "tensor<i32>"
        c0, c1 = self.fresh("c"), self.fresh("c")
        self.emit(f"{c0} = stablehlo.constant dense<{_zero(x.dtype)}> : {s}")
        self.emit(f"{c1} = stablehlo.constant dense<0> : {si}")
        a, b, c, d, p, v, i = (self.fresh(t) for t in "abcdpvi")
        out = self.fresh("r")
        rv, ri = Value(out + "#0", shape, x.dtype), Value(out + "#1", shape, "i32")
        self.emit(f"{out}:2 = {op}({x.name}, {idx.name}, {c0}, {c1}){props} ({{")
        self.emit(f"^bb0({a}: {s}, {b}: {si}, {c}: {s}, {d}: {si}):", 2)
        self.emit(f"{p} = stablehlo.compare GE, {a}, {c} : ({s}, {s}) -> tensor<i1>", 4)
        self.emit(f"{v} = stablehlo.select {p}, {a}, {c} : tensor<i1>, {s}", 4)
        self.emit(f"{i} = stablehlo.select {p}, {b}, {d} : tensor<i1>, {si}", 4)
        self.emit(f"stablehlo.return {v}, {i} : {s}, {si}", 4)
        self.emit(f"}}){attrs} : ({x.type}, {idx.type}, {s}, {si}) -> ({rv.type}, {ri.type})")
        self.add(ri)
        return rv

    def _window(self, x):
        win = [self.draw(st.integers(1, min(3, d))) for d in x.shape]
        strides = [self.draw(st.integers(1, 2)) for _ in x.shape]
        pads = [(self.draw(st.integers(0, 1)), self.draw(st.integers(0, 1))) for _ in x.shape]
        shape = tuple((d + lo + hi - w) // s + 1 for d, w, s, (lo, hi) in zip(x.shape, win, strides, pads))
        return win, strides, pads, shape

    def _window_attrs(self, win, strides, pads) -> str:
        pad_text = ", ".join(f"[{lo}, {hi}]" for lo, hi in pads)
        return (f'window_dimensions = array<i64: {", ".join(map(str, win))}>, '
                f'window_strides = array<i64: {", ".join(map(str, strides))}>, '
                f"padding = dense<[{pad_text}]> : tensor<{len(win)}x2xi64>")

    def op_select_and_scatter(self, x):
        """Max-pool's gradient: select the maximum of each window (GE), scatter-add the
        source's element there."""
        if not x.shape or is_int(x.dtype):
            return None
        win, strides, pads, shape = self._window(x)
        if all(w == 1 for w in win):
            return None
        src = self.arg(shape, x.dtype)
        self.use(x, src)
        s = ttype((), x.dtype)
        init = self.fresh("c")
        self.emit(f"{init} = stablehlo.constant dense<{_zero(x.dtype)}> : {s}")
        a, b, p, c, d, t = (self.fresh(n) for n in "abpcdt")
        out = self.fresh()
        self.emit(f'{out} = "stablehlo.select_and_scatter"({x.name}, {src.name}, {init}) ({{')
        self.emit(f"^bb0({a}: {s}, {b}: {s}):", 2)
        self.emit(f"{p} = stablehlo.compare GE, {a}, {b} : ({s}, {s}) -> tensor<i1>", 4)
        self.emit(f"stablehlo.return {p} : tensor<i1>", 4)
        self.emit("}, {")
        self.emit(f"^bb0({c}: {s}, {d}: {s}):", 2)
        self.emit(f"{t} = stablehlo.add {c}, {d} : {s}", 4)
        self.emit(f"stablehlo.return {t} : {s}", 4)
        self.emit(f"}}) {{{self._window_attrs(win, strides, pads)}}} : ({x.type}, {src.type}, {s}) -> {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_sort(self, x):
        """jnp.sort / argsort: one operand, or the values and an index operand sorted
        together by the first one's order."""
        if not x.shape:
            return None
        dim = self.draw(st.integers(0, len(x.shape) - 1))
        operands = [x] + ([self.arg(x.shape, "i32")] if self.draw(st.booleans()) else [])
        self.use(*operands)
        scalars = [ttype((), v.dtype) for v in operands]
        args = [(self.fresh("a"), self.fresh("b")) for _ in operands]
        p = self.fresh("p")
        out = self.fresh("r")
        many = len(operands) > 1
        stable = "true" if self.draw(st.booleans()) else "false"
        self.emit(f'{out}{":2" if many else ""} = "stablehlo.sort"({", ".join(v.name for v in operands)}) ({{')
        params = ", ".join(f"{n}: {t}" for (a, b), t in zip(args, scalars) for n in (a, b))
        self.emit(f"^bb0({params}):", 2)
        direction = self.draw(st.sampled_from(["LT", "GT"]))
        self.emit(f"{p} = stablehlo.compare {direction}, {args[0][0]}, {args[0][1]} : ({scalars[0]}, {scalars[0]}) -> tensor<i1>", 4)
        self.emit(f"stablehlo.return {p} : tensor<i1>", 4)
        types = ", ".join(v.type for v in operands)
        self.emit(f"}}) {{dimension = {dim} : i64, is_stable = {stable}}} : ({types}) -> ({types})")
        if many:
            self.add(Value(out + "#1", x.shape, "i32"))
            return Value(out + "#0", x.shape, x.dtype)
        return Value(out, x.shape, x.dtype)

    def op_dynamic_slice(self, x):
        if not x.shape:
            return None
        sizes = [self.draw(st.integers(1, d)) for d in x.shape]
        if sizes == list(x.shape):
            return None  # an identity (see _IDENTITY_NOTE)
        idx = [self.arg((), "i32") for _ in x.shape]
        self.use(x, *idx)
        out = self.fresh()
        r = Value(out, tuple(sizes), x.dtype)
        self.emit(
            f"{out} = stablehlo.dynamic_slice {x.name}, {', '.join(i.name for i in idx)}, sizes = {_ilist(sizes)} "
            f": ({x.type}, {', '.join(i.type for i in idx)}) -> {r.type}"
        )
        return r

    def op_dynamic_update_slice(self, x):
        if not x.shape:
            return None
        upd = self.arg(tuple(self.draw(st.integers(1, d)) for d in x.shape), x.dtype)
        idx = [self.arg((), "i32") for _ in x.shape]
        self.use(x, upd, *idx)
        out = self.fresh()
        self.emit(
            f"{out} = stablehlo.dynamic_update_slice {x.name}, {upd.name}, {', '.join(i.name for i in idx)} "
            f": ({x.type}, {upd.type}, {', '.join(i.type for i in idx)}) -> {x.type}"
        )
        return Value(out, x.shape, x.dtype)

    def op_call(self, x):
        """A private function of 1-3 unary ops on x's type, called once or twice in a row
        (JAX's outlined helpers: each call runs its body)."""

        def body(v):
            for _ in range(self.draw(st.integers(1, 3))):
                v = self.unary_line(v, self.fresh(), 4)
            return v

        return self._call_private(x, body)

    def _call_private(self, x, body) -> Value:
        """Define a private function of x's type whose body `body(parameter)` emits
        (returning the result), and call it once or twice in a row on x."""
        p = self.fresh("p")
        outer, self.lines = self.lines, []
        v = body(Value(p, x.shape, x.dtype))
        lines, self.lines = self.lines, outer
        name = f"@f{self.counter}"
        self.funcs.append(f"func.func private {name}({p}: {x.type}) -> {x.type} {{\n" + "\n".join(lines)
                          + f"\n    return {v.name} : {x.type}\n}}")
        self.use(x)
        r = x
        for _ in range(self.draw(st.integers(1, 2))):
            out = self.fresh()
            self.emit(f"{out} = func.call {name}({r.name}) : ({x.type}) -> {x.type}")
            r = Value(out, x.shape, x.dtype)
        return r

    def _reducer(self, dtype: str, indent: int = 2) -> None:
        """The region of a sum (scatter, all_reduce, reduce_scatter): one add."""
        s = ttype((), dtype)
        a, b, c = self.fresh("s"), self.fresh("s"), self.fresh("s")
        self.emit(f"^bb0({a}: {s}, {b}: {s}):", indent)
        self.emit(f"{c} = stablehlo.add {a}, {b} : {s}", indent + 2)
        self.emit(f"stablehlo.return {c} : {s}", indent + 2)

    def _indexed_dims(self, x) -> int:
        """How many leading dimensions a gather/scatter indexes: 1 (`x[i]`) or 2 (`x[i, j]`)."""
        return self.draw(st.integers(1, min(2, len(x.shape))))

    def op_gather(self, x):
        """`x[i]` or `x[i, j]` for a vector of indices (rows x k indices)."""
        if not x.shape:
            return None
        k = self._indexed_dims(x)
        rows = self.draw(st.integers(1, MAX_DIM))
        idx = self.arg((rows, k), "i32")
        self.use(x, idx)
        rank = len(x.shape)
        out = self.fresh()
        r = Value(out, (rows,) + x.shape[k:], x.dtype)
        self.emit(
            f'{out} = "stablehlo.gather"({x.name}, {idx.name}) {{dimension_numbers = #stablehlo.gather<'
            f"offset_dims = {_ilist(range(1, 1 + rank - k))}, collapsed_slice_dims = {_ilist(range(k))}, "
            f"start_index_map = {_ilist(range(k))}, index_vector_dim = 1>, indices_are_sorted = false, "
            f"slice_sizes = array<i64: {', '.join(['1'] * k + [str(d) for d in x.shape[k:]])}>}} "
            f": ({x.type}, {idx.type}) -> {r.type}"
        )
        return r

    def op_scatter(self, x):
        """`x.at[i].add(u)` or `x.at[i, j].add(u)`."""
        if not x.shape:
            return None
        k = self._indexed_dims(x)
        rows = self.draw(st.integers(1, MAX_DIM))
        idx = self.arg((rows, k), "i32")
        upd = self.arg((rows,) + x.shape[k:], x.dtype)
        self.use(x, idx, upd)
        rank = len(x.shape)
        out = self.fresh()
        self.emit(f'{out} = "stablehlo.scatter"({x.name}, {idx.name}, {upd.name}) ({{')
        self._reducer(x.dtype)
        self.emit(
            f"}}) {{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<"
            f"update_window_dims = {_ilist(range(1, 1 + rank - k))}, inserted_window_dims = {_ilist(range(k))}, "
            f"scatter_dims_to_operand_dims = {_ilist(range(k))}, index_vector_dim = 1>, unique_indices = false}} "
            f": ({x.type}, {idx.type}, {upd.type}) -> {x.type}"
        )
        return Value(out, x.shape, x.dtype)

    def op_select(self, x):
        y = self.same_type(x)
        a = self.same_type(x, y)
        b = self.same_type(x, y, a)
        self.use(x, y, a, b)
        pred_t = ttype(x.shape, "i1")
        p = self.fresh()
        self.emit(f"{p} = stablehlo.compare {self.draw(st.sampled_from(COMPARE_DIRECTIONS))}, {x.name}, {y.name} : ({x.type}, {x.type}) -> {pred_t}")
        out = self.fresh()
        self.emit(f"{out} = stablehlo.select {p}, {a.name}, {b.name} : ({pred_t}, {x.type}, {x.type}) -> {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_while(self, x):
        """A fori-style loop carrying x and 0-2 further values of its type: 1-6 trips,
        or a bound the function receives (a trip count nobody can infer, counted once as
        XLA does); the body chains unary ops, may combine the carries, and may hold a
        loop of its own."""
        self.use(x)
        carries = [x] + [self.same_type(x, x) for _ in range(self.draw(st.integers(0, 2)))]
        self.use(*carries)
        bound = None if self.draw(st.integers(0, 3)) else self.arg((), "i32")
        if bound is not None:
            self.use(bound)
        results = self._emit_while(carries, bound, indent=2, depth=0)
        for extra in results[1:]:
            self.add(extra)
        return results[0]

    def _emit_while(self, carries: list, bound, indent: int, depth: int, last=None) -> list:
        """A counted loop over `carries` (see op_while); `last(value, indent)`, when given,
        makes the first carry's final value in the body (an all-reduce of it)."""
        i32 = "tensor<i32>"
        pad = indent + 2
        c0, w = self.fresh("c"), self.fresh("w")
        it = self.fresh("it")
        names = [self.fresh("carry") for _ in carries]
        inits = [(it, c0)] + list(zip(names, (v.name for v in carries)))
        types = [i32] + [v.type for v in carries]
        nb = None
        if bound is not None:
            nb = self.fresh("n")
            inits.append((nb, bound.name))
            types.append(i32)
        self.emit(f"{c0} = stablehlo.constant dense<0> : {i32}", indent)
        self.emit(f"{w}:{len(inits)} = stablehlo.while({', '.join(f'{a} = {b}' for a, b in inits)}) : {', '.join(types)}", indent)
        p = self.fresh()
        self.emit("cond {", indent)
        if nb is None:
            n = self.fresh("c")
            self.emit(f"{n} = stablehlo.constant dense<{self.draw(st.integers(1, 6))}> : {i32}", pad)
        else:
            n = nb
        self.emit(f"{p} = stablehlo.compare LT, {it}, {n} : ({i32}, {i32}) -> tensor<i1>", pad)
        self.emit(f"stablehlo.return {p} : tensor<i1>", pad)
        self.emit("} do {", indent)
        one, nxt = self.fresh("c"), self.fresh()
        self.emit(f"{one} = stablehlo.constant dense<1> : {i32}", pad)
        self.emit(f"{nxt} = stablehlo.add {it}, {one} : {i32}", pad)
        cur = [Value(nm, v.shape, v.dtype) for nm, v in zip(names, carries)]
        for _ in range(self.draw(st.integers(1, 3))):
            j = self.draw(st.integers(0, len(cur) - 1))
            cur[j] = self.unary_line(cur[j], self.fresh(), indent=pad)
        if len(cur) > 1 and self.draw(st.booleans()):  # one carry updated from another
            j = self.draw(st.integers(1, len(cur) - 1))
            if cur[0].name != cur[j].name:
                out = self.fresh()
                op = "add" if not is_int(cur[0].dtype) else "xor"
                self.emit(f"{out} = stablehlo.{op} {cur[0].name}, {cur[j].name} : {cur[0].type}", pad)
                cur[0] = Value(out, cur[0].shape, cur[0].dtype)
        if depth == 0 and self.draw(st.integers(0, 3)) == 0:  # a loop nested in the body
            cur[0] = self._emit_while([cur[0]], None, indent=pad, depth=depth + 1)[0]
        if last is not None:
            cur[0] = last(cur[0], pad)
        rets = [nxt] + [v.name for v in cur] + ([nb] if nb else [])
        self.emit(f"stablehlo.return {', '.join(rets)} : {', '.join(types)}", pad)
        self.emit("}", indent)
        return [Value(f"{w}#{1 + i}", v.shape, v.dtype) for i, v in enumerate(carries)]

    def op_case(self, x):
        idx = self.arg((), "i32")
        self.use(x, idx)
        out = self.fresh()
        branches = []
        for _ in range(self.draw(st.integers(1, 3))):
            body = []
            saved, self.lines = self.lines, body
            cur = x
            for _ in range(self.draw(st.integers(0, 2))):
                cur = self.unary_line(cur, self.fresh(), indent=4)
            self.emit(f"stablehlo.return {cur.name} : {x.type}", 4)
            self.lines = saved
            branches.append("\n".join(body))
        self.emit(f'{out} = "stablehlo.case"({idx.name}) ({{')
        self.lines.append("\n  }, {\n".join(branches))
        self.emit(f"}}) : ({idx.type}) -> {x.type}")
        return Value(out, x.shape, x.dtype)

    # -- further kinds: clamp, iota, map, reverse, bit casts, precision, fp8, integer
    # -- convolutions, a windowed argmax (variadic reduce_window), is_finite -----------
    def op_clamp(self, x):
        """clamp(lo, x, hi), the bounds x's type or scalars (jnp.clip)."""
        scalar = self.draw(st.booleans())
        lo = self.arg((), x.dtype) if scalar else self.same_type(x)
        hi = self.arg((), x.dtype) if scalar else self.same_type(x, lo)
        self.use(x, lo, hi)
        out = self.fresh()
        self.emit(f"{out} = stablehlo.clamp {lo.name}, {x.name}, {hi.name} : ({lo.type}, {x.type}, {hi.type}) -> {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_iota(self, x):
        """x + iota along one dimension (jnp.arange added to a value: the iota alone reads
        nothing, see the module docstring)."""
        dims = [d for d in range(len(x.shape)) if x.shape[d] > 1]
        if not dims:
            return None  # an iota along a size-1 dimension is the constant 0: XLA's conversion folds x + 0
        dim = self.draw(st.sampled_from(dims))
        io = self.fresh("io")
        self.emit(f"{io} = stablehlo.iota dim = {dim} : {x.type}")
        self.use(x)
        out = self.fresh()
        self.emit(f"{out} = stablehlo.add {x.name}, {io} : {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_map(self, x):
        """stablehlo.map of a binary scalar computation over x and another value."""
        if not x.shape:
            return None
        y = self.same_type(x)
        self.use(x, y)
        s = ttype((), x.dtype)
        a, b, c = self.fresh("s"), self.fresh("s"), self.fresh("s")
        op = self.draw(st.sampled_from(BINARY_INT if is_int(x.dtype) else BINARY_FLOAT))
        out = self.fresh()
        self.emit(f'{out} = "stablehlo.map"({x.name}, {y.name}) ({{')
        self.emit(f"^bb0({a}: {s}, {b}: {s}):", 2)
        self.emit(f"{c} = stablehlo.{op} {a}, {b} : {s}", 4)
        self.emit(f"stablehlo.return {c} : {s}", 4)
        self.emit(f"}}) {{dimensions = array<i64: {', '.join(map(str, range(len(x.shape))))}>}} : ({x.type}, {x.type}) -> {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_reverse(self, x):
        dims = [d for d in range(len(x.shape)) if x.shape[d] > 1]
        if not dims:
            return None  # reversing size-1 dimensions is an identity (see _IDENTITY_NOTE)
        k = self.draw(st.integers(1, len(dims)))
        dims = sorted(self.draw(st.permutations(dims))[:k])
        self.use(x)
        out = self.fresh()
        self.emit(f"{out} = stablehlo.reverse {x.name}, dims = {_ilist(dims)} : {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_bitcast_convert(self, x):
        """A bit cast to another element type of the same width (jax.lax.bitcast_convert_type)."""
        others = [d for d in SAME_WIDTH[BITS[x.dtype]] if d != x.dtype]
        if not others:
            return None
        dtype = self.draw(st.sampled_from(others))
        self.use(x)
        out = self.fresh()
        r = Value(out, x.shape, dtype)
        self.emit(f"{out} = stablehlo.bitcast_convert {x.name} : ({x.type}) -> {r.type}")
        return r

    def op_reduce_precision(self, x):
        if is_int(x.dtype):
            return None
        e, m = self.draw(st.sampled_from([(5, 10), (8, 7), (4, 3), (5, 2)]))
        self.use(x)
        out = self.fresh()
        self.emit(f"{out} = stablehlo.reduce_precision {x.name}, format = e{e}m{m} : {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_fp8_convert(self, x):
        """A quantize-dequantize round trip through an 8-bit float (x -> f8 -> x's type)."""
        if is_int(x.dtype):
            return None
        f8 = self.draw(st.sampled_from(FP8_DTYPES))
        self.use(x)
        q, out = self.fresh("q"), self.fresh()
        qt = ttype(x.shape, f8)
        self.emit(f"{q} = stablehlo.convert {x.name} : ({x.type}) -> {qt}")
        self.emit(f"{out} = stablehlo.convert {q} : ({qt}) -> {x.type}")
        return Value(out, x.shape, x.dtype)

    def op_int_convolution(self, x):
        """An integer convolution (i8 or i32 operands; i8 now and then into i32: a
        quantized convolution), 2 spatial dimensions, channels last."""
        dtype = self.draw(st.sampled_from(["i8", "i32"]))
        n, h, w, c = (self.draw(st.integers(1, MAX_DIM)) for _ in range(4))
        if len(x.shape) == 4 and x.dtype == dtype:
            n, h, w, c = x.shape
        else:
            x = self.arg((n, h, w, c), dtype)
        kh, kw = self.draw(st.integers(1, min(3, h))), self.draw(st.integers(1, min(3, w)))
        o = self.draw(st.integers(1, 3))
        wv = self.arg((kh, kw, c, o), dtype)
        self.use(x, wv)
        rdtype = "i32" if dtype == "i8" and self.draw(st.booleans()) else dtype
        out = self.fresh()
        r = Value(out, (n, h - kh + 1, w - kw + 1, o), rdtype)
        self.emit(
            f"{out} = stablehlo.convolution({x.name}, {wv.name}) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], "
            f"window = {{stride = [1, 1], pad = [[0, 0], [0, 0]], lhs_dilate = [1, 1], rhs_dilate = [1, 1]}} "
            f"{{batch_group_count = 1 : i64, feature_group_count = 1 : i64}} : ({x.type}, {wv.type}) -> {r.type}"
        )
        return r

    def op_argmax_window(self, x):
        """A variadic reduce_window: the maximum over each window and its index (values
        and an i32 index operand reduced together, as argmax pooling)."""
        if not x.shape or is_int(x.dtype):
            return None
        win, strides, pads, shape = self._window(x)
        if all(w == 1 for w in win):
            return None  # an identity (see _IDENTITY_NOTE)
        return self._argmax(x, shape, '"stablehlo.reduce_window"', f" <{{{self._window_attrs(win, strides, pads)}}}>", "")

    def op_is_finite(self, x):
        """select(is_finite(x), x, y): jnp.nan_to_num's form."""
        if is_int(x.dtype):
            return None
        y = self.same_type(x)
        self.use(x, y)
        p, out = self.fresh(), self.fresh()
        pt = ttype(x.shape, "i1")
        self.emit(f"{p} = stablehlo.is_finite {x.name} : ({x.type}) -> {pt}")
        self.emit(f"{out} = stablehlo.select {p}, {x.name}, {y.name} : {pt}, {x.type}")
        return Value(out, x.shape, x.dtype)

    # -- the program -----------------------------------------------------------------
    def build(self, n_ops: int, kinds) -> Program:
        first = self.arg(self.shape(), self.draw(st.sampled_from(DTYPES)))
        self.add(first)
        for _ in range(n_ops):
            kind = self.draw(st.sampled_from(kinds))
            x = self.pick()
            r = getattr(self, "op_" + kind)(x)
            if r is None:  # x does not suit this kind (rank 0): an elementwise op instead
                kind = "unary"
                r = self.op_unary(x)
            self.kinds.add(kind)
            self.add(r)
        results = [v for v in self.values if v.name not in self.used]
        args = ", ".join(f"{a.name}: {a.type}" for a in self.args)
        res_types = ", ".join(v.type for v in results)
        lines = [f"func.func public @main({args}) -> ({res_types}) {{", *self.lines,
                 f"  return {', '.join(v.name for v in results)} : {res_types}", "}"]
        return Program("\n".join(self.funcs + lines) + "\n", frozenset(self.kinds))


@st.composite
def programs(draw, kinds=OP_KINDS, max_ops: int = 6) -> Program:
    """A random valid StableHLO module of 1..max_ops ops drawn from `kinds`, for one of
    the shipped hardware presets (GPUs, TPUs, the CPU)."""
    from costmodel.hardware import list_hardware

    n_ops = draw(st.integers(1, max_ops))
    program = _Builder(draw).build(n_ops, tuple(kinds))
    return dataclasses.replace(program, hardware=draw(st.sampled_from(sorted(list_hardware()))))


# ---------------------------------------------------------------------------------------
# per-device programs with collectives (tests/test_fuzz_collectives.py)
# ---------------------------------------------------------------------------------------
COLLECTIVE_KINDS = ("all_reduce", "all_reduce_pair", "all_gather", "reduce_scatter", "all_to_all", "collective_permute",
                    "loop_all_reduce", "call_all_reduce")


class _CollectiveBuilder(_Builder):
    """A per-device (SPMD-partitioned) program of N partitions: elementwise ops and
    collectives over random groups of the N devices (flattened ids: a channel handle and
    use_global_device_ids), each group of one size per op, as XLA's partitioner emits
    them; and a counted loop that all-reduces its carry every iteration."""

    def __init__(self, draw, n_devices: int):
        super().__init__(draw)
        self.n = n_devices
        self.channel = 0
        # flattened ids over N partitions (SPMD, what jit exports), or N replicas
        # cross-replica (pmap: no channel handles)
        self.replicas = draw(st.integers(0, 3)) == 0

    def groups(self) -> list[list[int]]:
        size = self.draw(st.sampled_from([g for g in range(1, self.n + 1) if self.n % g == 0 and g > 1]))
        order = self.draw(st.permutations(range(self.n)))
        return [sorted(order[i:i + size]) for i in range(0, self.n, size)]

    def _channel(self) -> str:
        if self.replicas:
            return ""
        self.channel += 1
        return f"channel_handle = #stablehlo.channel_handle<handle = {self.channel}, type = 1>, "

    def _attrs(self, groups) -> str:
        rows = ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups)
        return (f"{self._channel()}replica_groups = dense<[{rows}]> : tensor<{len(groups)}x{len(groups[0])}xi64>"
                + ("" if self.replicas else ", use_global_device_ids"))

    def _float(self, x: Value) -> Value:
        return x if not is_int(x.dtype) and x.shape else self.arg(self.shape(1, 3), self.draw(st.sampled_from(FLOAT_DTYPES)))

    def op_all_reduce(self, x):
        x = self._float(x)
        self.use(x)
        return self._all_reduce_line(x)

    def op_all_gather(self, x):
        x = self._float(x)
        groups = self.groups()
        dim = self.draw(st.integers(0, len(x.shape) - 1))
        self.use(x)
        shape = list(x.shape)
        shape[dim] *= len(groups[0])
        out = self.fresh()
        r = Value(out, tuple(shape), x.dtype)
        self.emit(f'{out} = "stablehlo.all_gather"({x.name}) <{{all_gather_dim = {dim} : i64, {self._attrs(groups)}}}> : ({x.type}) -> {r.type}')
        return r

    def _divisible(self, x: Value, g: int) -> tuple[Value, int]:
        """x, or a new argument of its type, with a dimension divisible by g; and that dimension."""
        x = self._float(x)
        dims = [d for d, n in enumerate(x.shape) if n % g == 0]
        if dims:
            return x, self.draw(st.sampled_from(dims))
        shape = list(x.shape)
        dim = self.draw(st.integers(0, len(shape) - 1))
        shape[dim] = g * self.draw(st.integers(1, 3))
        return self.arg(tuple(shape), x.dtype), dim

    def op_reduce_scatter(self, x):
        groups = self.groups()
        g = len(groups[0])
        x, dim = self._divisible(x, g)
        self.use(x)
        shape = list(x.shape)
        shape[dim] //= g
        out = self.fresh()
        r = Value(out, tuple(shape), x.dtype)
        self.emit(f'{out} = "stablehlo.reduce_scatter"({x.name}) <{{scatter_dimension = {dim} : i64, {self._attrs(groups)}}}> ({{')
        self._reducer(x.dtype)
        self.emit(f"}}) : ({x.type}) -> {r.type}")
        return r

    def op_all_to_all(self, x):
        groups = self.groups()
        g = len(groups[0])
        x, split = self._divisible(x, g)
        concat = self.draw(st.integers(0, len(x.shape) - 1))
        self.use(x)
        shape = list(x.shape)
        shape[split] //= g
        shape[concat] *= g
        out = self.fresh()
        r = Value(out, tuple(shape), x.dtype)
        self.emit(
            f'{out} = "stablehlo.all_to_all"({x.name}) <{{split_dimension = {split} : i64, concat_dimension = {concat} : i64, '
            f"split_count = {g} : i64, {self._attrs(groups)}}}> : ({x.type}) -> {r.type}"
        )
        return r

    def op_collective_permute(self, x):
        """A shift of some ranks to others (distinct sources, distinct targets): a ring
        step, a swap, or a partial permutation; ranks no pair names receive zeros."""
        x = self._float(x)
        targets = self.draw(st.permutations(range(self.n)))
        k = self.draw(st.integers(1, self.n))
        sources = self.draw(st.permutations(range(self.n)))[:k]
        pairs = [(s, targets[i]) for i, s in enumerate(sources) if s != targets[i]] or [(0, 1)]
        self.use(x)
        out = self.fresh()
        rows = ", ".join(f"[{a}, {b}]" for a, b in pairs)
        self.emit(
            f'{out} = "stablehlo.collective_permute"({x.name}) <{{{self._channel()}'
            f"source_target_pairs = dense<[{rows}]> : tensor<{len(pairs)}x2xi64>}}> : ({x.type}) -> {x.type}"
        )
        return Value(out, x.shape, x.dtype)

    def op_all_reduce_pair(self, x):
        """A variadic all-reduce of two values of one element type (what XLA's combiner
        makes of two; one reducer serves both)."""
        x = self._float(x)
        y = self.arg(self.shape(1, 3), x.dtype)
        self.use(x, y)
        out = self.fresh("ar")
        self.emit(f'{out}:2 = "stablehlo.all_reduce"({x.name}, {y.name}) <{{{self._attrs(self.groups())}}}> ({{')
        self._reducer(x.dtype)
        self.emit(f"}}) : ({x.type}, {y.type}) -> ({x.type}, {y.type})")
        self.add(Value(out + "#1", y.shape, y.dtype))
        return Value(out + "#0", x.shape, x.dtype)

    def op_call_all_reduce(self, x):
        """A private function that all-reduces its argument (JAX's outlined helpers, a
        shard_map body), called once or twice."""
        x = self._float(x)

        def body(v):
            cur = self.unary_line(v, self.fresh(), 4)
            return self._all_reduce_line(cur, indent=4)

        return self._call_private(x, body)

    def _all_reduce_line(self, x: Value, indent: int = 2) -> Value:
        out = self.fresh()
        self.emit(f'{out} = "stablehlo.all_reduce"({x.name}) <{{{self._attrs(self.groups())}}}> ({{', indent)
        self._reducer(x.dtype, indent=indent)
        self.emit(f"}}) : ({x.type}) -> {x.type}", indent)
        return Value(out, x.shape, x.dtype)

    def op_loop_all_reduce(self, x):
        """A counted loop that all-reduces its carry each iteration (gradient accumulation
        over microbatches, a scan over layers)."""
        x = self._float(x)
        self.use(x)
        return self._emit_while([x], None, indent=2, depth=1, last=lambda v, indent: self._all_reduce_line(v, indent))[0]

    def build(self, n_ops: int, kinds) -> Program:
        program = super().build(n_ops, kinds)
        body = "\n".join("  " + line if line else line for line in program.text.rstrip("\n").split("\n"))
        replicas, partitions = (self.n, 1) if self.replicas else (1, self.n)
        text = (f"module attributes {{mhlo.num_replicas = {replicas} : i32, mhlo.num_partitions = {partitions} : i32}} {{\n"
                f"{body}\n}}\n")
        return dataclasses.replace(program, text=text)


@st.composite
def collective_programs(draw, n_devices: int, max_ops: int = 6) -> Program:
    """A per-device program of `n_devices` partitions: 1..max_ops ops, each a collective
    (COLLECTIVE_KINDS) or an elementwise op; at least one collective."""
    kinds = ("unary", "binary") + COLLECTIVE_KINDS
    n_ops = draw(st.integers(1, max_ops))
    b = _CollectiveBuilder(draw, n_devices)
    program = b.build(n_ops, kinds)
    if not program.op_kinds & set(COLLECTIVE_KINDS):
        b2 = _CollectiveBuilder(draw, n_devices)
        program = b2.build(1, COLLECTIVE_KINDS)
    return program

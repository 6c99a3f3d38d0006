"""Hypothesis strategies for random but valid StableHLO programs (differential fuzzing).

`programs()` draws a `Program`: a `func.func public @main` whose body is a small DAG of
ops built on function arguments, with every value that has no user returned (so no op
is dead code that XLA's converter could drop). Valid by construction: every shape is
computed here from the op's semantics; tests/test_fuzz.py parses and verifies each one.

Op kinds: elementwise unary/binary (transcendentals included), convert,
broadcast_in_dim, transpose, reshape, slice, concatenate, pad, dot_general (batch and
contracting dims), convolution (NHWC/HWIO, strides, padding, dilation, groups), reduce
(add/max), gather/scatter (the `x[i]` / `x.at[i].add(u)` forms), compare + select, while
(a counted fori-style loop) and case.

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

FLOAT_DTYPES = ("f32", "bf16", "f16")
DTYPES = FLOAT_DTYPES + ("i32",)

UNARY_FLOAT = (
    "negate", "abs", "floor", "ceil", "sign", "round_nearest_even",
    # transcendentals
    "exponential", "exponential_minus_one", "log", "log_plus_one", "logistic", "tanh",
    "sqrt", "rsqrt", "cbrt", "sine", "cosine",
)
UNARY_INT = ("negate", "abs", "sign", "not", "popcnt")
BINARY_FLOAT = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder", "power", "atan2")
BINARY_INT = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "remainder", "power", "and", "or",
              "xor", "shift_left", "shift_right_logical")
COMPARE_DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")

OP_KINDS = (
    "unary", "binary", "convert", "broadcast_in_dim", "transpose", "reshape", "slice", "concatenate", "pad",
    "dot_general", "convolution", "reduce", "reduce_window", "gather", "scatter", "select", "while", "case",
    "call",
)

# _IDENTITY_NOTE: movement ops that change nothing (broadcast/reshape to the same shape,
# the identity transpose or one that moves size-1 dimensions only, a full slice, a zero
# pad) are never generated: XLA's conversion folds them away, so `subtract(x, broadcast(x))` becomes `subtract(x, x)` and then 0
# (folded, not counted) while we count the program as written. For the same reason two
# operands of one op are never the same value (select(p, a, a) -> a).
MAX_DIM = 5
MAX_RANK = 4


def ttype(shape: tuple[int, ...], dtype: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + dtype + ">"


def _ilist(xs) -> str:
    return "[" + ", ".join(str(int(x)) for x in xs) + "]"


def _zero(dtype: str) -> str:
    return "0" if dtype == "i32" else "0.000000e+00"


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

    def __repr__(self) -> str:  # hypothesis prints the falsifying example with this
        return f"Program(op_kinds={sorted(self.op_kinds)!r}, text=\n{self.text}\n)"


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
        ops = UNARY_INT if x.dtype == "i32" else UNARY_FLOAT
        op = self.draw(st.sampled_from(ops))
        self.emit(f"{out} = stablehlo.{op} {x.name} : {x.type}", indent)
        return Value(out, x.shape, x.dtype)

    def op_unary(self, x):
        self.use(x)
        return self.unary_line(x, self.fresh())

    def op_binary(self, x):
        y = self.same_type(x)
        self.use(x, y)
        ops = BINARY_INT if x.dtype == "i32" else BINARY_FLOAT
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
        extra = self.draw(st.integers(0, MAX_RANK - len(x.shape)))
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
        r = Value(out, tuple(shape), x.dtype)
        batching = f"batching_dims = {_ilist(batch_l)} x {_ilist(batch_r)}, " if n_batch else ""
        self.emit(
            f"{out} = stablehlo.dot_general {x.name}, {y.name}, {batching}"
            f"contracting_dims = {_ilist(contract_l)} x {_ilist(contract_r)} : ({x.type}, {y.type}) -> {r.type}"
        )
        return r

    def op_convolution(self, x):
        if len(x.shape) != 4 or x.dtype == "i32":
            x = self.arg(self.shape(4, 4), self.draw(st.sampled_from(FLOAT_DTYPES)))
        n, h, w, c = x.shape
        groups = self.draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
        out_f = groups * self.draw(st.integers(1, 3))
        spatial, strides, pads, dil = [], [], [], []
        for size in (h, w):
            k = self.draw(st.integers(1, 3))
            d = self.draw(st.integers(1, 2))
            s = self.draw(st.integers(1, 2))
            lo, hi = self.draw(st.integers(0, 2)), self.draw(st.integers(0, 2))
            eff = (k - 1) * d + 1
            if size + lo + hi < eff:
                hi += eff - (size + lo + hi)
            spatial.append((k, (size + lo + hi - eff) // s + 1))
            strides.append(s)
            pads.append((lo, hi))
            dil.append(d)
        wv = self.arg((spatial[0][0], spatial[1][0], c // groups, out_f), x.dtype)
        self.use(x, wv)
        out = self.fresh()
        r = Value(out, (n, spatial[0][1], spatial[1][1], out_f), x.dtype)
        pad_txt = "[" + ", ".join(f"[{a}, {b}]" for a, b in pads) + "]"
        self.emit(
            f"{out} = stablehlo.convolution({x.name}, {wv.name}) dim_numbers = [b, 0, 1, f]x[0, 1, i, o]->[b, 0, 1, f], "
            f"window = {{stride = {_ilist(strides)}, pad = {pad_txt}, rhs_dilate = {_ilist(dil)}}} "
            f"{{batch_group_count = 1 : i64, feature_group_count = {groups} : i64}} : ({x.type}, {wv.type}) -> {r.type}"
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
        win = [self.draw(st.integers(1, min(3, d))) for d in x.shape]
        if all(w == 1 for w in win):
            return None  # an identity (see _IDENTITY_NOTE)
        strides = [self.draw(st.integers(1, 2)) for _ in x.shape]
        pads = [(self.draw(st.integers(0, 1)), self.draw(st.integers(0, 1))) for _ in x.shape]
        shape = tuple((d + lo + hi - w) // s + 1 for d, w, s, (lo, hi) in zip(x.shape, win, strides, pads))
        op = self.draw(st.sampled_from(["add", "maximum"]))
        init, a, b, t = self.fresh("c"), self.fresh("a"), self.fresh("b"), self.fresh("t")
        scalar = ttype((), x.dtype)
        self.emit(f"{init} = stablehlo.constant dense<{_zero(x.dtype)}> : {scalar}")
        self.use(x)
        out = self.fresh()
        r = Value(out, shape, x.dtype)
        pad_text = ", ".join(f"[{lo}, {hi}]" for lo, hi in pads)
        self.emit(
            f'{out} = "stablehlo.reduce_window"({x.name}, {init}) <{{window_dimensions = array<i64: {", ".join(map(str, win))}>, '
            f'window_strides = array<i64: {", ".join(map(str, strides))}>, '
            f"padding = dense<[{pad_text}]> : tensor<{len(x.shape)}x2xi64>}}> ({{"
        )
        self.emit(f"^bb0({a}: {scalar}, {b}: {scalar}):", 2)
        self.emit(f"{t} = stablehlo.{op} {a}, {b} : {scalar}", 4)
        self.emit(f"stablehlo.return {t} : {scalar}", 4)
        self.emit(f"}}) : ({x.type}, {scalar}) -> {r.type}")
        return r

    def op_call(self, x):
        """A private function of 1-3 unary ops on x's type, called once or twice in a row
        (JAX's outlined helpers: each call runs its body)."""
        p = self.fresh("p")
        outer, self.lines = self.lines, []
        v = Value(p, x.shape, x.dtype)
        for _ in range(self.draw(st.integers(1, 3))):
            v = self.unary_line(v, self.fresh(), 4)
        body, self.lines = self.lines, outer
        name = f"@f{self.counter}"
        self.funcs.append(f"func.func private {name}({p}: {x.type}) -> {x.type} {{\n" + "\n".join(body)
                          + f"\n    return {v.name} : {x.type}\n}}")
        self.use(x)
        r = x
        for _ in range(self.draw(st.integers(1, 2))):
            out = self.fresh()
            self.emit(f"{out} = func.call {name}({r.name}) : ({x.type}) -> {x.type}")
            r = Value(out, x.shape, x.dtype)
        return r

    def _indices(self, rows: int) -> Value:
        return self.arg((rows, 1), "i32")

    def op_gather(self, x):
        if not x.shape:
            return None
        rows = self.draw(st.integers(1, MAX_DIM))
        idx = self._indices(rows)
        self.use(x, idx)
        rank = len(x.shape)
        out = self.fresh()
        r = Value(out, (rows,) + x.shape[1:], x.dtype)
        self.emit(
            f'{out} = "stablehlo.gather"({x.name}, {idx.name}) {{dimension_numbers = #stablehlo.gather<'
            f"offset_dims = {_ilist(range(1, rank))}, collapsed_slice_dims = [0], start_index_map = [0], "
            f"index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: {', '.join(['1'] + [str(d) for d in x.shape[1:]])}>}} "
            f": ({x.type}, {idx.type}) -> {r.type}"
        )
        return r

    def op_scatter(self, x):
        if not x.shape:
            return None
        rows = self.draw(st.integers(1, MAX_DIM))
        idx = self._indices(rows)
        upd = self.arg((rows,) + x.shape[1:], x.dtype)
        self.use(x, idx, upd)
        rank = len(x.shape)
        s = ttype((), x.dtype)
        a, b, c = self.fresh("s"), self.fresh("s"), self.fresh("s")
        out = self.fresh()
        self.emit(f'{out} = "stablehlo.scatter"({x.name}, {idx.name}, {upd.name}) ({{')
        self.emit(f"^bb0({a}: {s}, {b}: {s}):", 2)
        self.emit(f"{c} = stablehlo.add {a}, {b} : {s}", 4)
        self.emit(f"stablehlo.return {c} : {s}", 4)
        self.emit(
            f"}}) {{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<"
            f"update_window_dims = {_ilist(range(1, rank))}, inserted_window_dims = [0], "
            f"scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}} "
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
        trips = self.draw(st.integers(1, 6))
        i32 = "tensor<i32>"
        c0, w = self.fresh("c"), self.fresh("w")
        it, v = self.fresh("it"), self.fresh("carry")
        self.use(x)
        self.emit(f"{c0} = stablehlo.constant dense<0> : {i32}")
        self.emit(f"{w}:2 = stablehlo.while({it} = {c0}, {v} = {x.name}) : {i32}, {x.type}")
        n, p = self.fresh("c"), self.fresh()
        self.emit("cond {")
        self.emit(f"{n} = stablehlo.constant dense<{trips}> : {i32}", 4)
        self.emit(f"{p} = stablehlo.compare LT, {it}, {n} : ({i32}, {i32}) -> tensor<i1>", 4)
        self.emit(f"stablehlo.return {p} : tensor<i1>", 4)
        self.emit("} do {")
        one, nxt = self.fresh("c"), self.fresh()
        self.emit(f"{one} = stablehlo.constant dense<1> : {i32}", 4)
        self.emit(f"{nxt} = stablehlo.add {it}, {one} : {i32}", 4)
        cur = Value(v, x.shape, x.dtype)
        for _ in range(self.draw(st.integers(1, 3))):
            cur = self.unary_line(cur, self.fresh(), indent=4)
        self.emit(f"stablehlo.return {nxt}, {cur.name} : {i32}, {x.type}", 4)
        self.emit("}")
        return Value(f"{w}#1", x.shape, x.dtype)

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
    """A random valid StableHLO module of 1..max_ops ops drawn from `kinds`."""
    n_ops = draw(st.integers(1, max_ops))
    return _Builder(draw).build(n_ops, tuple(kinds))

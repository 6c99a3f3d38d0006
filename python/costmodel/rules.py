"""Per-op cost rules: one table keyed by op name, XLA HloCostAnalysis conventions.

`RULES[op_name](op, env) -> OpCost` counts flops, transcendentals and bytes of ONE
execution of the op. The default rule (`default_rule`) counts operand bytes read and
result bytes written with no flops; entries override it only where an op differs. All
elementwise ops share `elementwise_rule`; which of them count as transcendentals is the
explicit set `TRANSCENDENTAL_OPS`.

Region ops that the engine recurses into (while, case, if, func.call, composite,
sdy.manual_computation) are in `REGION_OPS`; their cost is assembled by the engine from
their regions. Ops that *apply* a region per element (reduce, sort, scatter, ...) use
`env.apply_cost(region)` for the cost of one application of their computation.

Deliberate differences from XLA are listed in docs/cost-rules.md.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Protocol

from .ir import ir
from .shapes import TensorInfo, type_info

__all__ = [
    "OpCost",
    "RuleEnv",
    "RULES",
    "REGION_OPS",
    "TRANSCENDENTAL_OPS",
    "ELEMENTWISE_OPS",
    "ZERO_COST_CUSTOM_CALLS",
    "rule_for",
    "rule_name",
    "CHLO_DECOMPOSED_OPS",
    "DATA_MOVEMENT_OPS",
    "default_rule",
    "Unsupported",
]

# Units an op runs on: matrix units (tensor cores, MXU), vector units, or none (pure
# data movement/bookkeeping: time is bytes over bandwidth).
MATRIX = "matrix"
VECTOR = "vector"
NONE = "none"


class Unsupported(Exception):
    """Raised by a rule that cannot cost this instance (e.g. dynamic shapes)."""


class NotDecomposed(Unsupported):
    """The decomposition pass left the op as it was."""


@dataclass(slots=True)
class OpCost:
    flops: int = 0
    transcendentals: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    unit: str = VECTOR
    dtype: str = "f32"  # element type whose peak rate applies
    trip_count: int | None = None
    extra: dict = field(default_factory=dict)

    def add(self, other: "OpCost", times: int = 1) -> None:
        self.flops += other.flops * times
        self.transcendentals += other.transcendentals * times
        self.bytes_read += other.bytes_read * times
        self.bytes_written += other.bytes_written * times

    @property
    def bytes_accessed(self) -> int:
        return self.bytes_read + self.bytes_written


class RuleEnv(Protocol):
    def apply_cost(self, region: ir.Region) -> OpCost:
        """Cost of one application of a scalar computation region (reduce bodies ...)."""

    def decomposed_cost(self, op: ir.Operation, pipeline: str) -> OpCost:
        """Flops/transcendentals of the ops that pass `pipeline` rewrites `op` into."""


Rule = Callable[[ir.Operation, RuleEnv], OpCost]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _info(value) -> TensorInfo:
    info = type_info(value.type)
    if info.dynamic:
        raise Unsupported(
            f"dynamic shape {value.type}; run --stablehlo-refine-shapes to make shapes static"
        )
    return info


def _operands(op) -> list[TensorInfo]:
    return [_info(v) for v in op.operands]


def _results(op) -> list[TensorInfo]:
    return [_info(v) for v in op.results]


def _bytes_in(op) -> int:
    return sum(i.nbytes for i in _operands(op))


def _bytes_out(op) -> int:
    return sum(i.nbytes for i in _results(op))


def _dtype(infos: list[TensorInfo], default: str = "f32") -> str:
    for i in infos:
        if i.is_tensor:
            return i.dtype
    return default


def _i64_list(op, name: str) -> list[int] | None:
    if name not in op.attributes:
        return None
    attr = op.attributes[name]
    try:
        return [int(x) for x in ir.DenseI64ArrayAttr(attr)]
    except (ValueError, TypeError):
        pass
    try:
        return [int(x) for x in ir.DenseIntElementsAttr(attr)]
    except (ValueError, TypeError):
        pass
    try:
        return [int(x) for x in ir.DenseBoolArrayAttr(attr)]
    except (ValueError, TypeError):
        return None


def _int_attr(op, name: str, default: int) -> int:
    if name not in op.attributes:
        return default
    return int(ir.IntegerAttr(op.attributes[name]).value)


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _ceil_log2(n: int) -> int:
    """XLA's Log2Ceiling: smallest k with 2**k >= n (0 for n <= 1)."""
    return (n - 1).bit_length() if n > 1 else 0


def _floor_log2(n: int) -> int:
    """XLA's Log2Floor (0 for n <= 1)."""
    return n.bit_length() - 1 if n >= 1 else 0


def _first_result(op) -> TensorInfo:
    return _info(op.results[0])


# ---------------------------------------------------------------------------
# default, bookkeeping, elementwise
# ---------------------------------------------------------------------------


def default_rule(op, env) -> OpCost:
    """Data movement, no arithmetic: read every operand, write every result."""
    ins, outs = _operands(op), _results(op)
    return OpCost(
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=sum(o.nbytes for o in outs),
        unit=NONE,
        dtype=_dtype(outs or ins),
    )


def zero_rule(op, env) -> OpCost:
    """Bookkeeping with no data movement (token ops, tuple plumbing, barriers)."""
    _operands(op)  # dynamic shapes are still reported
    return OpCost(unit=NONE)


def terminator_rule(op, env) -> OpCost:
    """A region's or function's return: nothing, whatever the shapes it hands back (the op
    that made a dynamically shaped value is the one reported, not every return it passes)."""
    return OpCost(unit=NONE)


def constant_rule(op, env) -> OpCost:
    """A constant/iota is materialised once: its result bytes written, no flops (XLA: iota 0 flops)."""
    outs = _results(op)
    return OpCost(bytes_written=sum(o.nbytes for o in outs), unit=NONE, dtype=_dtype(outs))


# XLA HloCostAnalysis::HandleElementwiseOp: these opcodes count one transcendental per
# output element, every other elementwise op one flop. (kErf is a transcendental in the
# XLA that jaxlib 0.10 carries; chlo.erf and chlo.tan convert to kErf/kTan.)
TRANSCENDENTAL_OPS = frozenset(
    {
        "stablehlo.exponential",
        "stablehlo.exponential_minus_one",
        "stablehlo.log",
        "stablehlo.log_plus_one",
        "stablehlo.logistic",
        "stablehlo.tanh",
        "stablehlo.tan",
        "stablehlo.sine",
        "stablehlo.cosine",
        "stablehlo.rsqrt",
        "stablehlo.sqrt",
        "stablehlo.cbrt",
        "stablehlo.power",
        "stablehlo.atan2",
        "chlo.erf",
        "chlo.tan",
    }
)

ELEMENTWISE_OPS = frozenset(
    {
        # unary
        "stablehlo.abs",
        "stablehlo.negate",
        "stablehlo.sign",
        "stablehlo.floor",
        "stablehlo.ceil",
        "stablehlo.round_nearest_afz",
        "stablehlo.round_nearest_even",
        "stablehlo.not",
        "stablehlo.popcnt",
        "stablehlo.count_leading_zeros",
        "stablehlo.is_finite",
        "stablehlo.real",
        "stablehlo.imag",
        "stablehlo.convert",
        "stablehlo.reduce_precision",
        # binary
        "stablehlo.add",
        "stablehlo.subtract",
        "stablehlo.multiply",
        "stablehlo.divide",
        "stablehlo.remainder",
        "stablehlo.maximum",
        "stablehlo.minimum",
        "stablehlo.and",
        "stablehlo.or",
        "stablehlo.xor",
        "stablehlo.shift_left",
        "stablehlo.shift_right_arithmetic",
        "stablehlo.shift_right_logical",
        "stablehlo.compare",
        "stablehlo.complex",
        # ternary
        "stablehlo.clamp",
        "stablehlo.select",
    }
) | (TRANSCENDENTAL_OPS - {"chlo.erf", "chlo.tan"})

# Complex-typed ops that XLA's StableHLO->HLO conversion expands into real arithmetic
# (stablehlo-complex-math-expander); they are costed as that expansion.
COMPLEX_EXPANDED_OPS = frozenset(
    {
        "stablehlo.exponential",
        "stablehlo.exponential_minus_one",
        "stablehlo.log",
        "stablehlo.log_plus_one",
        "stablehlo.sqrt",
        "stablehlo.rsqrt",
    }
)
COMPLEX_EXPANDER = "func.func(stablehlo-complex-math-expander,canonicalize)"


def _elementwise(op, transcendental: bool) -> OpCost:
    ins, outs = _operands(op), _results(op)
    n = sum(o.num_elements for o in outs)
    cost = OpCost(
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=sum(o.nbytes for o in outs),
        unit=VECTOR,
        dtype=_dtype(ins or outs),
    )
    if transcendental:
        cost.transcendentals = n
    else:
        cost.flops = n
    return cost


def elementwise_rule(op, env) -> OpCost:
    """One flop (or one transcendental, see TRANSCENDENTAL_OPS) per output element, any
    element type including complex (XLA); complex exp/log/sqrt... cost XLA's expansion."""
    if op.name in COMPLEX_EXPANDED_OPS and _info(op.results[0]).dtype.startswith("complex"):
        try:
            return decomposed_rule(op, env, COMPLEX_EXPANDER)
        except NotDecomposed:
            pass
    return _elementwise(op, op.name in TRANSCENDENTAL_OPS)


def transcendental_rule(op, env) -> OpCost:
    """One transcendental per output element (chlo.erf -> HLO erf, chlo.tan -> HLO tan)."""
    return _elementwise(op, True)


# XLA's StableHLO->HLO conversion expands CHLO through MHLO; the same passes give the
# same expansion (then canonicalize folds constants as the conversion does).
CHLO_EXPANDER = "func.func(chlo-legalize-to-hlo),hlo-legalize-to-stablehlo,func.func(canonicalize)"
QUANT_EXPANDER = "func.func(stablehlo-legalize-quant-to-math,canonicalize)"


def decomposed_rule(op, env, pipeline: str) -> OpCost:
    """Cost of the op's decomposition (the ops `pipeline` rewrites it into, costed with
    this table); bytes are the op's own operands and results (the expansion is fused)."""
    sub = env.decomposed_cost(op, pipeline)
    ins, outs = _operands(op), _results(op)
    return OpCost(
        flops=sub.flops,
        transcendentals=sub.transcendentals,
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=sum(o.nbytes for o in outs),
        unit=VECTOR,
        dtype=_dtype(ins or outs),
    )


def chlo_decomposition_rule(op, env) -> OpCost:
    """CHLO op costed as XLA does: as its chlo-legalize-to-stablehlo expansion."""
    return decomposed_rule(op, env, CHLO_EXPANDER)


def quant_decomposition_rule(op, env) -> OpCost:
    """uniform_quantize/dequantize costed as their stablehlo-legalize-quant-to-math expansion."""
    return decomposed_rule(op, env, QUANT_EXPANDER)


# ---------------------------------------------------------------------------
# dot / convolution
# ---------------------------------------------------------------------------


def _dot_dtype(lhs: TensorInfo, rhs: TensorInfo) -> str:
    """The matrix-unit rate is set by the wider of the two operand types."""
    a, b = lhs.dtype, rhs.dtype
    if a == b:
        return a
    return a if lhs.elem_bytes >= rhs.elem_bytes else b


def _matrix_cost(op, lhs, rhs, out, flops) -> OpCost:
    return OpCost(
        flops=flops,
        bytes_read=lhs.nbytes + rhs.nbytes,
        bytes_written=out.nbytes,
        unit=MATRIX,
        dtype=_dot_dtype(lhs, rhs),
    )


def dot_general_rule(op, env) -> OpCost:
    """2 x output elements x contracted size (XLA GetDotFlops; one FMA = 2 flops)."""
    from jaxlib.mlir.dialects import stablehlo as shlo

    lhs, rhs = _info(op.operands[0]), _info(op.operands[1])
    out = _info(op.results[0])
    dn = shlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    k = _prod(lhs.shape[d] for d in dn.lhs_contracting_dimensions)
    return _matrix_cost(op, lhs, rhs, out, 2 * out.num_elements * k)


def dot_rule(op, env) -> OpCost:
    """stablehlo.dot contracts the last lhs dim (vector/matrix): 2 x out x K."""
    lhs, rhs = _info(op.operands[0]), _info(op.operands[1])
    out = _info(op.results[0])
    k = lhs.shape[-1] if lhs.rank >= 1 else 1
    return _matrix_cost(op, lhs, rhs, out, 2 * out.num_elements * k)


def _einsum_sizes(config: str, infos: list[TensorInfo]) -> tuple[dict, str]:
    lhs, _, out = config.replace(" ", "").partition("->")
    sizes: dict[str, int] = {}
    for spec, info in zip(lhs.split(","), infos):
        if "." in spec:
            raise Unsupported(f"einsum config '{config}' with ellipsis is not supported")
        for ch, d in zip(spec, info.shape):
            sizes[ch] = d
    return sizes, out


def einsum_rule(op, env) -> OpCost:
    """Like its dot_general: 2 x output elements x product of the contracted indices."""
    lhs, rhs = _info(op.operands[0]), _info(op.operands[1])
    out = _info(op.results[0])
    config = ir.StringAttr(op.attributes["einsum_config"]).value
    sizes, out_spec = _einsum_sizes(config, [lhs, rhs])
    k = _prod(v for ch, v in sizes.items() if ch not in out_spec)
    return _matrix_cost(op, lhs, rhs, out, 2 * out.num_elements * k)


def unary_einsum_rule(op, env) -> OpCost:
    """A reduction (and/or transpose): input elements - output elements additions."""
    x = _info(op.operands[0])
    out = _info(op.results[0])
    return OpCost(
        flops=max(0, x.num_elements - out.num_elements),
        bytes_read=x.nbytes,
        bytes_written=out.nbytes,
        unit=VECTOR,
        dtype=x.dtype,
    )


def ragged_dot_rule(op, env) -> OpCost:
    """chlo.ragged_dot: each row of the ragged lhs dimension meets one group's rhs, so
    2 x (output elements) x K, the cost of the dense dot it replaces without the group dim."""
    from jaxlib.mlir.dialects import chlo

    lhs, rhs = _info(op.operands[0]), _info(op.operands[1])
    out = _info(op.results[0])
    try:
        dn = chlo.RaggedDotDimensionNumbers(op.attributes["ragged_dot_dimension_numbers"])
        contracting = list(dn.lhs_contracting_dimensions)
    except (AttributeError, TypeError, ValueError, KeyError):
        contracting = [lhs.rank - 1]
    k = _prod(lhs.shape[d] for d in contracting)
    return _matrix_cost(op, lhs, rhs, out, 2 * out.num_elements * k)


def _count_congruent(lo: int, hi: int, s: int, c: int, m: int) -> int:
    """#{o in [lo, hi] : o*s = c (mod m)}."""
    if hi < lo:
        return 0
    if m == 1:
        return hi - lo + 1
    g = math.gcd(s, m)
    if c % g:
        return 0
    m2 = m // g
    if m2 == 1:
        return hi - lo + 1
    o0 = ((c // g) * pow((s // g) % m2, -1, m2)) % m2  # smallest non-negative solution
    first = lo + ((o0 - lo) % m2)
    return 0 if first > hi else (hi - first) // m2 + 1


def _valid_taps(in_size: int, k_size: int, out_size: int, stride: int, pad_lo: int, lhs_dil: int, rhs_dil: int) -> int:
    """Number of (output position, kernel tap) pairs that read a real input element,
    counted like XLA's GetConvolutionFlops (taps in padding or in the holes of a dilated
    input are skipped). O(min(kernel size, output size)): for each tap the valid outputs
    form an arithmetic progression, and so do the valid taps of each output; the loop runs
    over the shorter of the two. Unsupported when both exceed _MAX_TAP_LOOP (a hostile
    shape: counting would take minutes)."""
    if in_size <= 0 or out_size <= 0 or k_size <= 0:
        return 0
    if min(k_size, out_size) > _MAX_TAP_LOOP:
        raise Unsupported(
            f"convolution window of {k_size} taps over {out_size} outputs: too large to count its valid taps"
        )
    total = 0
    top = (in_size - 1) * lhs_dil  # last undilated index of a real element
    # undilated = o*stride - pad_lo + k*rhs_dil must be in [0, top], = 0 (mod lhs_dil):
    # symmetric in (o, stride) and (k, rhs_dil), so the loop runs over the shorter one
    if k_size <= out_size:
        outer, outer_step, inner, inner_step = k_size, rhs_dil, out_size, stride
    else:
        outer, outer_step, inner, inner_step = out_size, stride, k_size, rhs_dil
    for i in range(outer):
        base = i * outer_step - pad_lo
        lo = max(0, -(base // inner_step))  # ceil(-base / inner_step)
        hi = min(inner - 1, (top - base) // inner_step)
        total += _count_congruent(lo, hi, inner_step, (-base) % lhs_dil, lhs_dil)
    return total


# the most iterations _valid_taps runs for one spatial dimension (about a second)
_MAX_TAP_LOOP = 1 << 21


def _conv_cost(op, lhs, rhs, out, padding: list[int]) -> OpCost:
    from jaxlib.mlir.dialects import stablehlo as shlo

    dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    nsp = len(dn.input_spatial_dimensions)
    strides = _i64_list(op, "window_strides") or [1] * nsp
    lhs_dil = _i64_list(op, "lhs_dilation") or [1] * nsp
    rhs_dil = _i64_list(op, "rhs_dilation") or [1] * nsp
    fgc = _int_attr(op, "feature_group_count", 1)
    bgc = _int_attr(op, "batch_group_count", 1)
    taps = 1
    for i in range(nsp):
        taps *= _valid_taps(
            lhs.shape[dn.input_spatial_dimensions[i]],
            rhs.shape[dn.kernel_spatial_dimensions[i]],
            out.shape[dn.output_spatial_dimensions[i]],
            strides[i],
            padding[2 * i],
            lhs_dil[i],
            rhs_dil[i],
        )
    in_features = lhs.shape[dn.input_feature_dimension]
    out_features = out.shape[dn.output_feature_dimension]
    batch = lhs.shape[dn.input_batch_dimension]
    # XLA: (input_feature / fgc) * output_feature * (batch / bgc) * valid taps FMAs
    fmas = (in_features // fgc) * out_features * (batch // bgc) * taps
    return _matrix_cost(op, lhs, rhs, out, 2 * fmas)


def convolution_rule(op, env) -> OpCost:
    """XLA GetConvolutionFlops: any dimension_numbers, strides, padding, lhs/rhs
    dilation, feature_group_count and batch_group_count; in-bounds taps only."""
    lhs, rhs, out = _info(op.operands[0]), _info(op.operands[1]), _info(op.results[0])
    nsp = lhs.rank - 2
    padding = _i64_list(op, "padding") or [0] * (2 * nsp)
    return _conv_cost(op, lhs, rhs, out, padding)


def dynamic_conv_rule(op, env) -> OpCost:
    """Convolution whose padding is operand 2: costed when that operand is a constant."""
    lhs, rhs, out = _info(op.operands[0]), _info(op.operands[1]), _info(op.results[0])
    owner = op.operands[2].owner
    owner = getattr(owner, "operation", owner)
    if getattr(owner, "name", None) != "stablehlo.constant":
        raise Unsupported("dynamic_conv padding is not a constant; run --stablehlo-refine-shapes")
    padding = [int(x) for x in ir.DenseIntElementsAttr(owner.attributes["value"])]
    return _conv_cost(op, lhs, rhs, out, padding)


# ---------------------------------------------------------------------------
# reductions and applied computations
# ---------------------------------------------------------------------------


def _scaled(per: OpCost, n: int, op, dtype: str) -> OpCost:
    return OpCost(
        flops=per.flops * n,
        transcendentals=per.transcendentals * n,
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=dtype,
    )


def reduce_rule(op, env) -> OpCost:
    """(input elements - output elements) applications of the reducer (XLA HandleReduce)."""
    n_inputs = len(op.operands) // 2
    x = _info(op.operands[0])
    out = _info(op.results[0])
    del n_inputs
    per = env.apply_cost(op.regions[0])
    return _scaled(per, x.num_elements - out.num_elements, op, x.dtype)


# XLA's ReduceWindowRewriter (xla/service/reduce_window_rewriter.cc, in the GPU and the CPU
# compilers' pipelines) rewrites a scan written as a reduce_window longer than this
# (DebugOptions xla_reduce_window_rewrite_base_length, default 16 in
# xla/debug_options_flags.cc) into a tree of windows of this length.
REDUCE_WINDOW_REWRITE_BASE = 16


def _scan_length(op, shape, window, padding) -> int | None:
    """The length of the scan a reduce_window computes (jnp.cumsum/cumprod/cummax: one
    window dimension spanning its whole length, stride 1, padded by the length or one
    less on one side), when XLA's ReduceWindowRewriter rewrites it (TryOptimizeCumSumOrProd:
    longer than the base length); None otherwise."""
    wide = [i for i, d in enumerate(window) if d != 1]
    if len(wide) != 1:
        return None
    d = wide[0]
    n = shape[d]
    if n <= REDUCE_WINDOW_REWRITE_BASE or window[d] != n:
        return None
    for key in ("window_strides", "base_dilations", "window_dilations"):
        values = _i64_list(op, key)
        if values is not None and values[d] != 1:
            return None
    lo, hi = padding[2 * d], padding[2 * d + 1]
    if (lo in (n - 1, n) and hi == 0) or (hi in (n - 1, n) and lo == 0):
        return n
    return None


def _tree_scan_applications(n: int, rows: int) -> int:
    """Reducer applications of XLA's tree rewrite of `rows` scans of length n: pad to a
    multiple of the base b, scan each run of b (b - 1 applications per element), combine
    with the exclusive scan of the runs' last elements (one more per element), that scan
    rewritten the same way while it is longer than b, the last one a plain window."""
    b = REDUCE_WINDOW_REWRITE_BASE
    total = 0
    while n > b:
        padded = -(-n // b) * b
        total += rows * padded * (b - 1) + rows * padded
        n = padded // b
    return total + rows * n * max(n - 1, 0)


def reduce_window_rule(op, env) -> OpCost:
    """(window elements - 1) applications per output element (XLA HandleReduceWindow),
    including XLA's special case of a reduce-then-broadcast window along one padded
    dimension (a cumulative sum over the whole dimension): out/w + (w - 1) applications.
    A scan longer than 16 (jnp.cumsum over a vocabulary) counts the applications of the
    tree XLA's compilers rewrite it into (REDUCE_WINDOW_REWRITE_BASE), not the quadratic
    window XLA's cost analysis of the unoptimized module counts."""
    x = _info(op.operands[0])
    out = _info(op.results[0])
    window = _i64_list(op, "window_dimensions") or [1] * x.rank
    padding = _i64_list(op, "padding") or [0] * (2 * len(window))
    per = env.apply_cost(op.regions[0])
    w = _prod(window)
    count = (w - 1) * out.num_elements
    n = _scan_length(op, list(x.shape), window, padding) if x.rank == len(window) else None
    if n is not None:
        return _scaled(per, _tree_scan_applications(n, x.num_elements // n), op, x.dtype)
    reduction_dims = sum(1 for d in window if d != 1)
    padded_dims = sum(1 for i in range(len(window)) if padding[2 * i] or padding[2 * i + 1])
    if reduction_dims == 1 and padded_dims == 1 and len(op.results) == 1:
        for i, d in enumerate(window):
            lo, hi = padding[2 * i], padding[2 * i + 1]
            if d != 1 and lo != 0 and hi != 0 and lo == hi and d == 2 * lo + 1:
                if lo == out.shape[i] - 1:
                    wd = out.shape[i]
                    count = out.num_elements // wd + (wd - 1)
                break
    return _scaled(per, count, op, x.dtype)


def select_and_scatter_rule(op, env) -> OpCost:
    """Per source element: (window - 1) select applications + 1 scatter application (XLA)."""
    operand, source = _info(op.operands[0]), _info(op.operands[1])
    window = _prod(_i64_list(op, "window_dimensions") or [1])
    select = env.apply_cost(op.regions[0])
    scatter = env.apply_cost(op.regions[1])
    n = source.num_elements
    return OpCost(
        flops=n * (window - 1) * select.flops + n * scatter.flops,
        transcendentals=n * (window - 1) * select.transcendentals + n * scatter.transcendentals,
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=operand.dtype,
    )


def scatter_rule(op, env) -> OpCost:
    """One update-computation application per element of the first updates operand (XLA);
    bytes as XLA: updates read twice (operand window and updates) plus indices, updates written.
    `extra["atomic_elements"]`: the elements it updates when its indices are not known
    unique (`unique_indices`), which a GPU updates with atomic read-modify-writes (XLA
    GPU's scatter emitter; the calibrated backend's scatter_element_ns)."""
    n_inputs = (len(op.operands) - 1) // 2
    indices = _info(op.operands[n_inputs])
    updates = [_info(v) for v in op.operands[n_inputs + 1 :]]
    _results(op)
    per = env.apply_cost(op.regions[0])
    n = updates[0].num_elements
    upd_bytes = sum(u.nbytes for u in updates)
    atomic = _atomic_elements(op)
    return OpCost(
        flops=per.flops * n,
        transcendentals=per.transcendentals * n,
        bytes_read=2 * upd_bytes + indices.nbytes,
        bytes_written=upd_bytes,
        unit=VECTOR,
        dtype=updates[0].dtype,
        extra={"atomic_elements": atomic} if atomic else {},
    )


def _atomic_elements(op) -> int:
    """The elements a scatter updates with atomic read-modify-writes on a GPU: every
    element of its updates, unless its indices are known unique (`unique_indices`)."""
    if "unique_indices" in op.attributes and ir.BoolAttr(op.attributes["unique_indices"]).value:
        return 0
    n_inputs = (len(op.operands) - 1) // 2
    return sum(_info(v).num_elements for v in op.operands[n_inputs + 1 :])


def gather_rule(op, env) -> OpCost:
    """No flops; reads as many operand bytes as it writes, plus the indices (XLA)."""
    _info(op.operands[0])
    indices = _info(op.operands[1])
    out = _info(op.results[0])
    return OpCost(bytes_read=out.nbytes + indices.nbytes, bytes_written=out.nbytes, unit=NONE, dtype=out.dtype)


def slice_rule(op, env) -> OpCost:
    """No flops; reads only the sliced elements (XLA HandleSlice/HandleDynamicSlice)."""
    _info(op.operands[0])
    out = _first_result(op)
    index_bytes = sum(_info(v).nbytes for v in op.operands[1:])
    return OpCost(bytes_read=out.nbytes + index_bytes, bytes_written=out.nbytes, unit=NONE, dtype=out.dtype)


def dynamic_update_slice_rule(op, env) -> OpCost:
    """No flops; the operand aliases the result, so only the update is read and written (XLA)."""
    _info(op.operands[0])
    update = _info(op.operands[1])
    index_bytes = sum(_info(v).nbytes for v in op.operands[2:])
    return OpCost(bytes_read=update.nbytes + index_bytes, bytes_written=update.nbytes, unit=NONE, dtype=update.dtype)


def map_rule(op, env) -> OpCost:
    """One application of the mapped computation per output element (XLA HandleMap)."""
    out = _first_result(op)
    return _scaled(env.apply_cost(op.regions[0]), out.num_elements, op, out.dtype)


def sort_rule(op, env) -> OpCost:
    """XLA HandleSort: n x ceil(log2 n) flops with n = ALL elements of operand 0 (not per
    slice); the comparator is not counted."""
    x = _info(op.operands[0])
    _results(op)
    env.apply_cost(op.regions[0])  # annotate the comparator (its cost is not added)
    n = x.num_elements
    return OpCost(
        flops=n * _ceil_log2(n),
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=x.dtype,
    )


def topk_rule(op, env) -> OpCost:
    """TopK (chlo.top_k, custom_call TopK) costed as the sort it is expanded into:
    n x ceil(log2 n) with n = all operand elements (XLA HandleSort). XLA's unoptimized
    kTopK counts 0 flops; see docs/cost-rules.md."""
    x = _info(op.operands[0])
    n = x.num_elements
    return OpCost(
        flops=n * _ceil_log2(n),
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=x.dtype,
    )


def all_reduce_rule(op, env) -> OpCost:
    """Local reduction work (XLA HandleAllReduce): one flop per result element (XLA
    assumes 2 participants; communication is costed by extract-collectives)."""
    outs = _results(op)
    if op.regions and len(op.regions[0].blocks):
        env.apply_cost(op.regions[0])  # annotate the reducer
    n = sum(o.num_elements for o in outs)
    return OpCost(flops=n, bytes_read=_bytes_in(op), bytes_written=_bytes_out(op), unit=VECTOR, dtype=_dtype(outs))


def reduce_scatter_rule(op, env) -> OpCost:
    """Like all_reduce: one reducer flop per result element (XLA counts 0; see docs)."""
    return all_reduce_rule(op, env)


def rng_rule(op, env) -> OpCost:
    """XLA HandleRng: one transcendental per generated element."""
    out = _first_result(op)
    return OpCost(
        transcendentals=out.num_elements, bytes_read=_bytes_in(op), bytes_written=out.nbytes, unit=VECTOR, dtype=out.dtype
    )


def rng_bit_generator_rule(op, env) -> OpCost:
    """XLA HandleRngBitGenerator: one transcendental per element of every result
    (the new state included)."""
    outs = _results(op)
    return OpCost(
        transcendentals=sum(o.num_elements for o in outs),
        bytes_read=_bytes_in(op),
        bytes_written=sum(o.nbytes for o in outs),
        unit=VECTOR,
        dtype=outs[-1].dtype,
    )


def fft_rule(op, env) -> OpCost:
    """XLA HandleFft: 2 x 4 x prod(floor(log2 L)) x operand elements (4 FMAs per complex mul)."""
    x = _info(op.operands[0])
    lengths = _i64_list(op, "fft_length") or []
    log_factors = _prod(_floor_log2(n) for n in lengths)
    return OpCost(
        flops=2 * 4 * log_factors * x.num_elements,
        bytes_read=x.nbytes,
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=x.dtype,
    )


def cholesky_rule(op, env) -> OpCost:
    """XLA HandleCholesky: batch x n^3 / 3 flops (n x elements / 3); half of a read and written."""
    a = _info(op.operands[0])
    n = a.shape[-1] if a.rank else 1
    return OpCost(
        flops=n * a.num_elements // 3,
        bytes_read=a.nbytes // 2,
        bytes_written=a.nbytes // 2,
        unit=VECTOR,
        dtype=a.dtype,
    )


def triangular_solve_rule(op, env) -> OpCost:
    """XLA HandleTriangularSolve: 2 x (last dim of a) x elements of b; half of a read."""
    a, b = _info(op.operands[0]), _info(op.operands[1])
    out = _first_result(op)
    n = a.shape[-1] if a.rank else 1
    return OpCost(
        flops=2 * n * b.num_elements,
        bytes_read=a.nbytes // 2 + b.nbytes,
        bytes_written=out.nbytes,
        unit=VECTOR,
        dtype=a.dtype,
    )


def _bn_sizes(op) -> tuple[int, int, TensorInfo]:
    x = _info(op.operands[0])
    _results(op)
    fi = _int_attr(op, "feature_index", x.rank - 1)
    c = x.shape[fi] if x.rank else 1
    return x.num_elements, c, x


def batch_norm_inference_rule(op, env) -> OpCost:
    """Counted as XLA's BatchNormExpander arithmetic (unoptimized XLA counts 0; see docs):
    per feature var + eps, rsqrt (1 transcendental), x scale (2 C flops); per element
    x - mean, x factor, + offset (3 N flops)."""
    n, c, x = _bn_sizes(op)
    return OpCost(flops=3 * n + 2 * c, transcendentals=c, bytes_read=_bytes_in(op), bytes_written=_bytes_out(op), unit=VECTOR, dtype=x.dtype)


def batch_norm_training_rule(op, env) -> OpCost:
    """Mean: (N - C) adds + C divides; variance: x - mean, square (2 N), (N - C) adds +
    C divides; then normalise as batch_norm_inference (3 N + 2 C flops, C rsqrt)."""
    n, c, x = _bn_sizes(op)
    flops = (n - c) + c + 2 * n + (n - c) + c + 3 * n + 2 * c
    return OpCost(flops=flops, transcendentals=c, bytes_read=_bytes_in(op), bytes_written=_bytes_out(op), unit=VECTOR, dtype=x.dtype)


def batch_norm_grad_rule(op, env) -> OpCost:
    """x - mean and grad_y x (x - mean) (2 N), two per-feature sums (2 (N - C)), grad_x
    = factor x (N grad_y - sum(grad_y) - (x - mean) x k) (5 N), per feature var + eps,
    rsqrt (1 transcendental), and 4 scalings (5 C)."""
    n, c, x = _bn_sizes(op)
    flops = 2 * n + 2 * (n - c) + 5 * n + 5 * c
    return OpCost(flops=flops, transcendentals=c, bytes_read=_bytes_in(op), bytes_written=_bytes_out(op), unit=VECTOR, dtype=x.dtype)


# ---------------------------------------------------------------------------
# custom calls
# ---------------------------------------------------------------------------

ZERO_COST_CUSTOM_CALLS = frozenset(
    {
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "xla.sdy.FuncResultSharding",
        "xla.sdy.GlobalToLocalShape",
        "xla.sdy.LocalToGlobalShape",
        "xla_python_cpu_callback",
        "xla_python_gpu_callback",
        "xla_ffi_python_cpu_callback",
        "xla_ffi_python_gpu_callback",
        "X64Combine",
        "X64SplitLow",
        "X64SplitHigh",
        "AllocateBuffer",
        "LayoutConstraint",
        "ShapeAssertion",
        "shape_assertion",  # JAX's shape-polymorphic exports: a check of the dimension sizes
    }
)


# Targets we recognise but do not cost, with what that leaves out of the step (the
# reason goes into the op's costmodel.unsupported and the warning).
UNCOSTED_CUSTOM_CALLS = {
    "tpu_custom_call": "a Pallas/Mosaic TPU kernel without a cost estimate (pallas_call(..., cost_estimate=)), "
    "opaque to us: its work is not in the step",
    "__gpu$xla.gpu.triton": "a Pallas/Triton GPU kernel, opaque to us: its work is not in the step",
    "mosaic_gpu": "a Pallas/Mosaic GPU kernel, opaque to us: its work is not in the step",
    "__cudnn$convForwardGraph": "a cuDNN convolution with pointwise ops in a serialized cuDNN graph, which we do "
    "not read: its work is not in the step",
}


def custom_call_target(op) -> str:
    return ir.StringAttr(op.attributes["call_target_name"]).value


class InvalidConfigJSON(Unsupported):
    """A backend_config that is not valid JSON; its text says why (parse_config_json)."""


def parse_config_json(text: str):
    """A backend_config's JSON text as Python values, its nesting bounded
    (`ir.json_loads`; the one place rules parse JSON). InvalidConfigJSON ("backend_config
    is not valid JSON (why)") when it is not JSON or nests too deep."""
    from .jsonio import json_loads

    try:
        return json_loads(text)
    except ValueError as err:  # json.JSONDecodeError, UnicodeDecodeError, too deep
        why = str(err).splitlines()[0] if str(err) else type(err).__name__
    raise InvalidConfigJSON(f"backend_config is not valid JSON ({why}; it starts {text[:40]!r})")


def custom_call_rule(op, env) -> OpCost:
    """Known zero-cost targets cost nothing; TopK as its sort; the library calls below
    (linear algebra, cuDNN attention, cuBLAS GEMMs, cuDNN convolutions) by their rules;
    anything else is unsupported."""
    target = custom_call_target(op)
    if target in ZERO_COST_CUSTOM_CALLS:
        return OpCost(unit=NONE)
    rule = CUSTOM_CALL_RULES.get(target)
    if rule is not None:
        return rule(op, env)
    if linalg_routine(target) is not None:
        return linalg_rule(op, env)
    if target.startswith("__cudnn$fmha"):
        return cudnn_attention_rule(op, env)
    if target in CUBLAS_GEMM_TARGETS:
        return cublas_gemm_rule(op, env)
    if target in CUDNN_CONV_TARGETS:
        return cudnn_conv_rule(op, env)
    if target in UNCOSTED_CUSTOM_CALLS:
        raise Unsupported(f"custom_call target '{target}' is {UNCOSTED_CUSTOM_CALLS[target]}")
    raise Unsupported(f"custom_call target '{target}' has no cost rule")


def pallas_tpu_rule(op, env) -> OpCost:
    """A Pallas/Mosaic TPU kernel (`custom_call @tpu_custom_call`) whose author declared
    its cost (`pallas_call(..., cost_estimate=pl.CostEstimate(flops, transcendentals,
    bytes_accessed))`; JAX puts it in the call's backend_config, where XLA's TPU compiler
    reads it too): those counts, the results' bytes written and the rest of
    bytes_accessed read. The flops count as matrix work (Pallas TPU kernels are written
    for the MXU, and the roofline stays a lower bound). Without an estimate the kernel is
    opaque: unsupported, as UNCOSTED_CUSTOM_CALLS says."""
    opaque = f"custom_call target 'tpu_custom_call' is {UNCOSTED_CUSTOM_CALLS['tpu_custom_call']}"
    cfg = op.attributes["backend_config"] if "backend_config" in op.attributes else None
    try:
        text = ir.StringAttr(cfg).value if cfg is not None else ""
    except (ValueError, TypeError):
        text = ""
    try:
        parsed = parse_config_json(text) if text else None
    except InvalidConfigJSON as err:
        raise Unsupported(f"{opaque}; its {err}") from None
    est = None
    if isinstance(parsed, dict) and isinstance(parsed.get("custom_call_config"), dict):
        est = parsed["custom_call_config"].get("cost_estimate")
    if not isinstance(est, dict) or not all(_is_int(est.get(k)) and est.get(k) >= 0
                                            for k in ("flops", "transcendentals", "bytes_accessed")):
        raise Unsupported(opaque)
    outs = _results(op)
    written = min(sum(o.nbytes for o in outs), est["bytes_accessed"])
    return OpCost(
        flops=est["flops"],
        transcendentals=est["transcendentals"],
        bytes_read=est["bytes_accessed"] - written,
        bytes_written=written,
        unit=MATRIX,
        dtype=_dtype(outs),
    )


def _attention_pairs(t: int, s: int, mask_type: str, window: int) -> float:
    """Query-key pairs a fused attention computes: all T x S, or under a causal mask each
    query i the keys j <= i (cuDNN's top-left alignment), within a sliding window when
    one is set: sum over i of min(i + 1, S, window)."""
    if "CAUSAL" not in mask_type.upper():
        return float(t * s)
    c = min(s, window) if window > 0 else s
    return t * (t + 1) / 2 if t <= c else c * (c + 1) / 2 + (t - c) * c


def cudnn_attention_rule(op, env) -> OpCost:
    """cuDNN's fused flash attention (`custom_call @__cudnn$fmha...`: jax.nn.
    dot_product_attention(implementation="cudnn") on GPU). From its backend_config
    (`cudnn_fmha_backend_config`: the B x N x T x S score shape, the mask type, the sliding
    window) and the head sizes of Q and V (their last dimension), with P the query-key
    pairs it computes (_attention_pairs):
      forward:  Q K^T and P V, 2 x B x N x P x (H_qk + H_v) flops, B x N x P exponentials;
      backward (a `...Backward` target): the scores recomputed, dV, dP, dQ and dK, five
        matmuls as FlashAttention-2 counts them (Dao 2023, sec. 3.1: 2.5 times the
        forward's), 2 x B x N x P x (3 H_qk + 2 H_v) flops, B x N x P exponentials;
    the operands read and the results written once."""
    target = custom_call_target(op)
    no_shape = f"custom_call target '{target}': no cudnn_fmha_backend_config with the score shape"
    try:
        text = ir.StringAttr(op.attributes["backend_config"]).value
    except (KeyError, ValueError, TypeError):
        raise Unsupported(no_shape) from None
    try:
        cfg = parse_config_json(text)
    except InvalidConfigJSON as err:
        raise Unsupported(f"custom_call target '{target}': its {err}, so the score shape cannot be read") from None
    cfg = cfg.get("cudnn_fmha_backend_config") if isinstance(cfg, dict) else None
    shape = cfg.get("intermediate_tensor_shape") if isinstance(cfg, dict) else None
    dims = shape.get("dimensions") if isinstance(shape, dict) else None
    if not isinstance(dims, list) or len(dims) != 4:
        raise Unsupported(no_shape)
    b, n, t, s_ = (_int_field(x, "cudnn_fmha_backend_config.intermediate_tensor_shape.dimensions", target)
                   for x in dims)
    mask = cfg.get("mask_type", "NO_MASK")
    if not isinstance(mask, str):
        raise Unsupported(f"custom_call target '{target}': backend_config field mask_type = {mask!r} is not a mask name")
    window = cfg.get("sliding_window_length", 0)
    window = 0 if window is None else _int_field(window, "sliding_window_length", target)
    if len(op.operands) < 3:
        raise Unsupported(f"custom_call target '{target}' has {len(op.operands)} operands; "
                          "fused attention reads Q, K and V")
    q, v = _info(op.operands[0]), _info(op.operands[2])
    if q.rank < 1 or v.rank < 1:
        raise Unsupported(f"custom_call target '{target}': Q and V of ranks {q.rank} and {v.rank} have no head dimension")
    h_qk, h_v = q.shape[-1], v.shape[-1]
    pairs = b * n * _attention_pairs(t, s_, mask, window)
    backward = "Backward" in target
    flops = 2 * pairs * ((3 * h_qk + 2 * h_v) if backward else (h_qk + h_v))
    return OpCost(
        flops=int(round(flops)),
        transcendentals=int(round(pairs)),
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=MATRIX,
        dtype=q.dtype,
    )


def block_scaled_dot_rule(op, env) -> OpCost:
    """cuDNN's block-scaled matmul (`custom_call @__op$block_scaled_dot`: jax.nn.
    scaled_matmul, MXFP8 / NVFP4): lhs (batch, M, K) x rhs (batch, N, K) -> (batch, M, N),
    2 x batch x M x N x K flops (one FMA = 2 flops) at the narrow type's matrix rate; the
    scales are read with the operands."""
    a, b = _info(op.operands[0]), _info(op.operands[1])
    if a.rank != 3 or b.rank != 3:
        raise Unsupported(f"block_scaled_dot expects (batch, M, K) x (batch, N, K) operands, got ranks {a.rank} and {b.rank}")
    batch, m, k = a.shape
    n = b.shape[1]
    return OpCost(
        flops=2 * batch * m * n * k,
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=MATRIX,
        dtype=a.dtype,
    )


# ---------------------------------------------------------------------------
# cuBLAS and cuDNN library calls (XLA GPU's optimized HLO)
# ---------------------------------------------------------------------------
#
# XLA GPU runs the GEMMs it does not emit with Triton, and every convolution, as library
# calls: custom calls to cuBLAS (`__cublas$gemm`, cuBLASLt `__cublas$lt$matmul`, its fp8
# form `__cublas$lt$matmul$f8`; xla/service/gpu/cublas_cudnn.cc) and cuDNN
# (`__cudnn$convForward`, `$convBackwardInput`, `$convBackwardFilter`,
# `$convBiasActivationForward`). An optimized module converted to StableHLO/MHLO
# (`hlo_to_stablehlo`, xla/hlo/translate/hlo_to_mhlo/hlo_function_importer.cc) keeps
# their operands, their result (a tuple whose last element is the library's u8 / s8
# workspace), the target and the backend_config (XLA's GpuBackendConfig as JSON), and
# drops the convolution's window and dim_labels: a cuDNN call's window is read from its
# shapes here (cudnn_conv_problem).

CUBLAS_GEMM_TARGETS = frozenset({"__cublas$gemm", "__cublas$lt$matmul", "__cublas$lt$matmul$f8"})
# what each cuDNN target runs (XLA's CudnnConvKind), as kernel formation names it
CUDNN_CONV_TARGETS = {
    "__cudnn$convForward": "forward",
    "__cudnn$convBiasActivationForward": "forward",
    "__cudnn$convBackwardInput": "backward_input",
    "__cudnn$convBackwardFilter": "backward_filter",
}
CUSTOM_CALL_OPS = frozenset({"stablehlo.custom_call", "mhlo.custom_call"})

# Per output element, the (flops, transcendentals) of the elementwise ops XLA's
# GemmRewriter folds into a cuBLASLt epilogue (GemmBackendConfig.epilogue), counted as
# those ops count unfused: a bias add 1, a ReLU (maximum) 1, GELU's tanh approximation
# 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) 8 and a tanh, SiLU x logistic(x) 1 and a
# logistic. The proto's enum numbers are accepted too.
GEMM_EPILOGUES = {
    "DEFAULT": (0, 0),
    "BIAS": (1, 0),
    "RELU": (1, 0),
    "BIAS_RELU": (2, 0),
    "GELU": (8, 1),
    "GELU_AUX": (8, 1),
    "BIAS_GELU": (9, 1),
    "BIAS_GELU_AUX": (9, 1),
    "SILU": (1, 1),
    "BIAS_SILU": (2, 1),
}
_GEMM_EPILOGUE_NUMBERS = ["DEFAULT", "BIAS", "RELU", "BIAS_RELU", "GELU", "GELU_AUX", "BIAS_GELU", "BIAS_GELU_AUX"]
# cuDNN's fused activation (CudnnConvBackendConfig.activation_mode, stream_executor's
# dnn.proto ActivationMode), per output element as the ops it replaces count: ReLU max
# 1, ReLU6 / ReLUX / band pass a clamp 1, ELU select(x > 0, x, expm1(x)) 2 and an expm1,
# leaky ReLU select(x > 0, x, a x) 3, sigmoid / tanh one transcendental, exact GELU
# 0.5 x (1 + erf(x / sqrt 2)) 4 and an erf
CONV_ACTIVATIONS = {
    "kNone": (0, 0),
    "kRelu": (1, 0),
    "kRelu6": (1, 0),
    "kReluX": (1, 0),
    "kElu": (2, 1),
    "kLeakyRelu": (3, 0),
    "kBandPass": (1, 0),  # a clamp to [-X, X]
    "kSigmoid": (0, 1),
    "kTanh": (0, 1),
    "kGeluExact": (4, 1),
}
_CONV_ACTIVATION_NUMBERS = {0: "kNone", 1: "kSigmoid", 2: "kRelu", 3: "kRelu6", 4: "kReluX", 5: "kTanh",
                            6: "kBandPass", 7: "kElu", 8: "kLeakyRelu", 9: "kGeluExact"}


def workspace_index(op) -> int | None:
    """The result tuple element that is a cuBLAS/cuDNN call's workspace (scratch memory,
    live only during the call: not a result): the last element of its tuple result when
    that is a 1-D array of 8-bit integers (XLA's `u8[N]`, `s8[N]` for cuBLASLt). None for
    any other op."""
    if op.name not in CUSTOM_CALL_OPS or len(op.results) != 1 or "call_target_name" not in op.attributes:
        return None
    target = custom_call_target(op)
    if not (target.startswith("__cublas$") or target.startswith("__cudnn$")):
        return None
    try:
        tt = ir.TupleType(op.results[0].type)
    except (ValueError, TypeError):
        return None
    if tt.num_types < 2:
        return None
    last = type_info(tt.get_type(tt.num_types - 1))
    if last.is_tensor and last.rank == 1 and last.dtype in ("ui8", "i8", "si8"):
        return tt.num_types - 1
    return None


def _result_parts(op) -> list[TensorInfo]:
    """The arrays an op returns: its results, a tuple result's elements."""
    parts = []
    for v in op.results:
        try:
            tt = ir.TupleType(v.type)
        except (ValueError, TypeError):
            parts.append(_info(v))
            continue
        for i in range(tt.num_types):
            info = type_info(tt.get_type(i))
            if info.dynamic:
                raise Unsupported(
                    f"dynamic shape {tt.get_type(i)}; run --stablehlo-refine-shapes to make shapes static"
                )
            parts.append(info)
    return parts


def _attr_to_py(attr):
    """A backend_config dictionary attribute (typed-FFI custom calls) as Python values."""
    try:
        d = ir.DictAttr(attr)
        return {d[i].name: _attr_to_py(d[i].attr) for i in range(len(d))}
    except (ValueError, TypeError):
        pass
    try:
        return [_attr_to_py(a) for a in ir.ArrayAttr(attr)]
    except (ValueError, TypeError):
        pass
    for cls, get in ((ir.BoolAttr, lambda a: a.value), (ir.IntegerAttr, lambda a: a.value),
                     (ir.FloatAttr, lambda a: a.value), (ir.StringAttr, lambda a: a.value)):
        try:
            return get(cls(attr))
        except (ValueError, TypeError):
            pass
    return str(attr)


def _library_config(op, key: str, fields: tuple) -> dict:
    """The `key` sub-config of a library call's backend_config (XLA's GpuBackendConfig:
    a JSON string, or a dictionary attribute), or the whole config when it is that message
    itself (older XLA: a GemmBackendConfig / CudnnConvBackendConfig on its own, recognised
    by one of `fields`). Unsupported, with the reason, when it cannot be read."""
    target = custom_call_target(op)
    if "backend_config" not in op.attributes:
        raise Unsupported(f"custom_call target '{target}' has no backend_config (XLA's {key}): its work is unknown")
    attr = op.attributes["backend_config"]
    try:
        text = ir.StringAttr(attr).value
    except (ValueError, TypeError):
        cfg = _attr_to_py(attr)
    else:
        try:
            cfg = parse_config_json(text)
        except InvalidConfigJSON as err:
            raise Unsupported(f"custom_call target '{target}': its {err}, so XLA's {key} cannot be read") from None
    if isinstance(cfg, dict) and isinstance(cfg.get(key), dict):
        return cfg[key]
    if isinstance(cfg, dict) and any(f in cfg for f in fields):
        return cfg
    raise Unsupported(f"custom_call target '{target}': its backend_config has no {key}, so its work is unknown")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_field(value, key: str, target: str) -> int:
    """A backend_config integer (proto3 JSON writes an int64 as a decimal string), never
    below 0; Unsupported for any other JSON type (a boolean, a float, a list ...)."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value.strip()):
        return int(value)
    if _is_int(value) and value >= 0:
        return value
    raise Unsupported(f"custom_call target '{target}': backend_config field {key} = {value!r} is not a count")


def _enum_field(cfg: dict, key: str, default: str, numbers: dict, target: str) -> str:
    """A backend_config enum as its name: a name, or (proto3 JSON allows both) the enum's
    number, looked up in `numbers` (an unknown number: `"<key> <n>"`). Unsupported for a
    boolean, a list, an object ..., which XLA never writes: no guess at the fused op."""
    value = cfg.get(key, default)
    if _is_int(value) or (isinstance(value, str) and re.fullmatch(r"[0-9]+", value)):
        return numbers.get(int(value), f"{key} {int(value)}")
    if isinstance(value, str):
        return value
    raise Unsupported(f"custom_call target '{target}': backend_config field {key} = {value!r} "
                      "is neither an enum name nor its number")


def _number(cfg: dict, key: str, default: float) -> float:
    value = cfg.get(key, default)
    if not isinstance(value, bool):
        try:
            return float(value)  # a JSON number, or a string proto3 JSON allows ("1.5", "NaN")
        except (TypeError, ValueError):
            pass
    raise Unsupported(f"backend_config field {key} = {value!r} is not a number")


def _dims(dnums: dict, key: str, rank: int, target: str) -> list[int]:
    value = dnums.get(key, [])
    if not isinstance(value, list):
        raise Unsupported(f"custom_call target '{target}': dot_dimension_numbers.{key} = {value!r} "
                          "is not a list of dimensions")
    dims = [_int_field(d, f"dot_dimension_numbers.{key}", target) for d in value]
    if any(d < 0 or d >= rank for d in dims) or len(set(dims)) != len(dims):
        raise Unsupported(
            f"custom_call target '{target}': dot_dimension_numbers.{key} {dims} does not fit a rank-{rank} operand"
        )
    return dims


def cublas_gemm_rule(op, env) -> OpCost:
    """A cuBLAS GEMM (`__cublas$gemm`, `__cublas$lt$matmul`, `..$f8`): from its
    backend_config's GemmBackendConfig, `2 x output elements x contracted size` flops as
    XLA's GpuHloCostAnalysis (GetDotFlops of operand 0, the result's first array and
    dot_dimension_numbers; one FMA = 2 flops), plus per output element the elementwise ops
    folded into the call: alpha != 1 a multiply, beta != 0 the add of C (and its multiply
    when beta != 1), the cuBLASLt epilogue (GEMM_EPILOGUES). Bytes: every operand read,
    the result written without its workspace. On the matrix units, as the dot; the GEMM's
    M x N x K x batch goes to kernel formation (`extra["gemm_shape"]`)."""
    target = custom_call_target(op)
    cfg = _library_config(op, "gemm_backend_config", ("dot_dimension_numbers",))
    dnums = cfg.get("dot_dimension_numbers")
    if not isinstance(dnums, dict):
        raise Unsupported(f"custom_call target '{target}': its gemm_backend_config has no dot_dimension_numbers")
    ins = _operands(op)
    if len(ins) < 2:
        raise Unsupported(f"custom_call target '{target}' has {len(ins)} operands, a GEMM needs two")
    lhs, rhs = ins[0], ins[1]
    parts = _result_parts(op)
    ws = workspace_index(op)
    if not parts:
        raise Unsupported(f"custom_call target '{target}' returns no array (an empty tuple): no GEMM result")
    out = parts[0]
    lb = _dims(dnums, "lhs_batch_dimensions", lhs.rank, target)
    lc = _dims(dnums, "lhs_contracting_dimensions", lhs.rank, target)
    rb = _dims(dnums, "rhs_batch_dimensions", rhs.rank, target)
    rc = _dims(dnums, "rhs_contracting_dimensions", rhs.rank, target)
    batch = _prod(lhs.shape[d] for d in lb)
    k = _prod(lhs.shape[d] for d in lc)
    m = _prod(lhs.shape[d] for d in range(lhs.rank) if d not in lb and d not in lc)
    n = _prod(rhs.shape[d] for d in range(rhs.rank) if d not in rb and d not in rc)
    if (len(lb) != len(rb) or batch != _prod(rhs.shape[d] for d in rb) or k != _prod(rhs.shape[d] for d in rc)
            or out.num_elements != batch * m * n):
        raise Unsupported(f"custom_call target '{target}': dot_dimension_numbers {dnums} do not fit operands "
                          f"{list(lhs.shape)} x {list(rhs.shape)} -> {list(out.shape)}")
    per_flops = per_trans = 0
    if _number(cfg, "alpha_real", 1.0) != 1.0 or _number(cfg, "alpha_imag", 0.0) != 0.0:
        per_flops += 1
    beta = _number(cfg, "beta", 0.0)
    if beta != 0.0:
        per_flops += 1 if beta == 1.0 else 2
    epilogue = _enum_field(cfg, "epilogue", "DEFAULT", dict(enumerate(_GEMM_EPILOGUE_NUMBERS)), target)
    extra = {"library_call": "gemm", "target": target}
    if epilogue in GEMM_EPILOGUES:
        f, t = GEMM_EPILOGUES[epilogue]
    else:  # an epilogue of a newer XLA: one elementwise op, said so
        f, t = 1, 0
        extra["unknown_epilogue"] = str(epilogue)
    per_flops += f
    per_trans += t
    dtype = _dot_dtype(lhs, rhs)
    extra["gemm_shape"] = (m, n, k, batch, dtype, None, None, None, 0)
    return OpCost(
        flops=2 * out.num_elements * k + per_flops * out.num_elements,
        transcendentals=per_trans * out.num_elements,
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=sum(p.nbytes for j, p in enumerate(parts) if j != ws),
        unit=MATRIX,
        dtype=dtype,
        extra=extra,
    )


def infer_conv_window(in_size: int, k_size: int, out_size: int) -> tuple[int, int] | None:
    """(stride, padding) of one spatial dimension of a cuDNN convolution from its extents
    alone: out = floor((in + 2 pad - k) / stride) + 1, the smallest stride for which a
    padding 0 <= pad < k fits, the smallest such padding. cuDNN pads symmetrically (XLA's
    ConvPaddingLegalization pads the input explicitly, or slices the output, for anything
    else), and a dilated filter is not told apart (taken as undilated). None: no window
    fits."""
    if in_size < 1 or k_size < 1 or out_size < 1:
        return None
    if out_size == 1:  # one window: any stride past it; the padding that makes it fit
        pad = max(0, (k_size - in_size + 1) // 2)
        return (max(1, in_size + 2 * pad - k_size + 1), pad) if pad < k_size else None
    stride = 1
    while True:
        lo = (out_size - 1) * stride + k_size - in_size  # 2 pad >= lo
        if lo > 2 * (k_size - 1):  # grows with the stride: no padding below k fits
            return None
        pad = max(0, (lo + 1) // 2)
        if 2 * pad <= lo + stride - 1:  # 2 pad <= the last lo that gives this output
            return stride, pad
        stride += 1


# The dimension layouts of XLA GPU's cuDNN calls (their `dim_labels`, which the converter
# drops), tried in this order: NHWC (`b01f_o01i->b01f`, the layout XLA's layout
# assignment gives 16-bit convolutions on tensor cores, and every call of our H100 and
# H200 ResNet steps) and NCHW (`bf01_oi01->bf01`). (input, filter, output) as (batch,
# feature, spatial) / (output feature, input feature, spatial) / (batch, feature, spatial)
# dimension indices, for a rank r.
def _conv_layouts(r: int):
    sp = list(range(1, r - 1))
    yield "b01f_o01i->b01f", (0, r - 1, sp), (0, r - 1, sp), (0, r - 1, sp)
    yield "bf01_oi01->bf01", (0, 1, list(range(2, r))), (0, 1, list(range(2, r))), (0, 1, list(range(2, r)))


def cudnn_conv_problem(target: str, ins: list[TensorInfo], out: TensorInfo) -> dict:
    """The forward convolution a cuDNN call describes (XLA's GetGpuConvConfig: forward
    and fused forward: input = operand 0, filter = operand 1, output = the result; backward
    input: input = the result, output = operand 0; backward filter: filter = the result,
    output = operand 1), its layout (_conv_layouts: the first that fits the shapes) and
    its window (infer_conv_window, per spatial dimension). Unsupported when no layout
    fits."""
    kind = CUDNN_CONV_TARGETS[target]
    if len(ins) < 2:
        raise Unsupported(f"custom_call target '{target}' has {len(ins)} operands, a convolution needs two")
    a, b = ins[0], ins[1]
    x, w, y = (out, b, a) if kind == "backward_input" else (a, out, b) if kind == "backward_filter" else (a, b, out)
    r = x.rank
    if r < 3 or w.rank != r or y.rank != r:
        raise Unsupported(f"custom_call target '{target}': input, filter and output of ranks {x.rank}, {w.rank}, "
                          f"{y.rank}: not a convolution cuDNN runs")
    if any(d < 1 for t in (x, w, y) for d in t.shape):
        raise Unsupported(f"custom_call target '{target}': input {list(x.shape)}, filter {list(w.shape)} and output "
                          f"{list(y.shape)} have a zero extent: an empty convolution, which XLA does not hand cuDNN")
    for labels, (xb, xf, xs), (wo, wi, ws_), (yb, yf, ys) in _conv_layouts(r):
        n, c, o, ci = x.shape[xb], x.shape[xf], w.shape[wo], w.shape[wi]
        if y.shape[yb] != n or y.shape[yf] != o or ci < 1 or c < ci or c % ci or o % (c // ci):
            continue
        window = [infer_conv_window(x.shape[i], w.shape[j], y.shape[k]) for i, j, k in zip(xs, ws_, ys)]
        if any(win is None for win in window):
            continue
        return {"kind": kind, "labels": labels, "x": x, "w": w, "y": y, "batch": n, "in_features": c,
                "out_features": o, "filter_in": ci, "groups": c // ci,
                "spatial": [(x.shape[i], w.shape[j], y.shape[k]) for i, j, k in zip(xs, ws_, ys)],
                "window": window}
    raise Unsupported(f"custom_call target '{target}': input {list(x.shape)}, filter {list(w.shape)} and output "
                      f"{list(y.shape)} fit neither an NHWC (b01f_o01i->b01f) nor an NCHW (bf01_oi01->bf01) "
                      "convolution, and the converter keeps no dim_labels")


_ZERO_LOOK_THROUGH = frozenset({"stablehlo.broadcast_in_dim", "stablehlo.broadcast", "stablehlo.reshape",
                                "stablehlo.convert", "mhlo.bitcast", "mhlo.broadcast_in_dim", "mhlo.reshape",
                                "mhlo.convert", "mhlo.copy"})


def _zero_valued(value, depth: int = 0) -> bool:
    """Is the value all zeros: a zero splat constant, through broadcasts, reshapes,
    converts and the fusions (mhlo.fusion) that compute such a value?"""
    if depth > 8:
        return False
    owner = value.owner
    owner = getattr(owner, "operation", owner)
    if isinstance(owner, ir.Block):  # an argument of a fusion's body: the fusion's operand
        parent = owner.owner
        parent = getattr(parent, "operation", parent)
        if getattr(parent, "name", None) == "mhlo.fusion" and value.arg_number < len(parent.operands):
            return _zero_valued(parent.operands[value.arg_number], depth + 1)
        return False
    if not isinstance(owner, ir.Operation):
        return False
    name = owner.name
    if name in ("stablehlo.constant", "mhlo.constant"):
        try:
            attr = ir.DenseElementsAttr(owner.attributes["value"])
            return attr.is_splat and float(attr.get_splat_value().value) == 0.0
        except (KeyError, ValueError, TypeError, AttributeError):
            return False
    if name in _ZERO_LOOK_THROUGH and owner.operands:
        return _zero_valued(owner.operands[0], depth + 1)
    if name == "mhlo.fusion" and owner.regions and len(owner.regions[0].blocks):
        term = list(owner.regions[0].blocks[0].operations)[-1]
        k = value.result_number
        return k < len(term.operands) and _zero_valued(term.operands[k], depth + 1)
    return False


def cudnn_conv_rule(op, env) -> OpCost:
    """A cuDNN convolution (`__cudnn$convForward`, `$convBackwardInput`,
    `$convBackwardFilter`, `$convBiasActivationForward`): the flops of the equivalent
    stablehlo.convolution, which are those of the forward convolution the call describes
    (cudnn_conv_problem; the input and filter gradients do the same multiply-adds):
    `2 x batch x out_features x (in_features / groups) x valid taps` (taps in padding not
    counted, as XLA's GetConvolutionFlops), plus per output element the elementwise ops
    folded into it from the backend_config's CudnnConvBackendConfig: conv_result_scale !=
    1 a multiply, the bias add of `$convBiasActivationForward` (unless the bias is zero:
    XLA adds a zero bias to fuse a side input alone), a side input (an add, and
    its multiply when side_input_scale != 1), the activation (CONV_ACTIVATIONS). Bytes:
    every operand read, the result written without the workspace. On the matrix units;
    the implicit GEMM of the equivalent convolution goes to kernel formation."""
    target = custom_call_target(op)
    cfg = _library_config(op, "cudnn_conv_backend_config",
                          ("conv_result_scale", "activation_mode", "side_input_scale", "algorithm"))
    ins = _operands(op)
    parts = _result_parts(op)
    ws = workspace_index(op)
    if not parts:
        raise Unsupported(f"custom_call target '{target}' returns no array (an empty tuple): no convolution result")
    out = parts[0]
    p = cudnn_conv_problem(target, ins, out)
    taps = 1
    for (i, k, o), (stride, pad) in zip(p["spatial"], p["window"]):
        taps *= _valid_taps(i, k, o, stride, pad, 1, 1)
    conv_flops = 2 * p["batch"] * p["out_features"] * p["filter_in"] * taps
    per_flops = per_trans = 0
    extra = {"library_call": "conv", "target": target, "conv_window": ",".join(f"{s}/{q}" for s, q in p["window"])}
    if _number(cfg, "conv_result_scale", 1.0) != 1.0:
        per_flops += 1
    if target == "__cudnn$convBiasActivationForward":
        if len(ins) > 2 and not _zero_valued(op.operands[2]):
            per_flops += 1  # the bias (XLA's rewriter adds a zero one to fuse a side input alone)
        side = _number(cfg, "side_input_scale", 0.0)
        if len(ins) > 3 and side != 0.0:
            per_flops += 1 if side == 1.0 else 2
    act = _enum_field(cfg, "activation_mode", "kNone", _CONV_ACTIVATION_NUMBERS, target)
    if act in CONV_ACTIVATIONS:
        f, t = CONV_ACTIVATIONS[act]
    else:
        f, t = 1, 0
        extra["unknown_activation"] = str(act)
    per_flops += f
    per_trans += t
    # the implicit GEMM of the equivalent stablehlo.convolution (kernels.formation._gemm_shape
    # of a plain convolution): M = its output elements / N, N = its output features
    kind, x, w, y = p["kind"], p["x"], p["w"], p["y"]
    if kind == "forward":
        lhs, rhs, n_ = x, w, p["out_features"]
        res_elems = y.num_elements
    elif kind == "backward_input":  # conv(dy, reversed filter) -> dx
        lhs, rhs, n_ = y, w, p["in_features"]
        res_elems = x.num_elements
    else:  # conv(x, dy) -> dW, its output features the filter's
        lhs, rhs, n_ = x, y, p["out_features"]
        res_elems = w.num_elements
    m = res_elems // max(1, n_)
    k = max(1, conv_flops // max(1, 2 * m * n_))
    cpt = conv_kind = channels = None
    act_bytes = 0
    if p["groups"] == 1:
        conv_kind = kind
        act_bytes = lhs.nbytes
        if kind == "forward":
            cpt = channels = p["in_features"]
        elif kind == "backward_input":
            cpt = p["out_features"]
        else:
            channels = p["in_features"]
    dtype = _dot_dtype(lhs, rhs)
    extra["gemm_shape"] = (m, n_, k, 1, dtype, cpt, conv_kind, channels, act_bytes)
    return OpCost(
        flops=conv_flops + per_flops * out.num_elements,
        transcendentals=per_trans * out.num_elements,
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=sum(q.nbytes for j, q in enumerate(parts) if j != ws),
        unit=MATRIX,
        dtype=dtype,
        extra=extra,
    )

HOST_MEMORY_KINDS = frozenset({"pinned_host", "unpinned_host"})


def _placement(op) -> str | None:
    """The memory kind an `annotate_device_placement` puts its value in (JAX's
    `jax.device_put(x, memory_kind=...)` and offloading remat policies)."""
    from .ir import dict_entry

    kind = dict_entry(op, "mhlo.frontend_attributes", "_xla_buffer_placement")
    try:
        return ir.StringAttr(kind).value if kind is not None else None
    except (ValueError, TypeError):
        return None


def _host_placed(value) -> bool:
    owner = value.owner
    owner = getattr(owner, "operation", owner)
    if not isinstance(owner, ir.Operation):
        return False
    if owner.name == "stablehlo.custom_call" and "call_target_name" in owner.attributes:
        target = custom_call_target(owner)
        return target == "MoveToHost" or (target == "annotate_device_placement" and _placement(owner) in HOST_MEMORY_KINDS)
    return False


def device_placement_rule(op, env) -> OpCost:
    """Host offloading: a value placed in host memory (`annotate_device_placement` to
    pinned/unpinned host, XLA's `MoveToHost`) is copied over the host link (PCIe,
    NVLink-C2C), and back when placed on the device again (`MoveToDevice`, or a "device"
    placement of a host-placed value). We do not model the host link: such a transfer is
    marked not costed (its time is not in the step, and reports say so). Any other
    placement changes nothing: free."""
    target = custom_call_target(op)
    nbytes = sum(i.nbytes for i in _operands(op))
    if target == "MoveToHost" or (target == "annotate_device_placement" and _placement(op) in HOST_MEMORY_KINDS):
        raise Unsupported(f"a copy of {nbytes} bytes from device to host memory (host offloading): the host link "
                          "is not modelled, its time is not in the step")
    if target == "MoveToDevice" or (len(op.operands) and _host_placed(op.operands[0])):
        raise Unsupported(f"a copy of {nbytes} bytes from host to device memory (host offloading): the host link "
                          "is not modelled, its time is not in the step")
    return OpCost(unit=NONE)


CUSTOM_CALL_RULES: dict[str, Rule] = {
    "annotate_device_placement": device_placement_rule,
    "MoveToHost": device_placement_rule,
    "MoveToDevice": device_placement_rule,
    "TopK": topk_rule,
    "tpu_custom_call": pallas_tpu_rule,
    "__op$block_scaled_dot": block_scaled_dot_rule,
    "mhlo.topk": topk_rule,
    # a collective (costmodel.collectives.CUSTOM_CALL_COLLECTIVES): its local work is data
    # movement, as stablehlo.all_to_all's; extract-collectives costs the communication
    "ragged_all_to_all": default_rule,
}


# ---------------------------------------------------------------------------
# linear algebra library calls (LAPACK on CPU, cuSOLVER/hipSOLVER on GPU)
# ---------------------------------------------------------------------------
#
# JAX lowers jnp.linalg / jax.scipy.linalg on CPU and GPU to typed-FFI custom calls:
# `lapack_<s|d|c|z><routine>_ffi`, `<cu|hip>solver_<routine>_ffi`, and a few more. XLA's
# cost analysis counts 0 flops for any custom call; these rules count each routine's
# textbook operation count (real flops = multiplications + additions, leading terms, one
# m x n matrix with m >= n unless said; a batch multiplies it) and its operand and result
# bytes:
#   LAPACK Working Note 41, "Installation Guide for LAPACK", appendix C (operation counts
#   of the factorizations): getrf m n^2 - n^3/3, potrf n^3/3, geqrf 2 m n^2 - 2 n^3/3,
#   orgqr 4 m n k - 2 (m + n) k^2 + 4 k^3/3, ormqr (Q from the left, C m x n) 4 m n k -
#   2 n k^2, gehrd 10 n^3/3, sytrd 4 n^3/3;
#   Golub & Van Loan, "Matrix Computations", 4th ed., for the iterative solvers: symmetric
#   eigenproblem (sec. 8.3) 4 n^3/3 for the eigenvalues, 9 n^3 with the eigenvectors;
#   nonsymmetric (Francis QR, sec. 7.5.6: geev, gees) 10 n^3 for the eigenvalues, 25 n^3
#   with Schur vectors or eigenvectors; SVD (Golub-Reinsch, fig. 8.6.1) 4 m n^2 - 4 n^3/3
#   singular values only, 14 m n^2 + 8 n^3 with thin U and V, 4 m^2 n + 8 m n^2 + 9 n^3
#   with full U and V.
# A complex routine counts 4 real flops per complex one (a complex multiply-add is 8 real
# flops, a real one 2). The flops run on the vector units: cuSOLVER's and LAPACK's blocked
# factorizations call FP32/FP64 GEMMs, not tensor-core ones (docs/cost-rules.md).

_LINALG_LAPACK = re.compile(r"^lapack_[sdcz](?P<routine>[a-z0-9]+)_ffi$")
_LINALG_GPU = re.compile(r"^(?:cu|hip)(?:solver|blas|sparse)_(?P<routine>[a-z0-9]+?)(?:_batched)?_ffi$")
_LINALG_HYBRID = re.compile(r"^(?:cu|hip)(?:hybrid_|_)(?P<routine>eig_real|eig_comp|geqp3|lu_pivots_to_permutation)$")


def _ffi_attr(op, name: str):
    """An attribute of a typed-FFI custom call (`mhlo.backend_config = {mode = 86 : ui8,
    ...}`), as a Python bool or int; None when absent."""
    from .ir import dict_entry

    attr = dict_entry(op, "mhlo.backend_config", name)
    if attr is None:
        return None
    try:
        return ir.BoolAttr(attr).value
    except (ValueError, TypeError):
        pass
    try:
        return int(ir.IntegerAttr(attr).value)
    except (ValueError, TypeError):
        return None


def _matrix(info: TensorInfo) -> tuple[int, int, int]:
    """(batch, rows, columns) of a stack of matrices [..., m, n]."""
    if info.rank < 2:
        raise Unsupported(f"expected a matrix operand, got {info.rank} dimension(s)")
    return _prod(info.shape[:-2]), info.shape[-2], info.shape[-1]


def _factorization_flops(routine: str, op) -> float:
    """Flops of one matrix of `routine` (see the comment above for the sources)."""
    _, m, n = _matrix(_info(op.operands[0]))
    lo, hi = min(m, n), max(m, n)
    if routine == "getrf":
        return hi * lo**2 - lo**3 / 3
    if routine == "potrf":
        return n**3 / 3
    if routine in ("geqrf", "geqp3"):
        return 2 * hi * lo**2 - 2 * lo**3 / 3
    if routine in ("orgqr", "ungqr"):
        k = _info(op.operands[1]).shape[-1] if len(op.operands) > 1 else n
        return 4 * m * n * k - 2 * (m + n) * k**2 + 4 * k**3 / 3
    if routine in ("ormqr", "unmqr"):
        k = _info(op.operands[1]).shape[-1]
        _, cm, cn = _matrix(_info(op.operands[2]))
        return 4 * cm * cn * k - 2 * cn * k**2
    if routine == "gehrd":
        return 10 * n**3 / 3
    if routine in ("sytrd", "hetrd"):
        return 4 * n**3 / 3
    if routine in ("syevd", "heevd"):
        mode = _ffi_attr(op, "mode")  # LAPACK: 'V' or 'N'; cuSOLVER's always computes them
        return 4 * n**3 / 3 if mode == ord("N") else 9 * n**3
    if routine in ("geev", "gees", "eig_real", "eig_comp"):
        flags = [_ffi_attr(op, a) for a in ("compute_left", "compute_right", "mode")]
        vectors = any(f == ord("V") or f is True for f in flags) or all(f is None for f in flags)
        return 25 * n**3 if vectors else 10 * n**3
    if routine in ("gesdd", "gesvd", "gesvdj", "gesvdp"):
        mode = _ffi_attr(op, "mode")  # LAPACK: 'A' full, 'S' thin, 'N' none
        compute_uv, full = _ffi_attr(op, "compute_uv"), _ffi_attr(op, "full_matrices")
        if mode == ord("N") or compute_uv is False:
            return 4 * hi * lo**2 - 4 * lo**3 / 3
        if mode == ord("A") or (mode is None and full):
            return 4 * hi**2 * lo + 8 * hi * lo**2 + 9 * lo**3
        return 14 * hi * lo**2 + 8 * lo**3
    raise Unsupported(f"no operation count for the linear algebra routine '{routine}'")


def linalg_routine(target: str) -> str | None:
    """The routine of a linear algebra library call that linalg_rule costs (`getrf`,
    `syevd` ...), None for any other custom call target."""
    m = _LINALG_LAPACK.match(target) or _LINALG_GPU.match(target) or _LINALG_HYBRID.match(target)
    return m.group("routine") if m is not None and m.group("routine") in _LINALG_ROUTINES else None


def linalg_rule(op, env) -> OpCost:
    """A LAPACK / cuSOLVER factorization or solver called by JAX (see above)."""
    routine = linalg_routine(custom_call_target(op))
    if routine is None:
        raise Unsupported(f"custom_call target '{custom_call_target(op)}' is no linear algebra routine we count")
    a = _info(op.operands[0])
    if routine in ("lu_pivots_to_permutation",):
        return OpCost(bytes_read=_bytes_in(op), bytes_written=_bytes_out(op), unit=VECTOR, dtype=a.dtype)
    if routine == "trsm":  # the CPU's triangular_solve: XLA's count for that op
        return triangular_solve_rule(op, env)
    if routine in ("gtsv", "gtsv2"):
        # tridiagonal solve (dl, d, du, b): Gaussian elimination with partial pivoting,
        # about 8 flops per row and right-hand side
        b = _info(op.operands[-1])
        flops = 8 * b.num_elements
    else:
        flops = _matrix(a)[0] * _factorization_flops(routine, op)
    if a.dtype.startswith("complex"):
        flops *= 4
    return OpCost(
        flops=int(round(flops)),
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=a.dtype.removeprefix("complex<").removesuffix(">"),
    )


_LINALG_ROUTINES = frozenset(
    {
        "getrf", "potrf", "geqrf", "geqp3", "orgqr", "ungqr", "ormqr", "unmqr", "gehrd", "sytrd", "hetrd",
        "syevd", "heevd", "geev", "gees", "eig_real", "eig_comp", "gesdd", "gesvd", "gesvdj", "gesvdp",
        "trsm", "gtsv", "gtsv2", "lu_pivots_to_permutation",
    }
)


# ---------------------------------------------------------------------------
# XLA-compiled input (mhlo ops of an optimized HLO module converted back to MLIR)
# ---------------------------------------------------------------------------


# Ops XLA emits as a bitcast of a buffer (the same bytes seen with another shape)
_BUFFER_VIEWS = frozenset({"mhlo.bitcast", "stablehlo.reshape", "mhlo.reshape"})
_DUS_OPS = frozenset({"stablehlo.dynamic_update_slice", "mhlo.dynamic_update_slice"})


def in_place_updates(block) -> dict[int, int]:
    """{result index: parameter index} of a compiled kernel's results that are
    dynamic_update_slices of its own parameters, which XLA GPU emits in place (the
    parameter's buffer aliasing the result; see in_place_update_savings)."""
    ops = list(block.operations)
    out: dict[int, int] = {}
    if not ops:
        return out
    for j, root in enumerate(ops[-1].operands):  # the terminator's operands: the kernel's results
        if not isinstance(root, ir.OpResult) or root.owner.name not in _DUS_OPS:
            continue
        base = root.owner.operands[0]
        while isinstance(base, ir.OpResult) and base.owner.name in _BUFFER_VIEWS and len(list(base.uses)) == 1:
            base = base.owner.operands[0]
        if not isinstance(base, ir.BlockArgument) or base.owner != block or len(list(base.uses)) != 1:
            continue
        if base.arg_number not in out.values():
            out[j] = base.arg_number
    return out


def in_place_update_savings(block) -> tuple[int, int]:
    """(parameter bytes not read, result bytes not written) of a compiled kernel (an
    mhlo.fusion's body, an outlined fused_* computation) that returns dynamic_update_slices
    into its own parameters: XLA GPU emits such a fusion in place, the parameter's buffer
    aliasing the result, so it reads and writes only the update (ir_emitter_unnested /
    CanEmitFusedDynamicUpdateSliceInPlaceForGpu: the updated operand a parameter, perhaps
    through bitcasts, used by nothing else in the fusion). A scan's stacking of one row
    per step, a KV-cache write. (0, 0) when no result is such an update."""
    updates = in_place_updates(block)
    if not updates:
        return 0, 0
    roots = list(list(block.operations)[-1].operands)
    saved_read = saved_written = 0
    for j, k in updates.items():
        root = roots[j]
        saved_read += _info(block.arguments[k]).nbytes
        saved_written += max(0, _info(root).nbytes - _info(root.owner.operands[1]).nbytes)
    return saved_read, saved_written


def mhlo_fusion_rule(op, env) -> OpCost:
    """One kernel the compiler already formed: the flops of its body (each body op is
    annotated), the bytes of its operands and results only (XLA's fusion accounting; a
    dynamic_update_slice of a parameter in place: its update only, in_place_update_savings).
    A fusion whose body holds a dot/convolution runs on the matrix units."""
    per = env.apply_cost(op.regions[0])
    not_read, not_written = in_place_update_savings(op.regions[0].blocks[0]) if len(op.regions[0].blocks) else (0, 0)
    atomic = 0  # a scatter's atomic updates inside the kernel (scatter_rule)
    unit, dtype = VECTOR, _dtype(_results(op))
    for block in op.regions[0].blocks:
        for inner in block.operations:
            inner = inner.operation
            if inner.name in ("stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution"):
                unit = MATRIX
                dtype = _dot_dtype(_info(inner.operands[0]), _info(inner.operands[1]))
            elif inner.name in ("stablehlo.scatter", "mhlo.scatter"):
                atomic += _atomic_elements(inner)
    return OpCost(
        flops=per.flops,
        transcendentals=per.transcendentals,
        bytes_read=_bytes_in(op) - not_read,
        bytes_written=_bytes_out(op) - not_written,
        unit=unit,
        dtype=dtype,
        extra={"atomic_elements": atomic} if atomic else {},
    )


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------

# Ops whose cost the engine assembles from their regions or callees.
REGION_OPS = frozenset(
    {
        "stablehlo.while",
        "stablehlo.case",
        "stablehlo.if",
        "stablehlo.composite",
        "stablehlo.async_start",
        "chlo.scan",
        "func.call",
        "sdy.manual_computation",
        "sdy.named_computation",
    }
)


def region_rule(op, env) -> OpCost:  # pragma: no cover - the engine handles these
    """Placeholder: the engine costs region ops from their regions/callees."""
    raise Unsupported("region op outside the engine")


RULES: dict[str, Rule] = {name: elementwise_rule for name in ELEMENTWISE_OPS}
RULES.update({name: region_rule for name in REGION_OPS})
RULES.update(
    {
        # no data movement at all
        "stablehlo.return": terminator_rule,
        "func.return": terminator_rule,
        "stablehlo.after_all": zero_rule,
        "stablehlo.create_token": zero_rule,
        "stablehlo.get_tuple_element": zero_rule,
        "stablehlo.tuple": zero_rule,
        "stablehlo.get_dimension_size": zero_rule,
        "stablehlo.optimization_barrier": zero_rule,
        "stablehlo.partition_id": zero_rule,
        "stablehlo.replica_id": zero_rule,
        "stablehlo.async_done": zero_rule,
        "sdy.return": zero_rule,
        "sdy.sharding_constraint": zero_rule,
        "sdy.sharding_group": zero_rule,
        "sdy.propagation_barrier": zero_rule,
        "sdy.mesh": zero_rule,
        # materialisation
        "stablehlo.constant": constant_rule,
        "stablehlo.iota": constant_rule,
        "stablehlo.dynamic_iota": constant_rule,
        "chlo.constant": constant_rule,
        "chlo.constant_like": constant_rule,
        # arithmetic
        "stablehlo.dot_general": dot_general_rule,
        "stablehlo.dot": dot_rule,
        "stablehlo.einsum": einsum_rule,
        "stablehlo.unary_einsum": unary_einsum_rule,
        "stablehlo.convolution": convolution_rule,
        "stablehlo.dynamic_conv": dynamic_conv_rule,
        "stablehlo.reduce": reduce_rule,
        "stablehlo.reduce_window": reduce_window_rule,
        "stablehlo.select_and_scatter": select_and_scatter_rule,
        "stablehlo.scatter": scatter_rule,
        "stablehlo.map": map_rule,
        "stablehlo.sort": sort_rule,
        "stablehlo.all_reduce": all_reduce_rule,
        "stablehlo.cross-replica-sum": all_reduce_rule,
        "stablehlo.reduce_scatter": reduce_scatter_rule,
        "stablehlo.rng": rng_rule,
        "stablehlo.rng_bit_generator": rng_bit_generator_rule,
        "stablehlo.fft": fft_rule,
        "stablehlo.cholesky": cholesky_rule,
        "stablehlo.triangular_solve": triangular_solve_rule,
        "stablehlo.batch_norm_inference": batch_norm_inference_rule,
        "stablehlo.batch_norm_training": batch_norm_training_rule,
        "stablehlo.batch_norm_grad": batch_norm_grad_rule,
        "stablehlo.custom_call": custom_call_rule,
        "mhlo.custom_call": custom_call_rule,  # XLA-compiled modules imported as MHLO
        "stablehlo.uniform_quantize": quant_decomposition_rule,
        "stablehlo.uniform_dequantize": quant_decomposition_rule,
        # data movement with XLA's byte conventions
        "stablehlo.gather": gather_rule,
        "stablehlo.dynamic_gather": gather_rule,
        "stablehlo.torch_index_select": gather_rule,
        "stablehlo.slice": slice_rule,
        "stablehlo.dynamic_slice": slice_rule,
        "stablehlo.real_dynamic_slice": slice_rule,
        "stablehlo.dynamic_update_slice": dynamic_update_slice_rule,
        # chlo that XLA keeps as one HLO instruction
        "chlo.erf": transcendental_rule,
        "chlo.tan": transcendental_rule,
        "chlo.top_k": topk_rule,
        "chlo.ragged_dot": ragged_dot_rule,
        "chlo.mulhi": elementwise_rule,  # XLA: one flop per element
        # XLA's HloCostAnalysis::HandleBitcastConvert is an elementwise unary op: one flop
        # per output element (kernel formation still treats it as data movement)
        "stablehlo.bitcast_convert": elementwise_rule,
        # XLA-compiled modules (the published *-opt.mlir workloads)
        "mhlo.fusion": mhlo_fusion_rule,
        "mhlo.bitcast": zero_rule,  # a layout reinterpretation: no kernel, no bytes
        "mhlo.return": terminator_rule,
        "mhlo.get_tuple_element": zero_rule,  # a library call's (result, workspace) in an MHLO import
        "mhlo.copy": default_rule,
    }
)


# Ops that only move data: the default rule, listed explicitly so that an op missing
# from the table is detected (tests/test_rules.py compares it with the dialects).
DATA_MOVEMENT_OPS = frozenset(
    {
        "stablehlo.broadcast",
        "stablehlo.broadcast_in_dim",
        "stablehlo.dynamic_broadcast_in_dim",
        "stablehlo.reshape",
        "stablehlo.dynamic_reshape",
        "stablehlo.transpose",
        "stablehlo.concatenate",
        "stablehlo.pad",
        "stablehlo.dynamic_pad",
        "stablehlo.reverse",
        "stablehlo.set_dimension_size",
        "stablehlo.all_gather",
        "stablehlo.all_to_all",
        "stablehlo.collective_permute",
        "stablehlo.collective_broadcast",
        "stablehlo.send",
        "stablehlo.recv",
        "stablehlo.infeed",
        "stablehlo.outfeed",
    }
)
RULES.update({name: default_rule for name in DATA_MOVEMENT_OPS if name not in RULES})

# Every other CHLO op is a decomposition: costed as XLA's expansion of it.
CHLO_DECOMPOSED_OPS = frozenset(
    {
        "chlo._asin_acos_kernel",
        "chlo.acos",
        "chlo.acosh",
        "chlo.asin",
        "chlo.asinh",
        "chlo.atan",
        "chlo.atanh",
        "chlo.bessel_i1e",
        "chlo.broadcast_add",
        "chlo.broadcast_and",
        "chlo.broadcast_atan2",
        "chlo.broadcast_compare",
        "chlo.broadcast_complex",
        "chlo.broadcast_divide",
        "chlo.broadcast_maximum",
        "chlo.broadcast_minimum",
        "chlo.broadcast_multiply",
        "chlo.broadcast_next_after",
        "chlo.broadcast_or",
        "chlo.broadcast_polygamma",
        "chlo.broadcast_power",
        "chlo.broadcast_remainder",
        "chlo.broadcast_select",
        "chlo.broadcast_shift_left",
        "chlo.broadcast_shift_right_arithmetic",
        "chlo.broadcast_shift_right_logical",
        "chlo.broadcast_subtract",
        "chlo.broadcast_xor",
        "chlo.broadcast_zeta",
        "chlo.conj",
        "chlo.cosh",
        "chlo.digamma",
        "chlo.erf_inv",
        "chlo.erfc",
        "chlo.is_inf",
        "chlo.is_neg_inf",
        "chlo.is_pos_inf",
        "chlo.lgamma",
        "chlo.next_after",
        "chlo.polygamma",
        "chlo.sinh",
        "chlo.square",
        "chlo.zeta",
    }
)
RULES.update({name: chlo_decomposition_rule for name in CHLO_DECOMPOSED_OPS if name not in RULES})


# Rules whose result depends only on the op name and its operand/result types: the
# engine costs each such signature once per run.
for _rule in (default_rule, zero_rule, constant_rule, elementwise_rule):
    _rule.type_only = True
    _rule.attrs_only = False
# Rules whose result depends only on the op name, its operand/result types and its
# attributes: costed once per such signature too.
for _rule in (convolution_rule, dot_general_rule):
    _rule.type_only = False
    _rule.attrs_only = True


def rule_for(name: str) -> Rule | None:
    """The rule for an op name, or None when the table has none (the op is unsupported)."""
    return RULES.get(name)


def rule_name(name: str) -> str | None:
    """The name of the rule function costing op `name` (for docs/op-coverage.md)."""
    rule = RULES.get(name)
    if rule is None:
        return None
    return "engine (regions)" if name in REGION_OPS else rule.__name__

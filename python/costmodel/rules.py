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


# ---------------------------------------------------------------------------
# default and elementwise
# ---------------------------------------------------------------------------


def default_rule(op, env) -> OpCost:
    """No arithmetic: read every operand, write every result."""
    ins, outs = _operands(op), _results(op)
    return OpCost(
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=sum(o.nbytes for o in outs),
        unit=NONE,
        dtype=_dtype(outs or ins),
    )


def zero_rule(op, env) -> OpCost:
    """Bookkeeping with no data movement (return, token ops, shape-only ops)."""
    return OpCost(unit=NONE)


def constant_rule(op, env) -> OpCost:
    """A constant is materialised once: XLA counts its output bytes, no flops."""
    outs = _results(op)
    return OpCost(bytes_written=sum(o.nbytes for o in outs), unit=NONE, dtype=_dtype(outs))


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
        "chlo.erfc",
        "chlo.erf_inv",
        "chlo.lgamma",
        "chlo.digamma",
        "chlo.polygamma",
        "chlo.zeta",
        "chlo.bessel_i1e",
        "chlo.acos",
        "chlo.acosh",
        "chlo.asin",
        "chlo.asinh",
        "chlo.atan",
        "chlo.atanh",
        "chlo.cosh",
        "chlo.sinh",
        "chlo.tan",
        "chlo.next_after",
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
        "stablehlo.bitcast_convert",
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
        "stablehlo.select",
        "stablehlo.clamp",
        # chlo elementwise that are not transcendental
        "chlo.is_inf",
        "chlo.is_neg_inf",
        "chlo.is_pos_inf",
        "chlo.conj",
        "chlo.square",
    }
) | TRANSCENDENTAL_OPS


def elementwise_rule(op, env) -> OpCost:
    """One flop (or one transcendental) per output element; operands read, result written."""
    ins, outs = _operands(op), _results(op)
    n = sum(o.num_elements for o in outs)
    cost = OpCost(
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=sum(o.nbytes for o in outs),
        unit=VECTOR,
        dtype=_dtype(ins or outs),
    )
    if op.name in TRANSCENDENTAL_OPS:
        cost.transcendentals = n
    else:
        cost.flops = n
    return cost


# ---------------------------------------------------------------------------
# dot / convolution
# ---------------------------------------------------------------------------


def _dot_dtype(lhs: TensorInfo, rhs: TensorInfo) -> str:
    """The matrix-unit rate is set by the wider of the two operand types."""
    a, b = lhs.dtype, rhs.dtype
    if a == b:
        return a
    return a if lhs.elem_bytes >= rhs.elem_bytes else b


def dot_general_rule(op, env) -> OpCost:
    lhs, rhs = _info(op.operands[0]), _info(op.operands[1])
    out = _info(op.results[0])
    dims = op.attributes["dot_dimension_numbers"]
    from jaxlib.mlir.dialects import stablehlo as shlo

    dn = shlo.DotDimensionNumbers(dims)
    k = _prod(lhs.shape[d] for d in dn.lhs_contracting_dimensions)
    return OpCost(
        flops=2 * out.num_elements * k,  # one FMA = 2 flops per output element per k
        bytes_read=lhs.nbytes + rhs.nbytes,
        bytes_written=out.nbytes,
        unit=MATRIX,
        dtype=_dot_dtype(lhs, rhs),
    )


def dot_rule(op, env) -> OpCost:
    lhs, rhs = _info(op.operands[0]), _info(op.operands[1])
    out = _info(op.results[0])
    k = lhs.shape[-1] if lhs.rank >= 1 else 1
    return OpCost(
        flops=2 * out.num_elements * k,
        bytes_read=lhs.nbytes + rhs.nbytes,
        bytes_written=out.nbytes,
        unit=MATRIX,
        dtype=_dot_dtype(lhs, rhs),
    )


def _valid_taps(in_size: int, k_size: int, out_size: int, stride: int, pad_lo: int, lhs_dil: int, rhs_dil: int) -> int:
    """Number of (output position, kernel tap) pairs that read a real input element.

    Same counting as XLA's GetConvolutionFlops: taps that land in padding or in holes
    of a dilated input are not counted.
    """
    dilated_in = (in_size - 1) * lhs_dil + 1 if in_size > 0 else 0
    count = 0
    for o in range(out_size):
        base = o * stride - pad_lo
        for k in range(k_size):
            pos = base + k * rhs_dil
            if 0 <= pos < dilated_in and pos % lhs_dil == 0:
                count += 1
    return count


def convolution_rule(op, env) -> OpCost:
    from jaxlib.mlir.dialects import stablehlo as shlo

    lhs, rhs = _info(op.operands[0]), _info(op.operands[1])
    out = _info(op.results[0])
    dn = shlo.ConvDimensionNumbers(op.attributes["dimension_numbers"])
    nsp = len(dn.input_spatial_dimensions)
    strides = _i64_list(op, "window_strides") or [1] * nsp
    lhs_dil = _i64_list(op, "lhs_dilation") or [1] * nsp
    rhs_dil = _i64_list(op, "rhs_dilation") or [1] * nsp
    padding = _i64_list(op, "padding") or [0] * (2 * nsp)
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
    batch = out.shape[dn.output_batch_dimension]
    # Each output feature reads in_features / feature_group_count input features.
    in_per_group = in_features // fgc if fgc else in_features
    macs = batch * out_features * in_per_group * taps
    # batch_group_count: the output batch is already lhs batch / bgc; nothing more.
    del bgc
    return OpCost(
        flops=2 * macs,  # one FMA = 2 flops
        bytes_read=lhs.nbytes + rhs.nbytes,
        bytes_written=out.nbytes,
        unit=MATRIX,
        dtype=_dot_dtype(lhs, rhs),
    )


# ---------------------------------------------------------------------------
# reductions and applied computations
# ---------------------------------------------------------------------------


def reduce_rule(op, env) -> OpCost:
    """(input elements - output elements) applications of the reducer (XLA)."""
    n_inputs = len(op.operands) // 2
    ins = [_info(v) for v in op.operands[:n_inputs]]
    outs = _results(op)
    per = env.apply_cost(op.regions[0])
    applications = ins[0].num_elements - outs[0].num_elements
    return OpCost(
        flops=per.flops * applications,
        transcendentals=per.transcendentals * applications,
        bytes_read=_bytes_in(op),
        bytes_written=sum(o.nbytes for o in outs),
        unit=VECTOR,
        dtype=ins[0].dtype,
    )


def reduce_window_rule(op, env) -> OpCost:
    """(window elements - 1) applications per output element (XLA)."""
    n_inputs = len(op.operands) // 2
    ins = [_info(v) for v in op.operands[:n_inputs]]
    outs = _results(op)
    window = _prod(_i64_list(op, "window_dimensions") or [1])
    per = env.apply_cost(op.regions[0])
    applications = outs[0].num_elements * (window - 1)
    return OpCost(
        flops=per.flops * applications,
        transcendentals=per.transcendentals * applications,
        bytes_read=_bytes_in(op),
        bytes_written=sum(o.nbytes for o in outs),
        unit=VECTOR,
        dtype=ins[0].dtype,
    )


def select_and_scatter_rule(op, env) -> OpCost:
    """Per source element: window select applications + one scatter application (XLA)."""
    operand, source = _info(op.operands[0]), _info(op.operands[1])
    window = _prod(_i64_list(op, "window_dimensions") or [1])
    select = env.apply_cost(op.regions[0])
    scatter = env.apply_cost(op.regions[1])
    n = source.num_elements
    return OpCost(
        flops=n * window * select.flops + n * scatter.flops,
        transcendentals=n * window * select.transcendentals + n * scatter.transcendentals,
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=operand.dtype,
    )


def scatter_rule(op, env) -> OpCost:
    """One update-computation application per update element; indices and updates read."""
    n_inputs = (len(op.operands) - 1) // 2
    updates = [_info(v) for v in op.operands[n_inputs + 1 :]]
    per = env.apply_cost(op.regions[0])
    n = updates[0].num_elements
    return OpCost(
        flops=per.flops * n,
        transcendentals=per.transcendentals * n,
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=updates[0].dtype,
    )


def map_rule(op, env) -> OpCost:
    outs = _results(op)
    per = env.apply_cost(op.regions[0])
    n = outs[0].num_elements
    return OpCost(
        flops=per.flops * n,
        transcendentals=per.transcendentals * n,
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=outs[0].dtype,
    )


def sort_rule(op, env) -> OpCost:
    """n log2 n comparator applications along the sort dimension, per slice."""
    ins = _operands(op)
    dim = _int_attr(op, "dimension", -1)
    shape = ins[0].shape
    if dim < 0:
        dim += len(shape)
    n = shape[dim] if shape else 1
    slices = ins[0].num_elements // n if n else 0
    per = env.apply_cost(op.regions[0])
    comparisons = slices * n * (math.ceil(math.log2(n)) if n > 1 else 0)
    return OpCost(
        flops=per.flops * comparisons,
        transcendentals=per.transcendentals * comparisons,
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=ins[0].dtype,
    )


def all_reduce_rule(op, env) -> OpCost:
    """Local reduction work only (communication is costed by extract-collectives)."""
    outs = _results(op)
    per = env.apply_cost(op.regions[0]) if op.regions and len(op.regions[0].blocks) else OpCost()
    n = sum(o.num_elements for o in outs)
    return OpCost(
        flops=per.flops * n,
        transcendentals=per.transcendentals * n,
        bytes_read=_bytes_in(op),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=_dtype(outs),
    )


# ---------------------------------------------------------------------------
# custom calls
# ---------------------------------------------------------------------------

ZERO_COST_CUSTOM_CALLS = frozenset(
    {
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "MoveToHost",
        "MoveToDevice",
        "annotate_device_placement",
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
    }
)


def custom_call_target(op) -> str:
    return ir.StringAttr(op.attributes["call_target_name"]).value


def custom_call_rule(op, env) -> OpCost:
    target = custom_call_target(op)
    if target in ZERO_COST_CUSTOM_CALLS:
        return OpCost(unit=NONE)
    if target in CUSTOM_CALL_RULES:
        return CUSTOM_CALL_RULES[target](op, env)
    raise Unsupported(f"custom_call target '{target}' has no cost rule")


def topk_rule(op, env) -> OpCost:
    """TopK as XLA's sort-based expansion: n log2 n comparisons per row."""
    ins = _operands(op)
    x = ins[0]
    n = x.shape[-1] if x.shape else 1
    rows = x.num_elements // n if n else 0
    comparisons = rows * n * (math.ceil(math.log2(n)) if n > 1 else 0)
    return OpCost(
        flops=comparisons,
        bytes_read=sum(i.nbytes for i in ins),
        bytes_written=_bytes_out(op),
        unit=VECTOR,
        dtype=x.dtype,
    )


CUSTOM_CALL_RULES: dict[str, Rule] = {
    "TopK": topk_rule,
    "mhlo.topk": topk_rule,
}


# ---------------------------------------------------------------------------
# the table
# ---------------------------------------------------------------------------

# Ops whose cost the engine assembles from their regions.
REGION_OPS = frozenset(
    {
        "stablehlo.while",
        "stablehlo.case",
        "stablehlo.if",
        "stablehlo.composite",
        "func.call",
        "sdy.manual_computation",
    }
)

RULES: dict[str, Rule] = {name: elementwise_rule for name in ELEMENTWISE_OPS}
RULES.update(
    {
        # no data movement at all
        "stablehlo.return": zero_rule,
        "func.return": zero_rule,
        "stablehlo.after_all": zero_rule,
        "stablehlo.create_token": zero_rule,
        "stablehlo.get_tuple_element": zero_rule,
        "stablehlo.tuple": zero_rule,
        "stablehlo.get_dimension_size": zero_rule,
        "stablehlo.optimization_barrier": zero_rule,
        "stablehlo.partition_id": zero_rule,
        "stablehlo.replica_id": zero_rule,
        "sdy.return": zero_rule,
        "sdy.sharding_constraint": zero_rule,
        "sdy.sharding_group": zero_rule,
        "sdy.propagation_barrier": zero_rule,
        "sdy.named_computation": zero_rule,
        "sdy.mesh": zero_rule,
        # materialisation
        "stablehlo.constant": constant_rule,
        "stablehlo.iota": constant_rule,
        # arithmetic
        "stablehlo.dot_general": dot_general_rule,
        "stablehlo.dot": dot_rule,
        "stablehlo.convolution": convolution_rule,
        "stablehlo.reduce": reduce_rule,
        "stablehlo.reduce_window": reduce_window_rule,
        "stablehlo.select_and_scatter": select_and_scatter_rule,
        "stablehlo.scatter": scatter_rule,
        "stablehlo.map": map_rule,
        "stablehlo.sort": sort_rule,
        "stablehlo.all_reduce": all_reduce_rule,
        "stablehlo.reduce_scatter": all_reduce_rule,
        "stablehlo.custom_call": custom_call_rule,
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
        "stablehlo.slice",
        "stablehlo.dynamic_slice",
        "stablehlo.dynamic_update_slice",
        "stablehlo.concatenate",
        "stablehlo.pad",
        "stablehlo.dynamic_pad",
        "stablehlo.reverse",
        "stablehlo.gather",
        "stablehlo.dynamic_gather",
        "stablehlo.dynamic_iota",
        "stablehlo.real_dynamic_slice",
        "stablehlo.all_gather",
        "stablehlo.all_to_all",
        "stablehlo.collective_permute",
        "stablehlo.collective_broadcast",
        "stablehlo.send",
        "stablehlo.recv",
        "stablehlo.infeed",
        "stablehlo.outfeed",
        "stablehlo.uniform_quantize",
        "stablehlo.uniform_dequantize",
    }
)
RULES.update({name: default_rule for name in DATA_MOVEMENT_OPS if name not in RULES})


def rule_for(name: str) -> Rule | None:
    """The rule for an op name, or None when the table has none (the op is unsupported)."""
    return RULES.get(name)

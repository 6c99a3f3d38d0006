"""Features of one kernel (costmodel.kernels.Kernel) for the learned cost model.

    feats = kernel_features(kernel, spec)   # dict name -> float, every name of FEATURE_NAMES
    vector = [feats[n] for n in FEATURE_NAMES]
    tokens = token_sequence(kernel)        # op names in program order (sequence models)

Groups (Das and Mannarswamy's high-level-MLIR features, plus what the kernel formation
knows):
- kind of kernel (loop, input, gemm, conv, custom, fusion), number of ops;
- op histogram: per op class and for the common ops one by one;
- shapes and element types: output elements, largest rank, bytes per element of the
  root, float/bf16/f16/int flags;
- work: flops, transcendentals, matrix and vector flops, bytes read/written
  (log1p of each), arithmetic intensity; the roofline terms of the kernel on `spec`
  (the CPU it was measured on: peaks and bandwidth), log ns;
- dot/conv: M, N, K, batch of the GEMM (log2), the convolution's window, strides,
  feature groups, padding, its layout (the positions of batch/feature dimensions of
  input and kernel; whether input/kernel/output keep their features minor), feature
  counts, input and output spatial sizes;
  which dimensions a dot contracts (minor/major, positions), its operand width;
- reductions: reduced extent, whether the minor dimension is reduced; transposes:
  whether the minor dimension moves; sort/top-k length and rows x length^2 (IREE's CPU
  sort is a quadratic loop nest); fft/gather/scatter sizes.

Only the kernel's ops are read (no measurement, no compiler): prediction runs nothing.
"""

from __future__ import annotations

import math

from ..kernels.formation import (
    COLLECTIVE,
    CONV,
    ELEMENTWISE,
    FREE,
    GEMM,
    MOVEMENT,
    OPAQUE,
    REDUCE,
    op_class,
)
from ..rules import MATRIX, TRANSCENDENTAL_OPS
from ..shapes import type_info

__all__ = ["FEATURE_NAMES", "kernel_features", "token_sequence", "SpecNumbers"]

KINDS = ("loop", "input", "gemm", "conv", "custom", "fusion")
CLASSES = (FREE, ELEMENTWISE, MOVEMENT, REDUCE, GEMM, CONV, OPAQUE, COLLECTIVE)
COMMON_OPS = (
    "add",
    "subtract",
    "multiply",
    "divide",
    "maximum",
    "minimum",
    "exponential",
    "log",
    "tanh",
    "logistic",
    "rsqrt",
    "sqrt",
    "power",
    "negate",
    "abs",
    "select",
    "compare",
    "convert",
    "broadcast_in_dim",
    "transpose",
    "reshape",
    "reduce",
    "dot_general",
    "convolution",
    "gather",
    "scatter",
    "sort",
    "fft",
    "reduce_window",
    "concatenate",
    "pad",
    "slice",
    "dynamic_slice",
    "dynamic_update_slice",
    "iota",
    "reverse",
    "constant",
    "sine",
    "cosine",
    "and",
    "or",
    "clamp",
    "floor",
    "round_nearest_even",
    "erf",
)

FEATURE_NAMES: tuple[str, ...] = (
    *(f"kind_{k}" for k in KINDS),
    "n_ops",
    *(f"n_class_{c}" for c in CLASSES),
    "n_transcendental_ops",
    *(f"n_op_{o}" for o in COMMON_OPS),
    "n_op_other",
    "log_out_elems",
    "max_rank",
    "root_elem_bytes",
    "dtype_float",
    "dtype_bf16_f16",
    "dtype_int",
    "dtype_complex",
    "log_flops",
    "log_transcendentals",
    "log_matrix_flops",
    "log_vector_flops",
    "log_bytes_read",
    "log_bytes_written",
    "log_intensity",
    "log_compute_ns",
    "log_memory_ns",
    "log_roofline_ns",
    "gemm_log_m",
    "gemm_log_n",
    "gemm_log_k",
    "gemm_log_batch",
    "gemm_small_side",
    "dot_lhs_contract_minor",
    "dot_rhs_contract_major",
    "dot_lhs_contract_pos",
    "dot_rhs_contract_pos",
    "dot_operand_bytes",
    "conv_window",
    "conv_stride",
    "conv_groups_log",
    "conv_depthwise",
    "conv_input_channels_last",
    "conv_kernel_out_minor",
    "conv_output_channels_last",
    "conv_log_in_spatial",
    "conv_input_feature_dim",
    "conv_input_batch_dim",
    "conv_kernel_input_dim",
    "conv_kernel_output_dim",
    "conv_log_in_features",
    "conv_log_out_features",
    "conv_log_out_spatial",
    "conv_padding",
    "reduce_log_extent",
    "reduce_minor",
    "reduce_log_out",
    "transpose_minor_moved",
    "sort_log_len",
    "sort_log_pairs",
    "fft_log_len",
    "gather_log_indices",
    "scatter_log_updates",
    "window_log_size",
    "n_inputs_log",
)


class SpecNumbers:
    """The few numbers of a hardware spec the features use (also stored in a model)."""

    def __init__(self, matrix_f32_TFLOPS: float, vector_f32_TFLOPS: float, memory_bandwidth_GBps: float, name: str = ""):
        self.matrix = float(matrix_f32_TFLOPS)
        self.vector = float(vector_f32_TFLOPS)
        self.bandwidth = float(memory_bandwidth_GBps)
        self.name = name

    @classmethod
    def of(cls, hardware) -> "SpecNumbers":
        return cls(hardware.peak_TFLOPS("matrix", "f32"), hardware.peak_TFLOPS("vector", "f32"), hardware.memory_bandwidth_GBps, hardware.name)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "matrix_f32_TFLOPS": self.matrix,
            "vector_f32_TFLOPS": self.vector,
            "memory_bandwidth_GBps": self.bandwidth,
        }

    @classmethod
    def from_json(cls, d: dict) -> "SpecNumbers":
        return cls(d["matrix_f32_TFLOPS"], d["vector_f32_TFLOPS"], d["memory_bandwidth_GBps"], d.get("name", ""))


def _log(x: float) -> float:
    return math.log(1.0 + max(0.0, float(x)))


def _log2(x: float) -> float:
    return math.log2(max(1.0, float(x)))


def _short(name: str) -> str:
    return name.split(".", 1)[1] if "." in name else name


def token_sequence(kernel) -> list[str]:
    """The kernel's op names (without dialect) in program order, copies included."""
    pairs = list(zip(kernel.node_ids, kernel.ops)) + list(zip(kernel.duplicated_ids, kernel.duplicated))
    pairs.sort(key=lambda p: p[0])
    return [_short(op.name) for _, op in pairs]


def kernel_features(kernel, spec: SpecNumbers) -> dict[str, float]:
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    if kernel.kind in KINDS:
        f[f"kind_{kernel.kind}"] = 1.0
    ops = list(kernel.ops) + list(kernel.duplicated)
    f["n_ops"] = float(len(ops))
    common = set(COMMON_OPS)
    max_rank = 0
    for op in ops:
        name = op.name
        f[f"n_class_{op_class(name)}"] += 1.0
        if name in TRANSCENDENTAL_OPS:
            f["n_transcendental_ops"] += 1.0
        short = _short(name)
        if short in common:
            f[f"n_op_{short}"] += 1.0
        else:
            f["n_op_other"] += 1.0
        for v in list(op.results) + list(op.operands):
            info = type_info(v.type)
            if info.is_tensor:
                max_rank = max(max_rank, info.rank)
    f["max_rank"] = float(max_rank)
    root = kernel.root
    out_elems = 0
    if root is not None and len(root.results):
        rinfo = type_info(root.results[0].type)
        out_elems = sum(type_info(r.type).num_elements for r in root.results)
        dt = rinfo.dtype
        f["root_elem_bytes"] = float(rinfo.elem_bytes)
        f["dtype_complex"] = float(dt.startswith("complex"))
        f["dtype_float"] = float(dt.startswith(("f", "bf")) or dt.startswith("complex"))
        f["dtype_bf16_f16"] = float(dt in ("bf16", "f16"))
        f["dtype_int"] = float(dt.startswith(("i", "ui", "si")))
    f["log_out_elems"] = _log(out_elems)

    matrix = sum(w for (u, _), w in kernel.flops_by_unit.items() if u == MATRIX)
    vector = sum(w for (u, _), w in kernel.flops_by_unit.items() if u != MATRIX)
    nbytes = kernel.bytes_read + kernel.bytes_written
    f["log_flops"] = _log(kernel.flops)
    f["log_transcendentals"] = _log(kernel.transcendentals)
    f["log_matrix_flops"] = _log(matrix)
    f["log_vector_flops"] = _log(vector)
    f["log_bytes_read"] = _log(kernel.bytes_read)
    f["log_bytes_written"] = _log(kernel.bytes_written)
    f["log_intensity"] = _log((kernel.flops + kernel.transcendentals) / max(1, nbytes))
    compute_ns = matrix / (spec.matrix * 1e3) + vector / (spec.vector * 1e3)
    memory_ns = nbytes / spec.bandwidth
    f["log_compute_ns"] = _log(compute_ns)
    f["log_memory_ns"] = _log(memory_ns)
    f["log_roofline_ns"] = _log(max(compute_ns, memory_ns))

    if kernel.gemm is not None:
        g = kernel.gemm
        f["gemm_log_m"] = _log2(g.m)
        f["gemm_log_n"] = _log2(g.n)
        f["gemm_log_k"] = _log2(g.k)
        f["gemm_log_batch"] = _log2(g.batch)
        f["gemm_small_side"] = _log2(min(g.m, g.n, g.k))
    inputs = set()
    for op in ops:
        _op_details(op, f)
        for v in op.operands:
            inputs.add(v)
    f["n_inputs_log"] = _log(len(inputs))
    return f


def _i64s(attr) -> list[int]:
    from ..ir import ir

    try:
        return list(ir.DenseI64ArrayAttr(attr))
    except (TypeError, ValueError):
        try:
            return [int(x) for x in ir.DenseIntElementsAttr(attr)]
        except (TypeError, ValueError):
            return []


def _op_details(op, f: dict) -> None:
    name = op.name
    attrs = op.attributes
    try:
        if name == "stablehlo.dot_general":
            from jaxlib.mlir.dialects import stablehlo as shlo

            dn = shlo.DotDimensionNumbers(attrs["dot_dimension_numbers"])
            lhs = type_info(op.operands[0].type)
            rhs = type_info(op.operands[1].type)
            lc = list(dn.lhs_contracting_dimensions)
            rc = list(dn.rhs_contracting_dimensions)
            f["dot_lhs_contract_minor"] = float(bool(lc) and lc[-1] == lhs.rank - 1)
            rfree = [d for d in range(rhs.rank) if d not in rc and d not in dn.rhs_batching_dimensions]
            f["dot_rhs_contract_major"] = float(bool(rc) and bool(rfree) and max(rc) < min(rfree))
            f["dot_lhs_contract_pos"] = float(lc[-1]) if lc else -1.0
            f["dot_rhs_contract_pos"] = float(rc[-1]) if rc else -1.0
            f["dot_operand_bytes"] = float(lhs.elem_bytes)
        elif name == "stablehlo.convolution":
            from jaxlib.mlir.dialects import stablehlo as shlo

            dn = shlo.ConvDimensionNumbers(attrs["dimension_numbers"])
            x = type_info(op.operands[0].type)
            w = type_info(op.operands[1].type)
            out = type_info(op.results[0].type)
            window = math.prod(w.shape[d] for d in dn.kernel_spatial_dimensions)
            strides = _i64s(attrs["window_strides"]) if "window_strides" in attrs else []
            groups = int(attrs["feature_group_count"].value) if "feature_group_count" in attrs else 1
            f["conv_window"] = float(window)
            f["conv_stride"] = float(math.prod(strides) if strides else 1)
            f["conv_groups_log"] = _log2(groups)
            f["conv_depthwise"] = float(groups > 1 and groups == x.shape[dn.input_feature_dimension])
            f["conv_input_channels_last"] = float(dn.input_feature_dimension == x.rank - 1)
            f["conv_kernel_out_minor"] = float(dn.kernel_output_feature_dimension == w.rank - 1)
            f["conv_output_channels_last"] = float(dn.output_feature_dimension == out.rank - 1)
            f["conv_log_in_spatial"] = _log2(math.prod(x.shape[d] for d in dn.input_spatial_dimensions))
            f["conv_input_feature_dim"] = float(dn.input_feature_dimension)
            f["conv_input_batch_dim"] = float(dn.input_batch_dimension)
            f["conv_kernel_input_dim"] = float(dn.kernel_input_feature_dimension)
            f["conv_kernel_output_dim"] = float(dn.kernel_output_feature_dimension)
            f["conv_log_in_features"] = _log2(x.shape[dn.input_feature_dimension])
            f["conv_log_out_features"] = _log2(out.shape[dn.output_feature_dimension])
            f["conv_log_out_spatial"] = _log2(math.prod(out.shape[d] for d in dn.output_spatial_dimensions))
            pads = _i64s(attrs["padding"]) if "padding" in attrs else []
            f["conv_padding"] = float(sum(pads))
        elif name == "stablehlo.reduce":
            x = type_info(op.operands[0].type)
            dims = _i64s(attrs["dimensions"])
            extent = math.prod(x.shape[d] for d in dims) if dims else 1
            f["reduce_log_extent"] = max(f["reduce_log_extent"], _log2(extent))
            f["reduce_minor"] = max(f["reduce_minor"], float((x.rank - 1) in dims))
            f["reduce_log_out"] = max(f["reduce_log_out"], _log2(type_info(op.results[0].type).num_elements))
        elif name == "stablehlo.transpose":
            perm = _i64s(attrs["permutation"])
            if perm:
                f["transpose_minor_moved"] = max(f["transpose_minor_moved"], float(perm[-1] != len(perm) - 1))
        elif name in ("stablehlo.sort", "chlo.top_k"):
            x = type_info(op.operands[0].type)
            dim = int(attrs["dimension"].value) if "dimension" in attrs else x.rank - 1
            n = x.shape[dim] if x.rank else 1
            rows = x.num_elements // max(1, n)
            f["sort_log_len"] = max(f["sort_log_len"], _log2(n))
            # compared pairs of a quadratic sort: IREE lowers iree_linalg_ext.sort to two
            # nested loops over the sorted dimension (a bubble sort; LinalgExt's
            # convert-to-loops), and chlo.top_k to a sort of the whole row
            f["sort_log_pairs"] = max(f["sort_log_pairs"], _log2(rows * n * n))
        elif name == "stablehlo.fft":
            lengths = _i64s(attrs["fft_length"])
            f["fft_log_len"] = max(f["fft_log_len"], _log2(math.prod(lengths) if lengths else 1))
        elif name == "stablehlo.gather":
            f["gather_log_indices"] = max(f["gather_log_indices"], _log2(type_info(op.operands[1].type).num_elements))
        elif name == "stablehlo.scatter":
            f["scatter_log_updates"] = max(f["scatter_log_updates"], _log2(type_info(op.operands[-1].type).num_elements))
        elif name == "stablehlo.reduce_window":
            dims = _i64s(attrs["window_dimensions"])
            f["window_log_size"] = max(f["window_log_size"], _log2(math.prod(dims) if dims else 1))
    except (KeyError, ValueError, TypeError, AttributeError, IndexError):
        return  # unusual attributes: those features stay 0

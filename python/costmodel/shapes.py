"""Tensor shapes, element types and byte sizes, cached per MLIR type.

Byte sizes follow XLA's conventions: `i1` (pred) takes one byte per element, sub-byte
types (i4, f4E2M1FN, ...) are counted unpacked at one byte per element, complex<fN> is
two fN, `index` is 8 bytes, `!stablehlo.token` is 0 bytes, tuples add their members.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .ir import ir

__all__ = ["TensorInfo", "type_info", "dtype_name", "value_bytes", "packed_nbytes", "DYNAMIC"]

DYNAMIC = -1

_FLOAT_BITS = {
    "f16": 16,
    "bf16": 16,
    "f32": 32,
    "f64": 64,
    "tf32": 32,
    "f80": 80,
    "f128": 128,
}
_INT_RE = re.compile(r"^(?:u|s)?i(\d+)$")


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """What the cost rules need to know about one SSA value's type."""

    shape: tuple[int, ...]  # DYNAMIC (-1) for dynamic dims
    dtype: str  # element type as printed: f32, bf16, i1, ui8, complex<f32>, ...
    elem_bytes: int  # bytes per element (XLA convention, see module doc)
    num_elements: int  # 0 when dynamic
    nbytes: int  # num_elements * elem_bytes (tuple: the sum), 0 when dynamic
    dynamic: bool = False
    is_tensor: bool = True

    @property
    def rank(self) -> int:
        return len(self.shape)


def _elem_bits(dtype: str) -> int:
    if dtype in _FLOAT_BITS:
        return _FLOAT_BITS[dtype]
    if dtype.startswith("f8"):
        return 8
    if dtype.startswith("f6"):
        return 6
    if dtype.startswith("f4"):
        return 4
    m = _INT_RE.match(dtype)
    if m:
        return int(m.group(1))
    if dtype == "index":
        return 64
    if dtype.startswith("complex<") and dtype.endswith(">"):
        return 2 * _elem_bits(dtype[len("complex<") : -1])
    m = re.match(r"^!quant\.uniform<([a-z0-9]+)", dtype)
    if m:
        return _elem_bits(m.group(1))
    raise ValueError(f"unknown element type '{dtype}'")


def elem_bytes_of(dtype: str) -> int:
    """Bytes per element; sub-byte types and i1 count as one byte (XLA)."""
    bits = _elem_bits(dtype)
    return max(1, (bits + 7) // 8)


def packed_nbytes(info: "TensorInfo") -> int:
    """The bytes a buffer of this type takes in memory: sub-byte elements (i4, u2,
    f4E2M1FN ...) packed, as XLA's buffer assignment packs them (its memory_analysis of
    s4[4096,4096] is 8 MiB), where `nbytes` counts one byte per element as XLA's cost
    analysis of the unoptimized module does. i1 (pred) stays one byte per element."""
    if not info.is_tensor or info.dtype == "i1" or info.elem_bytes != 1:
        return info.nbytes
    try:
        bits = _elem_bits(info.dtype)
    except ValueError:
        return info.nbytes
    return info.nbytes if bits >= 8 else -(-info.num_elements * bits // 8)


def dtype_name(t: ir.Type) -> str:
    return str(t)


# Keyed by ir.Type, which keeps its context alive: make_context() clears it (through
# clear_type_cache), or every context a long-lived process made would stay in memory
# (about 1 MB each; the fuzzer's thousands of runs grew by gigabytes).
_CACHE: dict = {}


def clear_type_cache() -> None:
    """Forget the cached TensorInfo of every type (and so the contexts they hold)."""
    _CACHE.clear()


def type_info(t: ir.Type) -> TensorInfo:
    """TensorInfo for a tensor/token/tuple type (cached by type)."""
    try:
        return _CACHE[t]
    except KeyError:
        pass
    except TypeError:  # unhashable in some bindings: fall back on its text
        return _compute(t)
    info = _compute(t)
    _CACHE[t] = info
    return info


def _compute(t: ir.Type) -> TensorInfo:
    tid = t.typeid
    if tid == ir.RankedTensorType.static_typeid:
        rt = ir.RankedTensorType(t)
        dtype = str(rt.element_type)
        shape = tuple(DYNAMIC if rt.is_dynamic_dim(i) else d for i, d in enumerate(rt.shape))
        eb = elem_bytes_of(dtype)
        if DYNAMIC in shape:
            return TensorInfo(shape, dtype, eb, 0, 0, dynamic=True)
        n = 1
        for d in shape:
            n *= d
        return TensorInfo(shape, dtype, eb, n, n * eb)
    if tid == ir.UnrankedTensorType.static_typeid:
        dtype = str(ir.UnrankedTensorType(t).element_type)
        return TensorInfo((), dtype, elem_bytes_of(dtype), 0, 0, dynamic=True)
    if tid == ir.TupleType.static_typeid:
        tt = ir.TupleType(t)
        members = [type_info(tt.get_type(i)) for i in range(tt.num_types)]
        dynamic = any(m.dynamic for m in members)
        nbytes = sum(m.nbytes for m in members)
        return TensorInfo((), "tuple", 0, 0, nbytes, dynamic=dynamic, is_tensor=False)
    text = str(t)
    if text == "!stablehlo.token" or text.endswith(".token"):
        return TensorInfo((), "token", 0, 0, 0, is_tensor=False)
    # Scalars of builtin types (index, i32, f32 ... in non-tensor positions).
    try:
        eb = elem_bytes_of(text)
    except ValueError:
        return TensorInfo((), text, 0, 0, 0, is_tensor=False)
    return TensorInfo((), text, eb, 1, eb, is_tensor=False)


def value_bytes(values) -> int:
    return sum(type_info(v.type).nbytes for v in values)

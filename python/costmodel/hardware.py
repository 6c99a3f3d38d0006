"""Hardware specs: JSON data files with unit-suffixed keys, validated exactly.

A spec file looks like

    {
      "name": "h100-sxm",
      "description": "NVIDIA H100 SXM5 80GB",
      "memory_bandwidth_GBps": {"value": 3350, "source": "NVIDIA H100 datasheet"},
      "memory_capacity_GiB":   {"value": 80,   "source": "NVIDIA H100 datasheet"},
      "matrix_peak_TFLOPS": {"bf16": {"value": 989, "source": "..."}, "f32": ...},
      "vector_peak_TFLOPS": {"f32": {"value": 67, "source": "..."}, ...}
    }

Every number may be written plain (`3350`) in a user file or as `{"value", "source"}`
(the presets always give the source). Unknown keys, missing keys, wrong types,
non-positive or non-finite values (NaN, Infinity) and values outside a plausible range
(bandwidths 1e-3 .. 1e7 GB/s, peaks 1e-6 .. 1e6 TFLOP/s, capacity 1e-6 .. 1e7 GiB) are
errors that name the file, the key and the value. Both peak tables must have an `f32`
entry; other element types fall back as `peak_TFLOPS()` documents.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from importlib import resources

__all__ = ["HardwareSpec", "SpecError", "load_hardware", "list_hardware", "parse_hardware", "DTYPE_FAMILIES", "dtype_family"]


class SpecError(ValueError):
    """Bad hardware/system spec: the message names the file and key."""


# Keys of the peak tables. Element types in the IR map onto these families.
DTYPE_FAMILIES = ("f64", "f32", "tf32", "bf16", "f16", "f8", "f4", "i64", "i32", "i16", "i8", "i4", "i1")

_REQUIRED_SCALARS = {
    "memory_bandwidth_GBps": "GB/s (1e9 bytes per second)",
    "memory_capacity_GiB": "GiB",
}
_TOP_KEYS = {"name", "description", "matrix_peak_TFLOPS", "vector_peak_TFLOPS", *_REQUIRED_SCALARS}
# Optional: parameters of the `calibrated` backend (backends/calibrated.py), each a
# positive number with its source; the backend says which keys it needs.
CALIBRATION_KEYS = {
    "matrix_efficiency": "fraction of the matrix peak a large GEMM reaches (measured)",
    "memory_efficiency": "fraction of the HBM bandwidth a streaming kernel reaches (measured)",
    "kernel_launch_ns": "time per kernel launch (ns)",
    "compute_memory_overlap": "fraction of min(compute, memory) hidden by overlap in one kernel",
    "compute_units": "SMs / CUs / TensorCores that GEMM tiles are spread over",
    "gemm_tile_m": "GEMM output tile rows per compute unit",
    "gemm_tile_n": "GEMM output tile columns per compute unit",
    "gemm_tile_min": "smallest tile side the GEMM library picks for small matrices",
    "gemm_tile_k": "K depth of a GEMM tile (elements); an implicit-GEMM convolution pads the channels of each filter tap to it",
    "conv_channel_multiple": "16-bit convolutions (forward, filter gradient) run with their input channels padded to a multiple of this, the library copying the activations once",
    "gemm_narrow_tile_efficiency": "rate of a GEMM tile with a side of gemm_tile_min elements, as a fraction of the wider tiles' (measured; at most 1)",
    "gemm_narrow_tile_k": "K depth of those narrow tiles (elements); a convolution run on one pads each filter tap's channels to it",
    "scatter_element_ns": "time per element a scatter updates atomically (indices not known unique), beyond its bytes (ns; measured)",
    "library_call_idle_ns": "the GPU's idle time at and within a convolution library call launched on its own (a cuDNN call between XLA's command buffers), per call (ns; measured)",
}
_OPTIONAL_KEYS = {"calibration"}

# Plausible ranges (inclusive) of spec numbers: anything outside is a typo or a unit
# mistake, and would overflow or zero the times downstream (1e-300 TFLOP/s, 1e400 GB/s).
BANDWIDTH_RANGE_GBps = (1e-3, 1e7)  # 1 MB/s .. 10 PB/s
PEAK_RANGE_TFLOPS = (1e-6, 1e6)  # 1 MFLOP/s .. 1 EFLOP/s
CAPACITY_RANGE_GiB = (1e-6, 1e7)  # 1 KiB .. 10 PiB


def dtype_family(dtype: str) -> str:
    """Map an MLIR element type to a peak-table key (complex<fN> counts as fN)."""
    if dtype.startswith("complex<"):
        dtype = dtype[len("complex<") : -1]
    if dtype in ("f64", "f32", "tf32", "bf16", "f16"):
        return dtype
    if dtype.startswith("f8"):
        return "f8"
    if dtype.startswith("f4") or dtype.startswith("f6"):
        return "f4"
    if dtype in ("i1",):
        return "i1"
    for bits in ("64", "32", "16", "8", "4"):
        if dtype in (f"i{bits}", f"ui{bits}", f"si{bits}"):
            return f"i{bits}"
    if dtype in ("i2", "ui2", "si2"):
        return "i4"
    return "f32"


# When a table lacks an entry, try these in order (the f32 entry is always there).
_FALLBACK = {
    "f64": ["f32"],
    "tf32": ["f32"],
    "bf16": ["f16", "f32"],
    "f16": ["bf16", "f32"],
    "f8": ["bf16", "f16", "f32"],
    "f4": ["f8", "bf16", "f32"],
    "i64": ["i32", "f32"],
    "i32": ["f32"],
    "i16": ["i32", "f32"],
    "i8": ["i16", "i32", "f32"],
    "i4": ["i8", "i32", "f32"],
    "i1": ["i8", "i32", "f32"],
}


@dataclass(frozen=True)
class HardwareSpec:
    name: str
    description: str
    memory_bandwidth_GBps: float
    memory_capacity_GiB: float
    matrix_peak_TFLOPS: dict[str, float]
    vector_peak_TFLOPS: dict[str, float]
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    path: str | None = field(default=None, compare=False)
    calibration: dict[str, float] = field(default_factory=dict, compare=False)

    def peak_TFLOPS(self, unit: str, dtype: str) -> float:
        """Peak rate for an op on `unit` ("matrix" or "vector") with element type `dtype`."""
        table = self.matrix_peak_TFLOPS if unit == "matrix" else self.vector_peak_TFLOPS
        return table[self.rate_family(unit, dtype)]

    def rate_family(self, unit: str, dtype: str) -> str:
        """The dtype family whose peak `peak_TFLOPS` uses for `dtype`: its own, else the
        first of its fallbacks the table has (an A100's f8 dots at its bf16 rate)."""
        table = self.matrix_peak_TFLOPS if unit == "matrix" else self.vector_peak_TFLOPS
        fam = dtype_family(dtype)
        if fam in table:
            return fam
        for alt in _FALLBACK.get(fam, ["f32"]):
            if alt in table:
                return alt
        return "f32"

    def to_json(self) -> dict:
        def val(key: str, v: float) -> dict | float:
            src = self.sources.get(key)
            return {"value": v, "source": src} if src else v

        return {
            "name": self.name,
            "description": self.description,
            "memory_bandwidth_GBps": val("memory_bandwidth_GBps", self.memory_bandwidth_GBps),
            "memory_capacity_GiB": val("memory_capacity_GiB", self.memory_capacity_GiB),
            "matrix_peak_TFLOPS": {
                k: val(f"matrix_peak_TFLOPS.{k}", v) for k, v in self.matrix_peak_TFLOPS.items()
            },
            "vector_peak_TFLOPS": {
                k: val(f"vector_peak_TFLOPS.{k}", v) for k, v in self.vector_peak_TFLOPS.items()
            },
            **(
                {"calibration": {k: val(f"calibration.{k}", v) for k, v in self.calibration.items()}}
                if self.calibration
                else {}
            ),
        }


def _show(raw) -> str:
    """A JSON value as the file spells it (NaN, Infinity), cut short if huge."""
    try:
        text = json.dumps(raw)
    except (ValueError, TypeError):
        text = repr(raw)
    return text if len(text) <= 40 else text[:20] + "..." + f" ({len(text)} characters)"


def _number(
    where: str,
    key: str,
    raw,
    sources: dict[str, str],
    bounds: tuple[float, float] | None = None,
    allow_zero: bool = False,
) -> float:
    """A finite number > 0 (>= 0 with allow_zero), within `bounds` (inclusive) if given."""
    if isinstance(raw, dict):
        extra = set(raw) - {"value", "source"}
        if extra:
            raise SpecError(f"{where}: unknown key '{key}.{sorted(extra)[0]}'")
        if "value" not in raw:
            raise SpecError(f"{where}: missing key '{key}.value'")
        if "source" in raw:
            if not isinstance(raw["source"], str) or not raw["source"].strip():
                raise SpecError(f"{where}: '{key}.source' must be a non-empty string")
            sources[key] = raw["source"]
        raw = raw["value"]
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise SpecError(f"{where}: '{key}' must be a number, got {json.dumps(raw)}")
    try:
        value = float(raw)
    except OverflowError:  # an integer of hundreds of digits
        value = math.inf if raw > 0 else -math.inf
    if math.isnan(value) or (isinstance(raw, float) and math.isinf(value)):  # NaN, Infinity, 1e400
        raise SpecError(f"{where}: '{key}' must be a finite number, got {_show(raw)}")
    if not (value >= 0 if allow_zero else value > 0):
        raise SpecError(f"{where}: '{key}' must be {'>= 0' if allow_zero else 'positive'}, got {_show(raw)}")
    if bounds is not None and not (bounds[0] <= value <= bounds[1] or (allow_zero and value == 0)):
        raise SpecError(
            f"{where}: '{key}' = {_show(raw)} is outside the plausible range {bounds[0]:g} .. {bounds[1]:g}"
            f"{_unit_of(key)} (check the unit)"
        )
    if math.isinf(value):
        raise SpecError(f"{where}: '{key}' must be a finite number, got {_show(raw)}")
    return value


_UNITS = {"GBps": "GB/s", "TFLOPS": "TFLOP/s", "GiB": "GiB", "ns": "ns"}


def _unit_of(key: str) -> str:
    """' GB/s' for 'network[0].bandwidth_GBps', ' TFLOP/s' for 'matrix_peak_TFLOPS.bf16'."""
    for part in reversed(key.split(".")):
        unit = part.rsplit("_", 1)[-1]
        if "_" in part and unit in _UNITS:
            return " " + _UNITS[unit]
    return ""


def _peak_table(where: str, key: str, raw, sources: dict[str, str]) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: '{key}' must be an object mapping element types to TFLOP/s")
    table = {}
    for dt, v in raw.items():
        if dt not in DTYPE_FAMILIES:
            raise SpecError(
                f"{where}: unknown key '{key}.{dt}' (element types: {', '.join(DTYPE_FAMILIES)})"
            )
        table[dt] = _number(where, f"{key}.{dt}", v, sources, PEAK_RANGE_TFLOPS)
    if "f32" not in table:
        raise SpecError(f"{where}: missing key '{key}.f32'")
    return table


def _stem(key: str) -> str:
    """`memory_bandwidth_TBps` -> `memory_bandwidth` (the key without its unit suffix)."""
    k = key.strip().lower().replace("-", "_")
    return k.rsplit("_", 1)[0] if "_" in k else k


def unit_hint(key: str, known) -> str:
    """' (did you mean ...?)' when `key` differs from a known key only in its unit or spelling."""
    for good in sorted(known):
        if key != good and (_stem(key) == _stem(good) or key.lower().replace("-", "_") == good.lower()):
            unit = good.rsplit("_", 1)[-1] if "_" in good else ""
            return f" (did you mean '{good}'? the unit is part of the key: {unit})" if unit else f" (did you mean '{good}'?)"
    return ""


def parse_hardware(data: dict, where: str) -> HardwareSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a hardware spec must be a JSON object")
    unknown = sorted(set(data) - _TOP_KEYS - _OPTIONAL_KEYS)
    if unknown:
        raise SpecError(f"{where}: unknown key '{unknown[0]}'{unit_hint(unknown[0], _TOP_KEYS)}")
    for k in sorted(_TOP_KEYS):
        if k not in data:
            raise SpecError(f"{where}: missing key '{k}'")
    for k in ("name", "description"):
        if not isinstance(data[k], str) or not data[k]:
            raise SpecError(f"{where}: '{k}' must be a non-empty string")
    sources: dict[str, str] = {}
    return HardwareSpec(
        name=data["name"],
        description=data["description"],
        memory_bandwidth_GBps=_number(
            where, "memory_bandwidth_GBps", data["memory_bandwidth_GBps"], sources, BANDWIDTH_RANGE_GBps
        ),
        memory_capacity_GiB=_number(
            where, "memory_capacity_GiB", data["memory_capacity_GiB"], sources, CAPACITY_RANGE_GiB
        ),
        matrix_peak_TFLOPS=_peak_table(where, "matrix_peak_TFLOPS", data["matrix_peak_TFLOPS"], sources),
        vector_peak_TFLOPS=_peak_table(where, "vector_peak_TFLOPS", data["vector_peak_TFLOPS"], sources),
        sources=sources,
        path=where,
        calibration=_calibration(where, data.get("calibration"), sources),
    )


def _calibration(where: str, raw, sources: dict[str, str]) -> dict[str, float]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: 'calibration' must be an object")
    out = {}
    for key, value in raw.items():
        if key not in CALIBRATION_KEYS:
            raise SpecError(
                f"{where}: unknown key 'calibration.{key}' (known: {', '.join(sorted(CALIBRATION_KEYS))})"
            )
        out[key] = _number(where, f"calibration.{key}", value, sources)
    for key in ("matrix_efficiency", "memory_efficiency", "compute_memory_overlap", "gemm_narrow_tile_efficiency"):
        if key in out and out[key] > 1:
            raise SpecError(f"{where}: 'calibration.{key}' is a fraction (<= 1), got {out[key]}")
    return out


# A spec is a few KiB; refuse to slurp a huge file (or /dev/zero) named by mistake.
MAX_SPEC_BYTES = 16 << 20


class _DuplicateKey(ValueError):
    pass


def _no_duplicate_keys(pairs: list) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def load_json_file(path: str) -> dict:
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        raise SpecError(f"cannot read '{path}': {err.strerror}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"{path}: larger than {MAX_SPEC_BYTES:,} bytes: not a JSON spec file")
    from .jsonio import json_loads

    try:
        return json_loads(raw, object_pairs_hook=_no_duplicate_keys)  # nesting bounded
    except _DuplicateKey as err:
        raise SpecError(f"{path}: key '{err.args[0]}' appears twice in one object (JSON keeps the last silently)") from None
    except json.JSONDecodeError as err:
        raise SpecError(f"{path}:{err.lineno}:{err.colno}: invalid JSON: {err.msg}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: invalid JSON: not UTF-8 text") from None
    except ValueError as err:  # nested too deep (ir.json_loads)
        raise SpecError(f"{path}: invalid JSON: {err}") from None


def _preset_dir(kind: str):
    return resources.files("costmodel").joinpath("data", kind)


def list_presets(kind: str) -> list[str]:
    return sorted(p.name[:-5] for p in _preset_dir(kind).iterdir() if p.name.endswith(".json"))


def looks_like_path(name: str) -> bool:
    return name.endswith(".json") or os.sep in name or "/" in name


def read_preset_or_file(kind: str, name: str) -> tuple[dict, str]:
    """JSON of a named preset (`kind` = hardware | systems) or of a user file (a name that
    looks like a path, or an existing file that is no preset's name)."""
    if looks_like_path(name):
        return load_json_file(name), name
    res = _preset_dir(kind).joinpath(name + ".json")
    noun = "hardware" if kind == "hardware" else "system"
    if not res.is_file() and name and os.path.exists(name):
        try:  # an existing file the user named: say why it is no spec (invalid JSON at line:col ...)
            return load_json_file(name), name
        except SpecError as err:
            raise SpecError(f"{err} (read as a {noun} spec file: '{name}' is not a {noun} preset)") from None
    if not res.is_file():
        raise SpecError(
            f"unknown {noun} '{name}' (known: {', '.join(list_presets(kind) + (sorted(GENERATED_HARDWARE) if kind == 'hardware' else []))}; or give a path to a .json file)"
        )
    return json.loads(res.read_text()), f"{kind}/{name}.json"


def list_hardware() -> list[str]:
    return list_presets("hardware")


# Specs generated for the machine the tool runs on (costmodel.profiling.host): detected
# and measured on first use, cached in the user cache dir.
GENERATED_HARDWARE = {"host-cpu": "this machine's CPU, detected and measured (costmodel.profiling.host)"}


def _generated_hardware(name: str) -> HardwareSpec:
    from .profiling.host import host_cpu_json

    return parse_hardware(host_cpu_json(), f"{name} (generated for this machine)")


_HW_CACHE: dict[str, HardwareSpec] = {}


def load_hardware(name: str) -> HardwareSpec:
    """A preset by name (`h100-sxm`) or a user JSON file by path."""
    if name in _HW_CACHE:
        return _HW_CACHE[name]
    if name in GENERATED_HARDWARE:
        spec = _generated_hardware(name)
        _HW_CACHE[name] = spec
        return spec
    data, where = read_preset_or_file("hardware", name)
    spec = parse_hardware(data, where)
    if where != name:  # a preset (files are read again: they may change)
        _HW_CACHE[name] = spec
    return spec

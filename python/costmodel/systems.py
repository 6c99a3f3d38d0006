"""System specs: a multi-dimensional network described as ASTRA-sim's network.yml, the
per-device hardware preset, and the ASTRA-sim system.json knobs.

A spec file looks like (every number plain or as `{"value", "source"}`)

    {
      "name": "dgx-h100",
      "description": "NVIDIA DGX H100: 8 H100 SXM on NVSwitch",
      "hardware": "h100-sxm",
      "network": [
        {"topology": "Switch", "npus_count": 8,
         "bandwidth_GBps": {"value": 450, "source": "..."},
         "latency_ns": {"value": 936.25, "source": "..."}}
      ],
      "collectives": {"all_reduce": ["ring"], "all_gather": ["ring"],
                      "reduce_scatter": ["ring"], "all_to_all": ["direct"]},
      "astra_sim": {"scheduling_policy": "LIFO", "collective_optimization": "localBWAware",
                    "endpoint_delay_ns": 10, "active_chunks_per_dimension": 1,
                    "preferred_dataset_splits": 4}
    }

`network` lists the dimensions, dimension 0 first (rank r's coordinate in dimension d is
`(r // prod(npus_count[:d])) % npus_count[d]`, as ASTRA-sim computes it).
`bandwidth_GBps` is per link and per direction in 1e9 bytes/s (ASTRA-sim's network.yml
takes GiB/s = 2^30 bytes/s: `to_network_yml` converts). `collectives` and `astra_sim`
are optional; their defaults are `DEFAULT_COLLECTIVES` (ring everywhere) and
`DEFAULT_ASTRA_SIM` (ASTRA-sim's examples/system/native_collectives/Ring_4chunks.json);
`local_mem_bw_GBps` and `peak_perf_TFLOPS` default to the hardware preset's memory
bandwidth and bf16 matrix peak.

An optional `calibration` block (top level, and/or per network dimension) says what the
network measurably achieves, every value a published measurement with its source and never
fitted to a step time (docs/communication-model.md, "Calibration"):

    "calibration": {"bus_efficiency": {"value": 0.82, "source": "..."},
                    "collective_latency_ns": {"value": 11600, "source": "..."}}

`bus_efficiency` (0.01 .. 1) is the fraction of `bandwidth_GBps` a collective reaches
(nccl-tests busbw / link bandwidth); a dimension's own value wins over the system's, and a
dimension with neither keeps its datasheet bandwidth. `collective_latency_ns` (system level
only) is a fixed time added once to every communication op (NCCL base latency + XLA's NCCL
kernel launch overhead). A system without the block is priced exactly as before.
Validation is exact: unknown or missing keys, wrong units,
bad enum values, non-positive or non-finite numbers, numbers outside a plausible range
(bandwidths 1e-3 .. 1e7 GB/s, peaks 1e-6 .. 1e6 TFLOP/s, latencies 0 .. 1e10 ns, chunk
knobs 1 .. 1024) and `npus_count <= 1` are errors naming the file, the key and the value;
a network of more than 1,048,576 NPUs (per dimension or in all) is refused.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace

from .hardware import (
    BANDWIDTH_RANGE_GBps,
    PEAK_RANGE_TFLOPS,
    HardwareSpec,
    SpecError,
    _number,
    list_presets,
    load_hardware,
    read_preset_or_file,
    unit_hint,
)

__all__ = [
    "SystemSpec",
    "NetworkDim",
    "AstraSimConfig",
    "load_system",
    "list_systems",
    "parse_system",
    "to_network_yml",
    "to_system_json",
    "to_remote_memory_json",
    "TOPOLOGIES",
    "IMPLEMENTATIONS",
    "COLLECTIVE_TYPES",
    "GIB_PER_GB",
    "Calibration",
    "CALIBRATION_KEYS",
    "astra_bandwidth",
]

TOPOLOGIES = ("Ring", "FullyConnected", "Switch")
IMPLEMENTATIONS = (
    "ring",
    "oneRing",
    "doubleBinaryTree",
    "direct",
    "oneDirect",
    "halvingDoubling",
    "oneHalvingDoubling",
)
# our key -> ASTRA-sim system.json key
COLLECTIVE_TYPES = {
    "all_reduce": "all-reduce-implementation",
    "all_gather": "all-gather-implementation",
    "reduce_scatter": "reduce-scatter-implementation",
    "all_to_all": "all-to-all-implementation",
}
SCHEDULING_POLICIES = ("LIFO", "FIFO")
COLLECTIVE_OPTIMIZATIONS = ("baseline", "localBWAware")

# ASTRA-sim's analytical network converts "GB/s" with 1 GB = 2^30 bytes
# (astra-network-analytical common/NetworkFunction.cpp bw_GBps_to_Bpns).
GIB_PER_GB = 1e9 / (1 << 30)

# Plausible ranges (inclusive) of the numbers of a spec (bandwidths and peaks: hardware.py).
MAX_NPUS = 1 << 20  # 1,048,576 NPUs, per dimension and in all
LATENCY_RANGE_NS = (0.0, 1e10)  # up to 10 s
MAX_CHUNKS = 1024  # active_chunks_per_dimension, preferred_dataset_splits

DEFAULT_COLLECTIVE_IMPL = "ring"
DEFAULT_ASTRA_SIM = {
    "scheduling_policy": "LIFO",
    "collective_optimization": "localBWAware",
    "endpoint_delay_ns": 10,
    "active_chunks_per_dimension": 1,
    "preferred_dataset_splits": 4,
}
DEFAULT_ASTRA_SIM_SOURCE = "ASTRA-sim examples/system/native_collectives/Ring_4chunks.json (default)"

_TOP_REQUIRED = {"name", "description", "hardware", "network"}
_TOP_OPTIONAL = {"collectives", "astra_sim", "calibration"}
_DIM_KEYS = {"topology", "npus_count", "bandwidth_GBps", "latency_ns"}
_DIM_OPTIONAL = {"calibration"}

# The calibration block (docs/communication-model.md, "Calibration"): key -> meaning.
CALIBRATION_KEYS = {
    "bus_efficiency": "fraction of the link bandwidth a collective achieves (measured busbw / bandwidth_GBps)",
    "collective_latency_ns": "fixed time per communication op (NCCL base latency + XLA's NCCL kernel launch overhead)",
    "step_latency_ns": "latency of one step of a collective over the dimension's links (NCCL's hardware latency "
    "per ring step), once per step of a collective instead of ASTRA-sim's hops x latency_ns per message and chunk",
    "protocols": "the protocols a collective may run with (NCCL's LL, LL128, Simple): per protocol its "
    "base_latency_ns (once per collective) and bandwidth_factor (the fraction of the achievable bandwidth it "
    "reaches); every collective runs with the fastest (system level only)",
    "protocol_step_latency_ns": "step_latency_ns per protocol (one value for each protocol of 'protocols')",
    "protocol_max_bandwidth_GBps": "per protocol, the most bandwidth it reaches on the dimension (NCCL's llMaxBw), "
    "for the protocols it caps",
}
_DIM_CALIBRATION_KEYS = {"bus_efficiency", "step_latency_ns", "protocol_step_latency_ns", "protocol_max_bandwidth_GBps"}
_PROTOCOL_KEYS = {"base_latency_ns", "bandwidth_factor"}
_PROTOCOL_TABLES = ("protocol_step_latency_ns", "protocol_max_bandwidth_GBps")
MAX_PROTOCOLS = 8
BUS_EFFICIENCY_RANGE = (0.01, 1.0)
_ASTRA_KEYS = {
    "scheduling_policy",
    "collective_optimization",
    "endpoint_delay_ns",
    "active_chunks_per_dimension",
    "preferred_dataset_splits",
    "local_mem_bw_GBps",
    "peak_perf_TFLOPS",
}


@dataclass(frozen=True)
class NetworkDim:
    """One network dimension as in ASTRA-sim's network.yml (bandwidth in 1e9 B/s per link and direction).

    `bus_efficiency` is the calibrated fraction of `bandwidth_GBps` collectives achieve on
    this dimension (its own calibration value, else the system's; None: uncalibrated, the
    datasheet bandwidth and ASTRA-sim's semantics); the model and network.yml use
    `bandwidth_GBps * bus_efficiency` (`astra_bandwidth`)."""

    topology: str
    npus_count: int
    bandwidth_GBps: float
    latency_ns: float
    bus_efficiency: float | None = None
    # the calibrated latency of one step of a collective over this dimension (its own
    # calibration value, else the system's; None: ASTRA-sim's per-message latency_ns)
    step_latency_ns: float | None = None
    # per protocol of the calibration's `protocols` (name -> value, its own table, else the
    # system's): the step latency, and the most bandwidth the protocol reaches here
    protocol_step_latency_ns: tuple[tuple[str, float], ...] | None = None
    protocol_max_bandwidth_GBps: tuple[tuple[str, float], ...] | None = None
    # the fraction of `astra_bandwidth` a message reaches: 1.0 in a spec; the communication
    # model sets a protocol's bandwidth_factor (capped) on the dimensions it prices with it
    bandwidth_factor: float = 1.0
    # the factor at which the protocol's bandwidth cap binds (cap / (bandwidth_GBps x
    # bus_efficiency)), None: no cap; set with `bandwidth_factor` by the communication model,
    # so that a ring driving several links at once is capped on its total, as NCCL's busBw
    bandwidth_cap_factor: float | None = None

    @property
    def calibrated(self) -> bool:
        return self.bus_efficiency is not None

    @property
    def has_step_latency(self) -> bool:
        """A calibrated step latency (single or per protocol) replaces latency_ns per message."""
        return self.step_latency_ns is not None or self.protocol_step_latency_ns is not None

    def hops(self, src: int, dst: int) -> int:
        """Hops between local coordinates, as ASTRA-sim's congestion-unaware topologies count them."""
        if src == dst:
            return 0
        if self.topology == "Switch":
            return 2
        if self.topology == "FullyConnected":
            return 1
        cw = (dst - src) % self.npus_count  # Ring, bidirectional: the shorter way
        return min(cw, self.npus_count - cw)


@dataclass(frozen=True)
class AstraSimConfig:
    """ASTRA-sim system.json knobs."""

    scheduling_policy: str
    collective_optimization: str
    endpoint_delay_ns: float
    active_chunks_per_dimension: int
    preferred_dataset_splits: int
    local_mem_bw_GBps: float
    peak_perf_TFLOPS: float


@dataclass(frozen=True)
class Protocol:
    """One protocol of a calibration's `protocols` (NCCL's tuner: LL, LL128, Simple)."""

    name: str
    base_latency_ns: float
    bandwidth_factor: float


@dataclass(frozen=True)
class Calibration:
    """The calibration blocks of a system spec, as given.

    `bus_efficiency`: the system-wide value (None: not given); `dim_bus_efficiency`: the
    value each dimension gives itself (None: not given); `collective_latency_ns`: added once
    to every communication op (0 when not given). The effective per-dimension efficiency is
    `NetworkDim.bus_efficiency`."""

    collective_latency_ns: float = 0.0
    bus_efficiency: float | None = None
    dim_bus_efficiency: tuple[float | None, ...] = ()
    has_latency: bool = False  # collective_latency_ns was given (even as 0)
    step_latency_ns: float | None = None  # the system-wide value (None: not given)
    dim_step_latency_ns: tuple[float | None, ...] = ()
    # the protocols a collective may run with (none: one, as before)
    protocols: tuple[Protocol, ...] = ()
    # table -> the system-wide table and each dimension's own (None: not given);
    # tables are tuples of (protocol, value)
    tables: dict = field(default_factory=dict)
    dim_tables: tuple[dict, ...] = ()


@dataclass(frozen=True)
class SystemSpec:
    name: str
    description: str
    hardware: str  # preset name (or path) of the per-device hardware
    hardware_spec: HardwareSpec = field(compare=False, repr=False)
    dims: tuple[NetworkDim, ...] = ()
    # collective type -> implementation per dimension
    collectives: dict[str, tuple[str, ...]] = field(default_factory=dict)
    astra_sim: AstraSimConfig | None = None
    sources: dict[str, str] = field(default_factory=dict, compare=False)
    path: str | None = field(default=None, compare=False)
    # None: no calibration block anywhere (priced exactly as an uncalibrated ASTRA-sim network)
    calibration: Calibration | None = None

    @property
    def num_npus(self) -> int:
        return math.prod(d.npus_count for d in self.dims)

    @property
    def calibrated(self) -> bool:
        return self.calibration is not None

    @property
    def collective_latency_ns(self) -> float:
        """The fixed per-op latency of the calibration (0.0 without one)."""
        return self.calibration.collective_latency_ns if self.calibration is not None else 0.0

    def calibration_json(self) -> dict:
        """The calibration as the spec file writes it ({} without one), values with their sources:
        {"calibration": {...}, "network": [{...} or None per dimension]}."""
        c = self.calibration
        if c is None:
            return {}

        def val(key: str, v: float):
            src = self.sources.get(key)
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            return {"value": v, "source": src} if src else v

        top = {}
        if c.bus_efficiency is not None:
            top["bus_efficiency"] = val("calibration.bus_efficiency", c.bus_efficiency)
        if c.has_latency:
            top["collective_latency_ns"] = val("calibration.collective_latency_ns", c.collective_latency_ns)
        if c.step_latency_ns is not None:
            top["step_latency_ns"] = val("calibration.step_latency_ns", c.step_latency_ns)

        def table(prefix: str, rows) -> dict:
            out = {"source": self.sources[prefix]} if self.sources.get(prefix) else {}
            for name, v in rows:
                out[name] = val(f"{prefix}.{name}", v)
            return out

        if c.protocols:
            prefix = "calibration.protocols"
            top["protocols"] = {"source": self.sources[prefix]} if self.sources.get(prefix) else {}
            for pr in c.protocols:
                top["protocols"][pr.name] = {
                    "base_latency_ns": val(f"{prefix}.{pr.name}.base_latency_ns", pr.base_latency_ns),
                    "bandwidth_factor": val(f"{prefix}.{pr.name}.bandwidth_factor", pr.bandwidth_factor),
                }
        for key in _PROTOCOL_TABLES:
            if c.tables.get(key) is not None:
                top[key] = table(f"calibration.{key}", c.tables[key])
        dims = []
        steps = c.dim_step_latency_ns or (None,) * len(c.dim_bus_efficiency)
        dim_tables = c.dim_tables or ({},) * len(c.dim_bus_efficiency)
        for i, (e, st, tb) in enumerate(zip(c.dim_bus_efficiency, steps, dim_tables)):
            d = {}
            if e is not None:
                d["bus_efficiency"] = val(f"network[{i}].calibration.bus_efficiency", e)
            if st is not None:
                d["step_latency_ns"] = val(f"network[{i}].calibration.step_latency_ns", st)
            for key in _PROTOCOL_TABLES:
                if tb.get(key) is not None:
                    d[key] = table(f"network[{i}].calibration.{key}", tb[key])
            dims.append(d or None)
        return {"calibration": top, "network": dims}

    def coords(self, rank: int) -> tuple[int, ...]:
        """Rank -> per-dimension coordinate, dimension 0 fastest (ASTRA-sim's translate_address)."""
        out = []
        for d in self.dims:
            out.append(rank % d.npus_count)
            rank //= d.npus_count
        return tuple(out)

    def rank_of(self, coords) -> int:
        r, stride = 0, 1
        for c, d in zip(coords, self.dims):
            r += c * stride
            stride *= d.npus_count
        return r

    def implementation(self, kind: str, dim: int) -> str:
        return self.collectives[kind][dim]

    def to_json(self) -> dict:
        def val(key: str, v):
            src = self.sources.get(key)
            if isinstance(v, float) and v.is_integer():
                v = int(v)
            return {"value": v, "source": src} if src else v

        cal = self.calibration_json()
        net = []
        for i, d in enumerate(self.dims):
            entry = {
                "topology": d.topology,
                "npus_count": val(f"network[{i}].npus_count", d.npus_count),
                "bandwidth_GBps": val(f"network[{i}].bandwidth_GBps", d.bandwidth_GBps),
                "latency_ns": val(f"network[{i}].latency_ns", d.latency_ns),
            }
            if cal and cal["network"][i] is not None:
                entry["calibration"] = cal["network"][i]
            net.append(entry)
        a = self.astra_sim
        astra = {k: val(f"astra_sim.{k}", getattr(a, k)) for k in sorted(_ASTRA_KEYS)}
        out = {
            "name": self.name,
            "description": self.description,
            "hardware": self.hardware,
            "network": net,
            "collectives": {k: list(v) for k, v in self.collectives.items()},
            "astra_sim": astra,
        }
        if cal and cal["calibration"]:
            out["calibration"] = cal["calibration"]
        return out


def _check_keys(where: str, prefix: str, data: dict, required: set, optional: set = frozenset()) -> None:
    allowed = set(required) | set(optional)
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise SpecError(f"{where}: unknown key '{prefix}{unknown[0]}'{unit_hint(unknown[0], allowed)}")
    for k in sorted(required):
        if k not in data:
            raise SpecError(f"{where}: missing key '{prefix}{k}'")


def _enum(where: str, key: str, raw, allowed) -> str:
    if isinstance(raw, dict) and set(raw) <= {"value", "source"} and "value" in raw:
        raw = raw["value"]
    if raw not in allowed:
        raise SpecError(f"{where}: '{key}' must be one of {', '.join(allowed)}, got {raw!r}")
    return raw


def _integer(where: str, key: str, raw, sources: dict, minimum: int = 1, maximum: int = MAX_CHUNKS) -> int:
    v = _number(where, key, raw, sources)
    if not v.is_integer():
        raise SpecError(f"{where}: '{key}' must be an integer, got {v}")
    if v < minimum:
        raise SpecError(f"{where}: '{key}' must be >= {minimum}, got {int(v)}")
    if v > maximum:
        shown = f"{int(v):,}" if v < 1e18 else f"{v:g}"
        raise SpecError(f"{where}: '{key}' must be <= {maximum:,}, got {shown}")
    return int(v)


def _nonneg(where: str, key: str, raw, sources: dict) -> float:
    """A time >= 0 (latencies and delays may be zero), at most LATENCY_RANGE_NS[1]."""
    return _number(where, key, raw, sources, LATENCY_RANGE_NS, allow_zero=True)


def _table_source(where: str, name: str, raw: dict, sources: dict) -> dict:
    """A protocol table's entries without its optional "source" (recorded in `sources`)."""
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: '{name}' must be an object of protocols (e.g. {{\"LL\": ..., \"Simple\": ...}})")
    if "source" in raw:
        if not isinstance(raw["source"], str) or not raw["source"].strip():
            raise SpecError(f"{where}: '{name}.source' must be a non-empty string")
        sources[name] = raw["source"]
    entries = {k: v for k, v in raw.items() if k != "source"}
    if not entries:
        raise SpecError(f"{where}: '{name}' names no protocol")
    if len(entries) > MAX_PROTOCOLS:
        raise SpecError(f"{where}: '{name}' names {len(entries)} protocols; at most {MAX_PROTOCOLS} are supported")
    for k in entries:
        if not k or not k.replace("_", "").isalnum() or not k.isascii():
            raise SpecError(f"{where}: '{name}': a protocol name is letters, digits and '_', got {k!r}")
    return entries


def _protocols(where: str, name: str, raw, sources: dict) -> tuple[Protocol, ...]:
    out = []
    for pname, body in _table_source(where, name, raw, sources).items():
        p = f"{name}.{pname}"
        if not isinstance(body, dict):
            raise SpecError(f"{where}: '{p}' must be an object with base_latency_ns and bandwidth_factor")
        _check_keys(where, p + ".", body, _PROTOCOL_KEYS)
        factor = _number(where, p + ".bandwidth_factor", body["bandwidth_factor"], sources)
        lo, hi = BUS_EFFICIENCY_RANGE
        if not lo <= factor <= hi:
            raise SpecError(f"{where}: '{p}.bandwidth_factor' is a fraction ({lo:g} .. {hi:g}) of the bandwidth, got {factor:g}")
        out.append(Protocol(pname, _nonneg(where, p + ".base_latency_ns", body["base_latency_ns"], sources), factor))
    return tuple(out)


def _protocol_table(where: str, name: str, key: str, raw, sources: dict) -> tuple[tuple[str, float], ...]:
    out = []
    for pname, v in _table_source(where, name, raw, sources).items():
        if key == "protocol_step_latency_ns":
            out.append((pname, _nonneg(where, f"{name}.{pname}", v, sources)))
        else:
            out.append((pname, _number(where, f"{name}.{pname}", v, sources, BANDWIDTH_RANGE_GBps)))
    return tuple(out)


def _calibration_block(where: str, prefix: str, raw, allowed: set, sources: dict) -> dict:
    """A `calibration` object: known keys only, each a finite number in range with its source
    (the protocol tables: objects of such numbers)."""
    if not isinstance(raw, dict):
        raise SpecError(f"{where}: '{prefix}calibration' must be an object")
    out: dict = {}
    for key, value in raw.items():
        if key not in allowed:
            if key in CALIBRATION_KEYS:  # known, but not at this level
                raise SpecError(
                    f"{where}: unknown key '{prefix}calibration.{key}' ({key} is per system: "
                    f"put it in the top-level 'calibration')"
                )
            raise SpecError(
                f"{where}: unknown key '{prefix}calibration.{key}'{unit_hint(key, allowed)} "
                f"(known: {', '.join(sorted(allowed))})"
            )
        name = f"{prefix}calibration.{key}"
        if key == "bus_efficiency":
            v = _number(where, name, value, sources)
            lo, hi = BUS_EFFICIENCY_RANGE
            if v > hi:
                raise SpecError(
                    f"{where}: '{name}' is a fraction (<= 1) of the link bandwidth, got {v:g} "
                    f"(e.g. 0.78 for 78%)"
                )
            if v < lo:
                raise SpecError(f"{where}: '{name}' = {v:g} is outside the plausible range {lo:g} .. {hi:g}")
            out[key] = v
        elif key == "protocols":
            out[key] = _protocols(where, name, value, sources)
        elif key in _PROTOCOL_TABLES:
            out[key] = _protocol_table(where, name, key, value, sources)
        else:  # collective_latency_ns, step_latency_ns
            out[key] = _nonneg(where, name, value, sources)
    if "step_latency_ns" in out and "protocol_step_latency_ns" in out:
        raise SpecError(
            f"{where}: '{prefix}calibration' gives both step_latency_ns and protocol_step_latency_ns; "
            f"give one (protocol_step_latency_ns: one per protocol)"
        )
    return out


def _check_protocol_tables(where: str, protocols: tuple[Protocol, ...], blocks: list[tuple[str, dict]]) -> None:
    """Protocol tables name known protocols, and a step-latency table every one of them."""
    names = [p.name for p in protocols]
    if not protocols:
        tables = [f"{prefix}calibration.{key}" for prefix, block in blocks for key in _PROTOCOL_TABLES
                  if block.get(key) is not None]
        if tables:
            more = f" (so do: {', '.join(tables[1:])})" if len(tables) > 1 else ""
            raise SpecError(
                f"{where}: '{tables[0]}' needs the protocols it names in the top-level "
                f"'calibration.protocols'{more}"
            )
    for prefix, block in blocks:
        for key in _PROTOCOL_TABLES:
            rows = block.get(key)
            if rows is None:
                continue
            for pname, _v in rows:
                if pname not in names:
                    raise SpecError(
                        f"{where}: '{prefix}calibration.{key}.{pname}': no such protocol in "
                        f"'calibration.protocols' (protocols: {', '.join(names)})"
                    )
            if key == "protocol_step_latency_ns":
                missing = [n for n in names if n not in dict(rows)]
                if missing:
                    raise SpecError(f"{where}: '{prefix}calibration.{key}' lacks protocol '{missing[0]}' (one value per protocol)")


def parse_system(data: dict, where: str) -> SystemSpec:
    if not isinstance(data, dict):
        raise SpecError(f"{where}: a system spec must be a JSON object")
    _check_keys(where, "", data, _TOP_REQUIRED, _TOP_OPTIONAL)
    for k in ("name", "description", "hardware"):
        if not isinstance(data[k], str) or not data[k]:
            raise SpecError(f"{where}: '{k}' must be a non-empty string")
    try:
        hw = load_hardware(data["hardware"])
    except SpecError as err:
        raise SpecError(f"{where}: 'hardware': {err}") from None
    sources: dict[str, str] = {}
    net = data["network"]
    if not isinstance(net, list) or not net:
        raise SpecError(f"{where}: 'network' must be a non-empty list of dimensions")
    dims = []
    dim_cal: list[float | None] = []
    dim_step: list[float | None] = []
    dim_tables: list[dict] = []
    blocks: list[tuple[str, dict]] = []
    for i, d in enumerate(net):
        p = f"network[{i}]."
        if not isinstance(d, dict):
            raise SpecError(f"{where}: 'network[{i}]' must be an object")
        _check_keys(where, p, d, _DIM_KEYS, _DIM_OPTIONAL)
        own = _calibration_block(where, p, d.get("calibration", {}), _DIM_CALIBRATION_KEYS, sources)
        dim_cal.append(own.get("bus_efficiency"))
        dim_step.append(own.get("step_latency_ns"))
        dim_tables.append({k: own[k] for k in _PROTOCOL_TABLES if k in own})
        blocks.append((p, own))
        dims.append(
            NetworkDim(
                topology=_enum(where, p + "topology", d["topology"], TOPOLOGIES),
                npus_count=_integer(where, p + "npus_count", d["npus_count"], sources, minimum=2, maximum=MAX_NPUS),
                bandwidth_GBps=_number(where, p + "bandwidth_GBps", d["bandwidth_GBps"], sources, BANDWIDTH_RANGE_GBps),
                latency_ns=_nonneg(where, p + "latency_ns", d["latency_ns"], sources),
            )
        )
    calibration = None
    top = _calibration_block(where, "", data.get("calibration", {}), set(CALIBRATION_KEYS), sources)
    protocols = top.get("protocols", ())
    _check_protocol_tables(where, protocols, [("", top), *blocks])
    if top or any(e is not None for e in dim_cal) or any(e is not None for e in dim_step) or any(dim_tables):
        # (empty blocks calibrate nothing)
        calibration = Calibration(
            collective_latency_ns=float(top.get("collective_latency_ns", 0.0)),
            bus_efficiency=top.get("bus_efficiency"),
            dim_bus_efficiency=tuple(dim_cal),
            has_latency="collective_latency_ns" in top,
            step_latency_ns=top.get("step_latency_ns"),
            dim_step_latency_ns=tuple(dim_step),
            protocols=protocols,
            tables={k: top[k] for k in _PROTOCOL_TABLES if k in top},
            dim_tables=tuple(dim_tables),
        )

        def inherited(own_table, own_step, key):
            # a dimension's own value wins over the system's (caps per protocol: merged); its
            # own step latency, single or per protocol, replaces the system's of either form
            if key == "protocol_max_bandwidth_GBps" and own_table.get(key) is not None:
                return tuple({**dict(calibration.tables.get(key) or ()), **dict(own_table[key])}.items())
            if own_table.get(key) is not None:
                return own_table[key]
            if key == "protocol_step_latency_ns" and own_step is not None:
                return None
            return calibration.tables.get(key)

        dims = [
            replace(
                dim,
                bus_efficiency=own if own is not None else calibration.bus_efficiency,
                step_latency_ns=(
                    step if step is not None
                    else None if tb.get("protocol_step_latency_ns") is not None
                    else calibration.step_latency_ns
                ),
                protocol_step_latency_ns=inherited(tb, step, "protocol_step_latency_ns"),
                protocol_max_bandwidth_GBps=inherited(tb, step, "protocol_max_bandwidth_GBps"),
            )
            for dim, own, step, tb in zip(dims, dim_cal, dim_step, dim_tables)
        ]
    num_npus = math.prod(d.npus_count for d in dims)
    if num_npus > MAX_NPUS:
        counts = " x ".join(str(d.npus_count) for d in dims)
        raise SpecError(f"{where}: the network has {counts} = {num_npus:,} NPUs; at most {MAX_NPUS:,} are supported")
    coll_raw = data.get("collectives", {})
    if not isinstance(coll_raw, dict):
        raise SpecError(f"{where}: 'collectives' must be an object")
    _check_keys(where, "collectives.", coll_raw, set(), set(COLLECTIVE_TYPES))
    collectives = {}
    for kind in COLLECTIVE_TYPES:
        impls = coll_raw.get(kind, [DEFAULT_COLLECTIVE_IMPL] * len(dims))
        if not isinstance(impls, list) or len(impls) != len(dims):
            raise SpecError(
                f"{where}: 'collectives.{kind}' must list one implementation per network dimension ({len(dims)})"
            )
        for j, impl in enumerate(impls):
            base = impl
            if isinstance(impl, str) and impl.startswith(("direct", "oneDirect")) and impl not in IMPLEMENTATIONS:
                base = "oneDirect" if impl.startswith("oneDirect") else "direct"
                if not impl[len(base):].isdigit():
                    base = impl
            if base not in IMPLEMENTATIONS:
                raise SpecError(
                    f"{where}: 'collectives.{kind}[{j}]' must be one of {', '.join(IMPLEMENTATIONS)} "
                    f"(direct may carry a window, e.g. direct4), got {impl!r}"
                )
            if base == "doubleBinaryTree" and kind != "all_reduce":
                raise SpecError(f"{where}: 'collectives.{kind}[{j}]': doubleBinaryTree implements all_reduce only")
            if base in ("halvingDoubling", "oneHalvingDoubling") and kind == "all_to_all":
                raise SpecError(f"{where}: 'collectives.{kind}[{j}]': halvingDoubling has no all_to_all")
        collectives[kind] = tuple(impls)
    astra_raw = data.get("astra_sim", {})
    if not isinstance(astra_raw, dict):
        raise SpecError(f"{where}: 'astra_sim' must be an object")
    _check_keys(where, "astra_sim.", astra_raw, set(), _ASTRA_KEYS)
    a = dict(DEFAULT_ASTRA_SIM)
    for k in DEFAULT_ASTRA_SIM:
        sources.setdefault(f"astra_sim.{k}", DEFAULT_ASTRA_SIM_SOURCE)
    for k, raw in astra_raw.items():
        key = f"astra_sim.{k}"
        sources.pop(key, None)
        if k == "scheduling_policy":
            a[k] = _enum(where, key, raw, SCHEDULING_POLICIES)
        elif k == "collective_optimization":
            a[k] = _enum(where, key, raw, COLLECTIVE_OPTIMIZATIONS)
        elif k in ("active_chunks_per_dimension", "preferred_dataset_splits"):
            a[k] = _integer(where, key, raw, sources)
        elif k == "endpoint_delay_ns":
            a[k] = _nonneg(where, key, raw, sources)
        elif k == "local_mem_bw_GBps":
            a[k] = _number(where, key, raw, sources, BANDWIDTH_RANGE_GBps)
        else:  # peak_perf_TFLOPS
            a[k] = _number(where, key, raw, sources, PEAK_RANGE_TFLOPS)
        if isinstance(raw, dict) and "source" in raw:
            sources[key] = raw["source"]
    if "local_mem_bw_GBps" not in a:
        a["local_mem_bw_GBps"] = hw.memory_bandwidth_GBps
        sources["astra_sim.local_mem_bw_GBps"] = f"hardware '{hw.name}' memory_bandwidth_GBps"
    if "peak_perf_TFLOPS" not in a:
        a["peak_perf_TFLOPS"] = hw.peak_TFLOPS("matrix", "bf16")
        sources["astra_sim.peak_perf_TFLOPS"] = f"hardware '{hw.name}' matrix_peak_TFLOPS.bf16"
    astra = AstraSimConfig(
        scheduling_policy=a["scheduling_policy"],
        collective_optimization=a["collective_optimization"],
        endpoint_delay_ns=float(a["endpoint_delay_ns"]),
        active_chunks_per_dimension=int(a["active_chunks_per_dimension"]),
        preferred_dataset_splits=int(a["preferred_dataset_splits"]),
        local_mem_bw_GBps=float(a["local_mem_bw_GBps"]),
        peak_perf_TFLOPS=float(a["peak_perf_TFLOPS"]),
    )
    return SystemSpec(
        name=data["name"],
        description=data["description"],
        hardware=data["hardware"],
        hardware_spec=hw,
        dims=tuple(dims),
        collectives=collectives,
        astra_sim=astra,
        sources=sources,
        path=where,
        calibration=calibration,
    )


def list_systems() -> list[str]:
    return list_presets("systems")


_SYS_CACHE: dict[str, SystemSpec] = {}


def resolve_hardware_path(data, spec_file: str | None) -> None:
    """A user system file's relative `hardware` path is relative to that file (as an
    include is), not to the working directory: made absolute in `data`. Preset names and
    absolute paths are left as they are; `spec_file` None: no file (a preset)."""
    from .hardware import looks_like_path

    hw = data.get("hardware") if isinstance(data, dict) else None
    if spec_file is None or not isinstance(hw, str) or not hw or not looks_like_path(hw):
        return
    hw = os.path.expanduser(hw)
    if not os.path.isabs(hw):
        hw = os.path.join(os.path.dirname(os.path.abspath(spec_file)), hw)
    data["hardware"] = hw


def load_system(name: str) -> SystemSpec:
    """A preset by name (`dgx-h100`) or a user JSON file by path."""
    if name in _SYS_CACHE:
        return _SYS_CACHE[name]
    data, where = read_preset_or_file("systems", name)
    resolve_hardware_path(data, where if where == name else None)
    spec = parse_system(data, where)
    if where != name:  # a preset (files are read again: they may change)
        _SYS_CACHE[name] = spec
    return spec


# ---------------------------------------------------------------------------
# ASTRA-sim configuration files


def _fmt(x: float) -> str:
    r = repr(round(float(x), 9))
    return r


def astra_bandwidth(dim: NetworkDim) -> float:
    """The network.yml bandwidth (ASTRA-sim's GB/s = 2^30 B/s) for a dimension: the
    achievable bandwidth `bandwidth_GBps * bus_efficiency` (the datasheet figure when
    uncalibrated, bus_efficiency = 1.0). The communication model uses exactly this value."""
    if dim.bus_efficiency is None:
        return round(dim.bandwidth_GBps * GIB_PER_GB, 9)
    return round(dim.bandwidth_GBps * dim.bus_efficiency * GIB_PER_GB, 9)


def to_network_yml(system: SystemSpec) -> str:
    """network.yml for ASTRA-sim's analytical backends (all keys, one entry per dimension)."""
    dims = system.dims
    lines = [
        f"# {system.name}: {system.description}",
        "# bandwidth is per link and direction in ASTRA-sim's GB/s (2^30 bytes/s);",
        "# the system spec's bandwidth_GBps (1e9 bytes/s) x 0.931322574615",
        *_calibration_comments(system),
        "topology: [ " + ", ".join(d.topology for d in dims) + " ]",
        "npus_count: [ " + ", ".join(str(d.npus_count) for d in dims) + " ]",
        "bandwidth: [ " + ", ".join(_fmt(astra_bandwidth(d)) for d in dims) + " ]",
        "latency: [ " + ", ".join(_fmt(d.latency_ns) for d in dims) + " ]",
    ]
    return "\n".join(lines) + "\n"


def _calibration_comments(system: SystemSpec) -> list[str]:
    """network.yml comments saying what of the calibration ASTRA-sim sees (nothing when uncalibrated)."""
    if system.calibration is None:
        return []
    out = []
    if any(d.calibrated for d in system.dims):
        effs = ", ".join("-" if d.bus_efficiency is None else f"{d.bus_efficiency:g}" for d in system.dims)
        out.append(f"# calibrated: bandwidth also x bus_efficiency [ {effs} ] (the achievable bus bandwidth)")
    missing = []
    if system.collective_latency_ns:
        missing.append(f"#   collective_latency_ns = {system.collective_latency_ns:g} once per communication op")
    if any(d.calibrated for d in system.dims):
        missing.append(
            "#   no local reduction on calibrated dimensions (ASTRA-sim charges 3 x message / local-mem-bw per"
            " reduced message)"
        )
    steps = [f"{d.step_latency_ns:g}" if d.step_latency_ns is not None else "-" for d in system.dims]
    if any(d.step_latency_ns is not None for d in system.dims):
        missing.append(
            f"#   step_latency_ns [ {', '.join(steps)} ] once per step of a collective, instead of latency"
            " per message of every chunk (ASTRA-sim keeps latency below)"
        )
    protocols = system.calibration.protocols
    if protocols:
        names = ", ".join(f"{p.name} (+{p.base_latency_ns:g} ns, bandwidth x {p.bandwidth_factor:g})" for p in protocols)
        missing.append(f"#   protocols {names}: each collective runs with the fastest; the files hold bandwidth x 1")
        for i, d in enumerate(system.dims):
            parts = []
            if d.protocol_step_latency_ns:
                parts.append("step_latency_ns " + ", ".join(f"{n} {v:g}" for n, v in d.protocol_step_latency_ns))
            if d.protocol_max_bandwidth_GBps:
                parts.append("at most " + ", ".join(f"{n} {v:g} GB/s" for n, v in d.protocol_max_bandwidth_GBps))
            if parts:
                missing.append(f"#   dimension {i}: {'; '.join(parts)}")
    if missing:
        out.append("# not expressible in ASTRA-sim's files (the built-in simulator applies them):")
        out.extend(missing)
    return out


def _num(x: float):
    return int(x) if float(x).is_integer() else float(x)


def to_system_json(system: SystemSpec, roofline_enabled: bool = False) -> dict:
    """system.json for ASTRA-sim (all knobs written explicitly)."""
    a = system.astra_sim
    out = {
        "scheduling-policy": a.scheduling_policy,
        "endpoint-delay": _num(a.endpoint_delay_ns),
        "active-chunks-per-dimension": a.active_chunks_per_dimension,
        "preferred-dataset-splits": a.preferred_dataset_splits,
        "collective-optimization": a.collective_optimization,
        "local-mem-bw": _num(a.local_mem_bw_GBps),
        "peak-perf": _num(a.peak_perf_TFLOPS),
        "roofline-enabled": 1 if roofline_enabled else 0,
    }
    for kind, key in COLLECTIVE_TYPES.items():
        out[key] = list(system.collectives[kind])
    return out


def to_remote_memory_json(system: SystemSpec) -> dict:
    """remote_memory.json for a plain run (no memory expansion)."""
    per_node = system.dims[0].npus_count
    return {
        "memory-type": "NO_MEMORY_EXPANSION",
        "num-nodes": max(1, system.num_npus // per_node),
        "num-npus-per-node": per_node,
        "remote-mem-latency": 0,
        # unused without memory expansion; a positive value keeps any division finite
        "remote-mem-bw": _num(system.hardware_spec.memory_bandwidth_GBps),
    }

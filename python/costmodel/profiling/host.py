"""`host-cpu`: a hardware spec of the machine the tool runs on, generated, not shipped.

    from costmodel.profiling.host import host_cpu_json, device_id
    host_cpu_json()        # the spec (hardware.py schema: unit-suffixed keys, a source each)

Detected (no measurement): the CPU model, vendor/family/model/stepping, ISA flags and
physical cores from /proc/cpuinfo, the caches from /sys/devices/system/cpu/cpu0/cache,
the memory from /proc/meminfo. Peaks are cores x frequency x SIMD f32 lanes x FMA units
x 2 flops (AVX-512: 16 lanes, AVX2: 8, SSE/NEON: 4; 2 FMA units per core assumed for
AVX-512 server cores, 1 otherwise; the nominal frequency of /proc/cpuinfo or sysfs);
each peak's source says which of these numbers were detected and which assumed.

Measured once and cached (`<cache dir>/host/<device id>.json`):
- memory bandwidth: a STREAM-like copy (numpy.copyto of arrays larger than the last-level
  cache; 2 x bytes per copy, the best of several, one copy per core in parallel and one
  alone: both recorded, the spec takes the larger);
- with IREE installed, the `calibration` block of the `calibrated` backend: the fraction
  of the f32 peak an IREE llvm-cpu GEMM reaches (matrix_efficiency), the marginal time
  of one more dispatch in a program (kernel_launch_ns), from IREE's CPU ukernel tile
  (16 x 16 with AVX-512, 8 x 8 with AVX2) for gemm_tile_m/n.

The device id (`device_id()`) names this CPU for every cache: vendor, family, model,
stepping, model name, logical CPUs and the ISA flags, hashed.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import time

from .cache import cache_dir

__all__ = ["CpuInfo", "detect_cpu", "device_id", "host_cpu_json", "measure_copy_bandwidth", "host_measurements"]

HOST_CPU = "host-cpu"
HOST_INFO_VERSION = 3


class CpuInfo(dict):
    """What /proc and /sys say about this CPU (a dict: JSON-ready)."""


def _read(path: str) -> str:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return ""


def _parse_size(text: str) -> int:
    """'48K' / '2048K' / '300M' (sysfs cache sizes) -> bytes."""
    m = re.match(r"\s*(\d+)\s*([KMG]?)", text)
    if not m:
        return 0
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def detect_cpu(proc_cpuinfo: str | None = None, sys_cpu: str = "/sys/devices/system/cpu") -> CpuInfo:
    """Detect this CPU (`proc_cpuinfo`: text of /proc/cpuinfo, for tests)."""
    text = _read("/proc/cpuinfo") if proc_cpuinfo is None else proc_cpuinfo
    blocks = [b for b in text.split("\n\n") if b.strip()]
    procs = []
    for b in blocks:
        d = {}
        for line in b.splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                d[k.strip()] = v.strip()
        if d:
            procs.append(d)
    first = procs[0] if procs else {}
    flags = sorted(set((first.get("flags") or first.get("Features") or "").split()))
    cores = {(p.get("physical id", "0"), p.get("core id", str(i))) for i, p in enumerate(procs)}
    logical = len(procs) or (os.cpu_count() or 1)
    physical = len(cores) if cores else logical
    mhz = 0.0
    mhz_source = ""
    max_khz = _read(os.path.join(sys_cpu, "cpu0", "cpufreq", "cpuinfo_max_freq")).strip()
    if max_khz.isdigit():
        mhz, mhz_source = int(max_khz) / 1e3, "sysfs cpuinfo_max_freq"
    elif first.get("cpu MHz"):
        try:
            mhz, mhz_source = float(first["cpu MHz"]), "/proc/cpuinfo 'cpu MHz'"
        except ValueError:
            pass
    caches = []
    cache_root = os.path.join(sys_cpu, "cpu0", "cache")
    if os.path.isdir(cache_root):
        for name in sorted(os.listdir(cache_root)):
            if not name.startswith("index"):
                continue
            base = os.path.join(cache_root, name)
            level = _read(os.path.join(base, "level")).strip()
            kind = _read(os.path.join(base, "type")).strip()
            size = _parse_size(_read(os.path.join(base, "size")))
            shared = _read(os.path.join(base, "shared_cpu_list")).strip()
            if level and size:
                caches.append({"level": int(level), "type": kind, "size_bytes": size, "shared_cpu_list": shared})
    mem_kib = 0
    m = re.search(r"MemTotal:\s+(\d+)\s+kB", _read("/proc/meminfo"))
    if m:
        mem_kib = int(m.group(1))
    return CpuInfo(
        model_name=first.get("model name") or first.get("Model") or platform.processor() or "unknown CPU",
        vendor=first.get("vendor_id", ""),
        family=first.get("cpu family", ""),
        model=first.get("model", ""),
        stepping=first.get("stepping", ""),
        machine=platform.machine(),
        logical_cpus=logical,
        physical_cores=physical,
        mhz=mhz,
        mhz_source=mhz_source,
        flags=flags,
        caches=caches,
        memory_bytes=mem_kib * 1024,
    )


def device_id(info: CpuInfo | None = None) -> str:
    """A short stable name of this CPU for cache keys: 'cpu-<model words>-<hash>'."""
    info = detect_cpu() if info is None else info
    key = json.dumps(
        [info["vendor"], info["family"], info["model"], info["stepping"], info["model_name"], info["logical_cpus"], info["flags"]]
    )
    words = re.sub(r"[^a-z0-9]+", "-", info["model_name"].lower()).strip("-")[:40]
    return f"cpu-{words}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def simd_f32_lanes(flags) -> tuple[int, str]:
    f = set(flags)
    if "avx512f" in f:
        return 16, "AVX-512 (avx512f): 16 f32 lanes"
    if "avx2" in f or "avx" in f:
        return 8, "AVX/AVX2: 8 f32 lanes"
    if "asimd" in f or "neon" in f:
        return 4, "NEON: 4 f32 lanes"
    return 4, "SSE: 4 f32 lanes"


def fma_units(flags) -> tuple[int, str]:
    f = set(flags)
    if "avx512f" in f:
        return 2, (
            "assumption: 2 FMA units per core (Intel Xeon Scalable with AVX-512 since Skylake-SP: "
            "FMA on ports 0 and 5)"
        )
    if "fma" in f:
        return 2, "assumption: 2 FMA units per core (Intel since Haswell, AMD since Zen 2)"
    return 1, "assumption: 1 multiply-add unit per core, no FMA flag"


def ukernel_tile(flags) -> tuple[int, str]:
    f = set(flags)
    if "avx512f" in f:
        return 16, "IREE CPU ukernel f32 matmul tile with AVX-512: M0 = N0 = 16 (iree/builtins/ukernel/arch/x86_64, query_tile_sizes)"
    if "avx2" in f or "avx" in f:
        return 8, "IREE CPU ukernel f32 matmul tile with AVX2: M0 = N0 = 8 (iree/builtins/ukernel/arch/x86_64, query_tile_sizes)"
    return 8, "assumption: 8 x 8 f32 matmul tile (IREE ukernels of other ISAs)"


# --------------------------------------------------------------------------------------
# measurements
# --------------------------------------------------------------------------------------


def _llc_bytes(info: CpuInfo) -> int:
    sizes = [c["size_bytes"] for c in info["caches"] if c["type"] in ("Unified", "Data")]
    return max(sizes) if sizes else 32 << 20


def measure_copy_bandwidth(info: CpuInfo, *, threads: int = 1, array_bytes: int | None = None, repeats: int = 5) -> float:
    """GB/s of a STREAM-like copy (2 x bytes moved per copy; best of `repeats`), with
    `threads` copies of their own array in parallel (numpy releases the GIL in copies)."""
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor

    if array_bytes is None:
        # STREAM's rule: arrays several times the last-level cache; capped for memory
        array_bytes = int(min(max(2 * _llc_bytes(info), 64 << 20), 512 << 20))
    per = max(1 << 20, array_bytes // max(1, threads))
    n = per // 8
    srcs = [np.ones(n, dtype=np.float64) for _ in range(threads)]
    dsts = [np.zeros(n, dtype=np.float64) for _ in range(threads)]
    best = 0.0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for _ in range(repeats):
            t0 = time.perf_counter()
            list(pool.map(lambda i: np.copyto(dsts[i], srcs[i]), range(threads)))
            dt = time.perf_counter() - t0
            best = max(best, 2 * 8 * n * threads / dt / 1e9)
    del srcs, dsts
    return best


def _host_path(dev: str) -> str:
    return os.path.join(cache_dir(), "host", f"{dev}.json")


def _load_host(path: str) -> dict:
    """The cached host measurements at `path`: {} when there are none (or they are of
    another format version: measured again); CacheError when the file is corrupt."""
    from .cache import CacheError

    def corrupt(what: str) -> CacheError:
        return CacheError(f"host calibration '{path}' is corrupt ({what}); delete it to measure this machine again")

    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return {}
    except OSError as err:  # a directory, no permission, $COSTMODEL_CACHE_DIR a file ...
        raise CacheError(
            f"cannot read host calibration '{path}' ({err.strerror or err}); point $COSTMODEL_CACHE_DIR at a directory of your own"
        ) from None
    except ValueError as err:
        raise corrupt(str(err).splitlines()[0][:200] if str(err) else type(err).__name__) from None
    if not isinstance(data, dict):
        raise corrupt(f"a JSON {type(data).__name__}, not an object")
    if data.get("version") != HOST_INFO_VERSION:
        return {}
    bad = _invalid_host(data)
    if bad:
        raise corrupt(bad)
    return data


def _numbers(table, name: str, low: float, *, positive: bool) -> str:
    """'' when `table` is a non-empty {str: finite number >= low (> 0 with positive), below
    a day in ns} object, else what is wrong with it."""
    import math

    if not isinstance(table, dict) or not table:
        return f"'{name}' is not a non-empty object"
    for key, v in table.items():
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and low <= v <= 86_400e9
        if not ok or (positive and v <= 0):
            return f"'{name}' [{key!r}] = {v!r}"
    return ""


def _invalid_host(data: dict) -> str:
    """What makes cached host measurements unusable ('' when they are sound)."""
    if "copy_GBps" in data:
        bad = _numbers(data["copy_GBps"], "copy_GBps", 0.0, positive=True)
        if bad:
            return bad
    if "iree" in data:
        iree = data["iree"]
        if not isinstance(iree, dict):
            return "'iree' is not an object"
        for key, kind in (("runtime", str), ("gemm_shape", str), ("chain_max", int)):
            if not isinstance(iree.get(key), kind):
                return f"'iree.{key}' is missing or not a {kind.__name__}"
        for key, positive in (("invocation_ns_by_threads", False), ("dispatch_ns_by_threads", True), ("gemm_GFLOPS_by_threads", True)):
            bad = _numbers(iree.get(key), f"iree.{key}", 0.0, positive=positive)
            if bad:
                return bad
        if set(iree["invocation_ns_by_threads"]) != set(iree["dispatch_ns_by_threads"]):
            return "'iree.invocation_ns_by_threads' and 'iree.dispatch_ns_by_threads' cover different worker counts"
    return ""


def host_measurements(info: CpuInfo | None = None, *, with_iree: bool = True, quick: bool = False) -> dict:
    """The measured facts of this host (bandwidth; IREE dispatch and GEMM calibration),
    measured on first use and cached per device id and IREE version. `quick`: shorter
    measurements (64 MiB copies, one round; for tests), recorded as such."""
    info = detect_cpu() if info is None else info
    dev = device_id(info)
    path = _host_path(dev)
    data = _load_host(path)
    changed = False
    if "copy_GBps" not in data:
        bw = {}
        for t in sorted({1, max(1, info["physical_cores"])}):
            bw[str(t)] = round(measure_copy_bandwidth(info, threads=t, array_bytes=(64 << 20) if quick else None), 2)
        data.update(version=HOST_INFO_VERSION, device=dev, copy_GBps=bw, measured_at=time.strftime("%Y-%m-%d"), quick=quick)
        changed = True
    if with_iree:
        from .ireerun import ProfilingUnavailable, runtime_version

        try:
            rv = runtime_version()
        except ProfilingUnavailable:
            rv = None
        if rv is not None and data.get("iree", {}).get("runtime") != rv:
            from .calibrate import measure_iree_calibration

            data["iree"] = measure_iree_calibration(info, quick=quick)
            changed = True
    if changed:
        from ..ir import write_atomically

        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomically(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())
        except OSError as err:
            from .cache import CacheError

            raise CacheError(
                f"cannot write host calibration '{path}' ({err.strerror or err}); point $COSTMODEL_CACHE_DIR at a directory of your own"
            ) from None
    return data


def describe(info: CpuInfo) -> str:
    isa = [x for x in ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "avx2", "fma", "asimd", "sve") if x in info["flags"]]
    caches = ", ".join(
        f"L{c['level']}{'d' if c['type'] == 'Data' else 'i' if c['type'] == 'Instruction' else ''} {c['size_bytes'] >> 10} KiB"
        for c in info["caches"]
    )
    return (
        f"this machine: {info['model_name']}, {info['physical_cores']} cores / {info['logical_cpus']} CPUs"
        f" at {info['mhz']:g} MHz; ISA {' '.join(isa) or 'baseline'}"
        + (f"; caches per core0: {caches}" if caches else "")
    )


def host_cpu_json(info: CpuInfo | None = None, *, with_iree: bool = True, threads: int | None = None) -> dict:
    """The `host-cpu` spec (hardware.py's schema). `threads`: describe only that many
    cores (what a run pinned to `threads` workers has: peaks and bandwidth scale with it)."""
    info = detect_cpu() if info is None else info
    meas = host_measurements(info, with_iree=with_iree)
    cores_all = max(1, info["physical_cores"])
    cores = cores_all if not threads else max(1, min(int(threads), cores_all))
    lanes, lanes_src = simd_f32_lanes(info["flags"])
    fma, fma_src = fma_units(info["flags"])
    mhz = info["mhz"] or 2000.0
    mhz_src = info["mhz_source"] or "assumption: 2 GHz (no frequency reported)"
    f32 = cores * mhz * 1e6 * lanes * fma * 2 / 1e12
    peak_src = (
        f"{cores} cores x {mhz:g} MHz ({mhz_src}) x {lanes_src} x {fma} FMA units ({fma_src}) x 2 flops"
        f" = {f32:.4g} TFLOP/s"
    )
    matrix = {"f32": {"value": round(f32, 6), "source": peak_src}, "f64": {"value": round(f32 / 2, 6), "source": peak_src + "; f64: half the lanes"}}
    vector = {"f32": {"value": round(f32, 6), "source": peak_src}, "f64": {"value": round(f32 / 2, 6), "source": peak_src + "; f64: half the lanes"}}
    if "avx512_bf16" in info["flags"]:
        matrix["bf16"] = {
            "value": round(2 * f32, 6),
            "source": peak_src + "; bf16 dots: VDPBF16PS does 2 bf16 products per f32 lane (avx512_bf16), 2x f32; AMX not counted",
        }
    bw_all = meas["copy_GBps"]
    key = str(cores) if str(cores) in bw_all else max(bw_all, key=lambda k: int(k))
    bw = max(bw_all[key], bw_all.get("1", 0.0)) if cores == cores_all else bw_all.get(str(cores), bw_all[key])
    spec = {
        "name": HOST_CPU,
        "description": describe(info) + (f" (a {cores}-core share of it)" if cores != cores_all else ""),
        "memory_bandwidth_GBps": {
            "value": round(bw, 3),
            "source": (
                f"measured on this machine ({meas.get('measured_at', '?')}): STREAM-like numpy copy, 2 x bytes per copy, "
                f"best of 5; by threads {json.dumps(bw_all, sort_keys=True)} GB/s"
            ),
        },
        "memory_capacity_GiB": {
            "value": round(max(info["memory_bytes"], 1 << 20) / (1 << 30), 3),
            "source": "/proc/meminfo MemTotal",
        },
        "matrix_peak_TFLOPS": matrix,
        "vector_peak_TFLOPS": vector,
    }
    iree = meas.get("iree")
    if iree:
        tile, tile_src = ukernel_tile(info["flags"])
        by_threads = iree.get("gemm_GFLOPS_by_threads", {})
        gflops = by_threads.get(str(cores)) or max(by_threads.values())
        eff = min(1.0, gflops / (f32 * 1e3))
        from .calibrate import default_clock

        disp = iree["dispatch_ns_by_threads"]
        launch = disp.get(f"{cores}:{default_clock(cores)}") or disp.get("1:cpu") or max(disp.values())
        spec["calibration"] = {
            "matrix_efficiency": {
                "value": round(max(eff, 1e-3), 4),
                "source": (
                    f"measured on this machine: IREE llvm-cpu f32 GEMM {iree['gemm_shape']} reaches {gflops:.1f} GFLOP/s "
                    f"with {cores} workers, of the {f32 * 1e3:.1f} GFLOP/s peak ({iree['runtime']})"
                ),
            },
            "memory_efficiency": {
                "value": 1.0,
                "source": "the memory bandwidth above is itself a measured streaming copy",
            },
            "kernel_launch_ns": {
                "value": round(max(launch, 1.0), 1),
                "source": (
                    "measured on this machine: marginal time of one more dispatch in an IREE program "
                    f"(slope of a chain of 1..{iree['chain_max']} tiny dependent dispatches, {iree['runtime']})"
                ),
            },
            "compute_memory_overlap": {
                "value": 1.0,
                "source": "assumption: an out-of-order core with hardware prefetch overlaps a kernel's loads with its arithmetic (the roofline's max)",
            },
            "compute_units": {"value": cores, "source": "physical cores (/proc/cpuinfo core ids)"},
            "gemm_tile_m": {"value": tile, "source": tile_src},
            "gemm_tile_n": {"value": tile, "source": tile_src},
            "gemm_tile_min": {"value": tile, "source": tile_src},
        }
    return spec

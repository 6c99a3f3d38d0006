"""The `calibrated` backend: the roofline of a kernel, corrected by what the hardware
measurably reaches, from the hardware spec's `calibration` block (every value with its
source; none is fitted to a step time).

Per kernel (costmodel.kernels.Kernel):

    compute_ns = sum over (unit, dtype) of work / peak(unit, dtype)
                 (matrix work divided further by matrix_efficiency x tile efficiency)
    memory_ns  = external bytes / (memory_bandwidth x memory_efficiency)
    time_ns    = compute_ns + memory_ns - overlap x min(compute_ns, memory_ns)
                 + launches x kernel_launch_ns

The combination of compute and memory time and the launch term are XLA's own GPU
performance model (gpu_performance_model_base: kMemoryComputeParallelism,
kKernelLaunchOverhead). Tile efficiency is wave quantization: a GEMM (a convolution
as an implicit GEMM: M = batch x output pixels, N = output features) is cut into
gemm_tile_m x gemm_tile_n output tiles spread over compute_units; the last wave runs
partly empty:

    tiles = ceil(M / tm) x ceil(N / tn) x batch,  waves = ceil(tiles / units)
    tile_efficiency = (M x N x batch) / (waves x units x tm x tn)

which also covers padding of small matrices to whole tiles (TPU MXUs: 128 x 128). As an
autotuner would, the backend takes the best of the configured tile, its transpose and
its halvings down to gemm_tile_min (GPU libraries ship 64-wide tiles; an MXU is 128).

Channel padding (specs with gemm_tile_k): an implicit-GEMM convolution walks K filter
tap by filter tap, gemm_tile_k input channels at a time (CUTLASS's
implicit_gemm_k_iterations: taps x ceil(C / tile_k)), so a convolution with C input
channels per tap does useful work in C / (ceil(C / tile_k) x tile_k) of its K steps:
an image stem (C = 3) in 3 of 64.

Channel count (specs with conv_channel_multiple, the NVIDIA presets): cuDNN's tensor-core
kernels take 16-bit convolutions with C input channels a multiple of 8; for others it
pads C in its workspace (a memset of the padded buffer, then a kernel that reads the
activations and writes them into it: our H200 profile of the ResNet stem, C = 3), and a
filter gradient then
computes the filter of the padded channels (its M is C x filter taps):

    C' = ceil(C / multiple) x multiple
    padding_ns = activations x (1 + 2 C' / C) / bandwidth + 2 launches (a memset and a
                 padding kernel, in sequence before the convolution)
    filter gradient: M and its matrix work x C' / C

Library-call idle (specs with library_call_idle_ns, measured): a convolution is a cuDNN
call that XLA launches on its own, between the command buffers of its fusions; the GPU
idles at its boundaries and between its kernels, and each convolution kernel adds that
time once.

An XLA-compiled module's library calls (cuBLAS GEMMs, cuDNN convolutions: custom calls)
and its given fusions holding one dot or convolution get all of this as the dot or
convolution they run: kernel formation gives their kernels that op's GEMM shape and
convolution direction (rules.cublas_gemm_rule, cudnn_conv_rule).

docs/backends.md has the derivation and the sources.
"""

from __future__ import annotations

import math

from ..hardware import HardwareSpec
from ..rules import MATRIX, OpCost
from . import BackendError, KernelCost

# K extent of one CUTLASS/cuBLAS tensor-core tile (ThreadblockShape<128, 256, 64>): a
# split-K slice keeps at least this much of K.
SPLIT_K_TILE = 64

REQUIRED = (
    "matrix_efficiency",
    "memory_efficiency",
    "kernel_launch_ns",
    "compute_memory_overlap",
    "compute_units",
    "gemm_tile_m",
    "gemm_tile_n",
)


class CalibratedBackend:
    name = "calibrated"
    options = {}

    def __init__(self, hardware: HardwareSpec, **unknown: str) -> None:
        if unknown:
            key = sorted(unknown)[0]
            raise BackendError(f"backend 'calibrated' has no option '{key}' (it takes none)")
        cal = hardware.calibration
        missing = [k for k in REQUIRED if k not in cal]
        if missing:
            raise BackendError(
                f"backend 'calibrated' needs the hardware spec's 'calibration' block; "
                f"'{hardware.name}' lacks {', '.join(missing)} (see docs/backends.md)"
            )
        self.hardware = hardware
        self.matrix_efficiency = cal["matrix_efficiency"]
        self.memory_efficiency = cal["memory_efficiency"]
        self.launch_ns = cal["kernel_launch_ns"]
        self.overlap = cal["compute_memory_overlap"]
        self.units = int(cal["compute_units"])
        self.tile_m = int(cal["gemm_tile_m"])
        self.tile_n = int(cal["gemm_tile_n"])
        self.tile_min = int(cal.get("gemm_tile_min", min(self.tile_m, self.tile_n)))
        self.tile_k = int(cal["gemm_tile_k"]) if "gemm_tile_k" in cal else None
        self.channel_multiple = int(cal["conv_channel_multiple"]) if "conv_channel_multiple" in cal else None
        # narrow tiles (a side of gemm_tile_min): their own rate and K depth, where measured
        self.narrow_efficiency = cal.get("gemm_narrow_tile_efficiency")
        self.narrow_tile_k = int(cal["gemm_narrow_tile_k"]) if "gemm_narrow_tile_k" in cal else None
        # atomic read-modify-write per element a scatter updates, where measured
        self.scatter_element_ns = cal.get("scatter_element_ns", 0.0)
        # the GPU's idle time at and within a convolution library call launched on its own
        # (a cuDNN call between XLA's command buffers), where measured
        self.library_call_idle_ns = cal.get("library_call_idle_ns", 0.0)
        self._plans: dict = {}
        self._tile_shapes = self._tiles()
        self._bytes_per_ns = hardware.memory_bandwidth_GBps * self.memory_efficiency
        self._peak: dict = {}

    def _flops_per_ns(self, unit: str, dtype: str) -> float:
        key = (unit, dtype)
        v = self._peak.get(key)
        if v is None:
            v = self.hardware.peak_TFLOPS("matrix" if unit == MATRIX else "vector", dtype) * 1e3
            self._peak[key] = v
        return v

    def _tiles(self):
        """Tile shapes the library may pick: the configured one, its transpose, and
        halvings of each side down to gemm_tile_min (autotuners pick per shape)."""
        out = set()
        for tm, tn in ((self.tile_m, self.tile_n), (self.tile_n, self.tile_m)):
            a = tm
            while a >= self.tile_min:
                b = tn
                while b >= self.tile_min:
                    out.add((a, b))
                    b //= 2
                a //= 2
        return sorted(out, reverse=True)

    def narrow(self, tm: int, tn: int) -> bool:
        """A tile with a side of gemm_tile_min elements, on a spec that times such tiles
        apart (gemm_narrow_tile_efficiency)."""
        return self.narrow_efficiency is not None and min(tm, tn) <= self.tile_min < max(self.tile_m, self.tile_n)

    def plan(
        self, m: int, n: int, k: int = 1, batch: int = 1, channels_per_tap=None, conv: bool = False, dtype: str = "bf16"
    ) -> tuple:
        """The best plan the library can pick for an M x N x K GEMM (`batch` of them, of
        `dtype`; with `conv`, an implicit-GEMM convolution, `channels_per_tap` input
        channels per filter tap): (tile efficiency, split-K factor, narrow-tile efficiency,
        channel efficiency). The plan is the fastest: its 2 x M x N x K flops at the
        calibrated matrix rate times those three efficiencies, plus, when K is split, the
        f32 partial sums written and read back once at the calibrated bandwidth (so a
        short K is not split).

        Tile efficiency is the useful fraction of the tile slots of the GEMM's waves (1.0 =
        no quantization loss). When the output has fewer tiles than compute units,
        libraries split K over several tiles (CUTLASS split-K / stream-K; cuDNN weight
        gradients) as long as each split keeps a whole K tile (SPLIT_K_TILE): s splits
        give tiles x s work units of K / s each; s is the most that fit in one wave, or
        one more (a second, partly empty wave). A convolution's narrow tile (a side of
        gemm_tile_min) runs at gemm_narrow_tile_efficiency of the rate and walks K
        gemm_narrow_tile_k deep, where the spec has them (channel_efficiency): measured on
        cuDNN's convolution kernels; cuBLAS and Triton GEMMs pick from finer tile shapes
        (80x128, 144x128, 192x96 in our LLaMA profile), and are timed as before."""
        m, n, k, batch = max(1, m), max(1, n), max(1, k), max(1, batch)
        key = (m, n, k, batch, channels_per_tap, conv, dtype)
        hit = self._plans.get(key)
        if hit is not None:
            return hit
        flops = 2.0 * m * n * k * batch
        flops_per_ns = self._flops_per_ns(MATRIX, dtype) * self.matrix_efficiency
        best, best_plan = math.inf, (0.0, 1, 1.0, 1.0)
        max_split = max(1, k // SPLIT_K_TILE)
        for tm, tn in self._tile_shapes:
            tiles = math.ceil(m / tm) * math.ceil(n / tn) * batch
            cands = {1}
            if tiles < self.units and max_split > 1:
                cands.add(min(max_split, self.units // tiles))
                cands.add(min(max_split, math.ceil(self.units / tiles)))
            narrow = conv and self.narrow(tm, tn)
            rate = self.narrow_efficiency if narrow else 1.0
            tile_k = self.narrow_tile_k if narrow and self.narrow_tile_k else self.tile_k
            chan = self.channel_efficiency(channels_per_tap, tile_k)
            for s_ in sorted(cands):
                waves = math.ceil(tiles * s_ / self.units)
                eff = min(1.0, (m * n * batch * s_) / (waves * self.units * tm * tn))
                t = flops / (flops_per_ns * eff * rate * chan)
                if s_ > 1:
                    t += 2 * 4 * m * n * batch * s_ / self._bytes_per_ns
                if t < best * (1 - 1e-12):
                    best, best_plan = t, (eff, s_, rate, chan)
        self._plans[key] = best_plan
        return best_plan

    def gemm_plan(self, m: int, n: int, k: int = 1, batch: int = 1) -> tuple[float, int]:
        """(tile efficiency, split-K factor) of the best plan for a GEMM (`plan`)."""
        eff, split, _rate, _chan = self.plan(m, n, k, batch)
        return eff, split

    def tile_efficiency(self, m: int, n: int, batch: int = 1, k: int = 1) -> float:
        return self.gemm_plan(m, n, k, batch)[0]

    def channel_efficiency(self, channels_per_tap, tile_k: int | None = None) -> float:
        """Useful fraction of an implicit-GEMM convolution's K steps: each filter tap's
        channels padded to whole K tiles (gemm_tile_k, or `tile_k`). 1.0 for dots,
        grouped convolutions and specs without gemm_tile_k."""
        tile_k = tile_k or self.tile_k
        if not channels_per_tap or tile_k is None:
            return 1.0
        c = int(channels_per_tap)
        return c / (math.ceil(c / tile_k) * tile_k)

    def channel_padding(self, gemm) -> int | None:
        """The input channels a 16-bit forward convolution or filter gradient runs with
        when the spec's conv_channel_multiple does not divide its own (None: unpadded)."""
        if gemm is None or self.channel_multiple is None or gemm.conv_kind not in ("forward", "backward_filter"):
            return None
        c = gemm.conv_channels
        if not c or gemm.dtype not in ("bf16", "f16") or c % self.channel_multiple == 0:
            return None
        return math.ceil(c / self.channel_multiple) * self.channel_multiple

    def _time(self, flops_by_unit: dict, nbytes: int, launches: int, gemm, scatter_elements: int = 0) -> KernelCost:
        compute_ns = 0.0
        tile_eff = None
        chan_eff = 1.0
        narrow_eff = 1.0
        split = 1
        m = gemm.m if gemm is not None else 0
        padded = self.channel_padding(gemm)
        scale = 1.0  # matrix work of the padded channels
        padding_ns = 0.0
        if padded is not None:
            c = gemm.conv_channels
            # two kernels before the convolution, in sequence (our H200 profile of the
            # stem, both directions): a memset of the padded buffer, then the activations
            # read and written into it
            padded_bytes = gemm.conv_activation_bytes * padded // c
            padding_ns = (padded_bytes + gemm.conv_activation_bytes + padded_bytes) / self._bytes_per_ns + 2 * self.launch_ns
            if gemm.conv_kind == "backward_filter":  # M = C x filter taps
                m = gemm.m // c * padded
                scale = padded / c
        for (unit, dtype), work in flops_by_unit.items():
            rate = self._flops_per_ns(unit, dtype)
            if unit == MATRIX:
                if gemm is not None:
                    tile_eff, split, narrow_eff, chan_eff = self.plan(
                        m, gemm.n, gemm.k, gemm.batch, gemm.channels_per_tap, conv=bool(gemm.conv_kind), dtype=dtype
                    )
                rate *= self.matrix_efficiency * (tile_eff if tile_eff is not None else 1.0) * narrow_eff * chan_eff
                work = work * scale
            compute_ns += work / rate
        if split > 1:  # split-K partial sums (f32) written and read back once
            nbytes += 2 * 4 * m * gemm.n * gemm.batch * split
        memory_ns = nbytes / self._bytes_per_ns
        scatter_ns = scatter_elements * self.scatter_element_ns
        memory_ns += scatter_ns
        launch_ns = self.launch_ns * max(1, launches)
        idle_ns = self.library_call_idle_ns if gemm is not None and gemm.conv_kind else 0.0
        t = compute_ns + memory_ns - self.overlap * min(compute_ns, memory_ns) + launch_ns + padding_ns + idle_ns
        if launch_ns >= max(compute_ns, memory_ns):
            bound = "overhead"
        else:
            bound = "compute" if compute_ns >= memory_ns else "memory"
        detail = {"launch_ns": launch_ns}
        if tile_eff is not None:
            detail["tile_efficiency"] = round(tile_eff, 6)
            detail["split_k"] = split
        if narrow_eff < 1.0:
            detail["narrow_tile_efficiency"] = round(narrow_eff, 6)
        if chan_eff < 1.0:
            detail["channel_efficiency"] = round(chan_eff, 6)
        if padded is not None:
            detail["padded_channels"] = padded
            detail["padding_ns"] = padding_ns
        if (gemm is not None and gemm.conv_kind and gemm.channels_per_tap
                and gemm.channels_per_tap % 8 and (self.tile_k is None or self.channel_multiple is None)):
            # a spec without the library's K tile or channel padding runs such a
            # convolution (the 3-channel image stem) unpadded: `costmodel predict` says so
            detail["unpadded_channels"] = int(gemm.channels_per_tap)
        if scatter_ns:
            detail["scatter_atomic_ns"] = scatter_ns
        if idle_ns:
            detail["library_idle_ns"] = idle_ns
        return KernelCost(t, bound, detail)

    def estimate_kernel(self, kernel) -> KernelCost:
        return self._time(kernel.flops_by_unit, kernel.bytes_read + kernel.bytes_written, kernel.launches, kernel.gemm,
                          getattr(kernel, "scatter_elements", 0))

    def estimate(self, cost: OpCost) -> tuple[float, str]:
        """One op as its own kernel (fusion=none)."""
        work = cost.flops + cost.transcendentals
        if not work and not cost.bytes_read and not cost.bytes_written:
            return 0.0, "overhead"  # bookkeeping (return, tuple plumbing): no kernel
        by_unit = {(cost.unit, cost.dtype): work} if work else {}
        kc = self._time(by_unit, cost.bytes_read + cost.bytes_written, 1, None, cost.extra.get("atomic_elements", 0))
        return kc.time_ns, kc.bound

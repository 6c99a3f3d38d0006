"""Communication time model with the semantics of ASTRA-sim's analytical congestion-unaware backend.

    t_ns, algorithm = collective_time_ns(system, kind, comm_bytes, group)

Every formula is in docs/communication-model.md. In short, for a collective over a group
of ranks on a `SystemSpec`:

1. Placement (`plan_collective`). A group equal to all ranks, or one that is a full
   "fibre" of some dimensions (all coordinates of the involved dimensions, fixed
   coordinates elsewhere), runs hierarchically over the involved dimensions, as ASTRA-sim
   does with `involved_dim` and no communicator group. Any other group runs as ASTRA-sim
   runs a communicator group smaller than the machine: one logical ring over the group's
   ranks in the order given (`flat`), each message routed in the first dimension where
   sender and receiver differ, with ASTRA-sim's fixed 10 ns local injection delay (a
   calibrated system: in the slowest of the dimensions they differ in, the ring at its
   slowest link; docs/communication-model.md).
2. Chunking: the buffer is split into `preferred_dataset_splits` chunks (at least
   `num_npus` bytes each unless all-gather, as Sys::determine_chunk_size); each chunk
   is a stream of phases (one per involved dimension; all-reduce with `localBWAware` is
   reduce-scatter up the dimensions, all-reduce in the last, all-gather back down).
   A dimension runs at most `active_chunks_per_dimension` streams at a time, FIFO, and
   streams do not slow each other (congestion-unaware); the collective ends when its
   last stream does.
3. A phase on one dimension of n ranks: for the ring algorithm exactly ASTRA-sim's
   Ring.cc event sequence: S sends of `msg` bytes, each taking
   `floor(hops * latency + msg / bandwidth)` ns (bandwidth in 2^30 B/s, as the analytical
   network converts GB/s), S + 1 injections of `endpoint_delay` ns, and a local reduction
   of `3 * floor(msg / local_mem_bw)` ns for each reduced message. Direct,
   halving-doubling and double-binary-tree phases use alpha-beta formulas with the same
   per-message costs (approximations, see the doc).

Point-to-point kinds (send, recv, collective_permute) take one network message (ASTRA-sim's
COMM_SEND/COMM_RECV), collective_broadcast a binomial tree of messages (ASTRA-sim replays
broadcasts from the node duration, so there is nothing to match).

Calibration (a system spec's `calibration` block, docs/communication-model.md): every
message on a calibrated dimension runs at the achievable bandwidth `bandwidth *
bus_efficiency` (the value network.yml holds, so ASTRA-sim sees it too) and its local
reduction is not charged (the measured busbw includes it: NCCL reduces inside the copy
kernel); a communication op that moves data costs `collective_latency_ns` more, once (XLA's
NCCL kernel launch overhead, and NCCL's base latency where the spec has no protocols;
ASTRA-sim has no such term); a calibrated step latency replaces the per-message latency;
with `protocols` (NCCL's LL / LL128 / Simple) the collective is priced once per protocol,
with its base latency, step latencies and share of the bandwidth, and runs with the
fastest. Without the block nothing changes and the times are bit-for-bit ASTRA-sim's.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from .systems import IMPLEMENTATIONS, NetworkDim, SystemSpec, astra_bandwidth

__all__ = [
    "KINDS",
    "ALGORITHMS",
    "ALGORITHM_NAMES",
    "resolve_algorithm",
    "implements",
    "CommModelError",
    "collective_time_ns",
    "plan_collective",
    "CollectivePlan",
    "phase_time_ns",
    "message_time_ns",
]

KINDS = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "collective_broadcast",
    "send",
    "recv",
)
_COLLECTIVE_KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")

# The names `extract-collectives algorithm=` documents -> ASTRA-sim implementations (the
# system spec's names, systems.IMPLEMENTATIONS, are accepted as they are too).
ALGORITHMS = {
    "ring": "ring",
    "tree": "doubleBinaryTree",
    "direct": "direct",
    "halving_doubling": "halvingDoubling",
}
ALGORITHM_NAMES = tuple(dict.fromkeys([*ALGORITHMS, *IMPLEMENTATIONS]))

# MemBus::send_from_*: a "Local" (communicator-group) ring injects with a fixed 10 ns.
LOCAL_INJECTION_NS = 10


class CommModelError(ValueError):
    """Bad arguments to the communication model (unknown kind, rank outside the system ...)."""


@dataclass(frozen=True)
class CollectivePlan:
    """How ASTRA-sim runs a collective over a group.

    `involved_dims`: one bool per network dimension for the hierarchical case (what the
    Chakra exporter writes as `involved_dim`, with no communicator group), None when the
    group runs as a flat ring (`flat`, written as a communicator group)."""

    group: tuple[int, ...]
    involved_dims: tuple[bool, ...] | None
    flat: bool


def _bw_Bpns(dim: NetworkDim, links: int = 1) -> float:
    # astra-network-analytical bw_GBps_to_Bpns: bw * 2^30 / 1e9, on the value network.yml holds
    # (times the bandwidth factor of the protocol priced, 1.0 outside `_protocol_variants`);
    # `links`: links driven at once (the rings of a calibrated FullyConnected dimension), the
    # protocol's cap on their total
    factor = dim.bandwidth_factor
    if links > 1:
        factor *= links
        if dim.bandwidth_cap_factor is not None:
            factor = min(factor, dim.bandwidth_cap_factor)
    return astra_bandwidth(dim) * factor * (1 << 30) / 1_000_000_000


def message_time_ns(dim: NetworkDim, hops: int, nbytes: int, links: int = 1) -> int:
    """One message in the congestion-unaware network: floor(hops * latency + bytes / bandwidth),
    bandwidth the dimension's achievable one (`bandwidth_GBps * bus_efficiency`, as network.yml).
    On a dimension with a calibrated `step_latency_ns` a message carries no latency of its
    own: the collective pays that latency once per step (`_step_latency_ns`). `links` > 1:
    the message is split over that many links side by side (`_ring_links`)."""
    if nbytes <= 0 and hops <= 0:
        return 0
    latency = 0.0 if dim.step_latency_ns is not None else hops * dim.latency_ns
    return int(latency + nbytes / _bw_Bpns(dim, links))


def _ring_links(system: SystemSpec, kind: str, dim: NetworkDim, n: int) -> int:
    """Links a rank's ring phase over n ranks of `dim` drives at once.

    ASTRA-sim's ring sends to one neighbour: one link (uncalibrated systems keep that). On a
    calibrated system a FullyConnected dimension has a link to every peer, and NCCL / RCCL
    run several rings (channels) over different orderings of the ranks, so a rank's n - 1
    links all carry the collective's data: its bus bandwidth is (n - 1) x per-pair
    bandwidth x bus_efficiency, which is how the presets' bus_efficiency is defined
    (a measured busbw over the aggregate per-GPU bandwidth; mi300x-x8: 312.9 of 7 x 64 GB/s).
    An all-to-all's ring relays messages through its neighbours: one link."""
    if system.calibration is None or dim.topology != "FullyConnected" or n <= 2 or kind == "all_to_all":
        return 1
    return n - 1


def _phase_steps(kind: str, impl: str, n: int) -> int:
    """The sequential message steps of one phase over n ranks: what a calibrated
    `step_latency_ns` is paid for (NCCL's tuner: nsteps x hwLat; a ring all-reduce takes
    2 (n - 1) steps, an all-gather or reduce-scatter n - 1)."""
    base, window = _impl_base(impl)
    if base in ("ring", "oneRing"):
        return _ring_counts(kind, n, n)[0]
    if base in ("direct", "oneDirect"):
        w = n - 1 if window is None else max(1, min(window, n - 1))
        rounds = math.ceil((n - 1) / w)
        return 2 * rounds if kind == "all_reduce" else rounds
    if base in ("halvingDoubling", "oneHalvingDoubling"):
        steps = max(1, math.ceil(math.log2(n)))
        return 2 * steps if kind == "all_reduce" else steps
    if base == "doubleBinaryTree":
        return 2 * max(1, math.ceil(math.log2(n)))
    return 0


def _step_latency_ns(steps: list[tuple[NetworkDim, int]]) -> float:
    """Sum of steps x step_latency_ns over the (dimension, steps) of a collective's phases,
    for the dimensions with a calibrated step latency (once per collective, not per chunk:
    NCCL pipelines a message's chunks through the ring's steps)."""
    return float(sum(k * dim.step_latency_ns for dim, k in steps if dim.step_latency_ns is not None))


def _link(system: SystemSpec, src: int, dst: int) -> tuple[NetworkDim, int]:
    """The dimension a message src -> dst is priced on and its hop count.

    ASTRA-sim routes it in the first dimension where the coordinates differ (uncalibrated
    systems keep that). On a calibrated system a message between ranks that differ in
    several dimensions crosses each of them and runs at the slowest (the lowest bandwidth;
    of equals, the outer dimension): GPU 7 to GPU 8 of two 8-GPU nodes is an InfiniBand
    message, not an NVLink one."""
    a, b = system.coords(src), system.coords(dst)
    differ = [d for d in range(len(system.dims)) if a[d] != b[d]]
    if not differ:
        raise CommModelError(f"ranks {src} and {dst} are the same device")
    d = differ[0]
    if system.calibration is not None and len(differ) > 1:
        d = min(reversed(differ), key=lambda j: _bw_Bpns(system.dims[j]))
    dim = system.dims[d]
    return dim, dim.hops(a[d], b[d])


def _reduction_ns(system: SystemSpec, msg: int, dim: NetworkDim | None = None) -> int:
    """PacketBundle::call: write + read + read of the message at local-mem-bw.

    0 on a calibrated dimension: its bus_efficiency comes from a measured busbw, which
    already includes the reduction (NCCL reduces inside the copy kernel, overlapped with
    the link transfers), so charging ASTRA-sim's serialized local reduction too would count
    it twice."""
    if dim is not None and dim.calibrated:
        return 0
    bw = system.astra_sim.local_mem_bw_GBps * 1e9
    return 3 * int(msg / bw * 1e9)


# ---------------------------------------------------------------------------
# placement


def plan_collective(system: SystemSpec, group) -> CollectivePlan:
    group = tuple(int(r) for r in group)
    n = system.num_npus
    for r in group:
        if not 0 <= r < n:
            raise CommModelError(f"rank {r} is outside system '{system.name}' ({n} NPUs)")
    if len(set(group)) != len(group):
        raise CommModelError(f"group {list(group)} names a rank twice")
    if len(group) <= 1:
        return CollectivePlan(group, tuple(False for _ in system.dims), False)
    coords = [system.coords(r) for r in group]
    involved = tuple(len({c[d] for c in coords}) > 1 for d in range(len(system.dims)))
    expected = math.prod(dim.npus_count for dim, inv in zip(system.dims, involved) if inv)
    fixed_ok = all(
        len({c[d] for c in coords}) == 1 for d in range(len(system.dims)) if not involved[d]
    )
    if fixed_ok and expected == len(group):
        return CollectivePlan(group, involved, False)
    return CollectivePlan(group, None, True)


# ---------------------------------------------------------------------------
# one phase on one dimension


def _ring_counts(kind: str, n: int, data: int) -> tuple[int, int, int, int]:
    """(sends, reduced messages, message bytes, data size after the phase) of Ring.cc."""
    if kind == "all_reduce":
        return 2 * (n - 1), n - 1, data // n, data
    if kind == "reduce_scatter":
        return n - 1, n - 1, data // n, data // n
    if kind == "all_gather":
        return n - 1, 0, data, data * n
    if kind == "all_to_all":
        return n * (n - 1) // 2, 0, data // n, data
    raise CommModelError(f"no ring phase for '{kind}'")


def resolve_algorithm(name: str) -> str:
    """An algorithm name (`tree`, `halving_doubling`, or an ASTRA-sim implementation such as
    `doubleBinaryTree`, `direct4`) -> the ASTRA-sim implementation; CommModelError if unknown."""
    impl = ALGORITHMS.get(name, name)
    if impl in IMPLEMENTATIONS:
        return impl
    for base in ("oneDirect", "direct"):  # direct<window>: messages in flight
        rest = impl[len(base):]
        if impl.startswith(base) and rest.isascii() and rest.isdigit() and int(rest) >= 1:
            return impl
    raise CommModelError(f"unknown collective implementation '{name}' (known: {', '.join(ALGORITHM_NAMES)})")


def implements(impl: str, kind: str) -> bool:
    """Whether implementation `impl` runs collectives of `kind` (as the system spec rules:
    a double binary tree is an all-reduce; halving-doubling has no all-to-all)."""
    base, _ = _impl_base(impl)
    if base == "doubleBinaryTree":
        return kind == "all_reduce"
    if base in ("halvingDoubling", "oneHalvingDoubling"):
        return kind in ("all_reduce", "all_gather", "reduce_scatter")
    return kind in _COLLECTIVE_KINDS


def _impl_base(impl: str) -> tuple[str, int | None]:
    for base in ("oneDirect", "direct"):
        if impl.startswith(base):
            rest = impl[len(base):]
            return base, (int(rest) if rest else None)
    return impl, None


def phase_time_ns(
    system: SystemSpec,
    kind: str,
    impl: str,
    dim: NetworkDim,
    n: int,
    data: int,
    injection_ns: float,
) -> tuple[float, int]:
    """(time, data size after) of one phase of `kind` over n ranks of `dim` (neighbours 1 apart)."""
    base, window = _impl_base(impl)
    if base in ("ring", "oneRing"):
        sends, reduced, msg, after = _ring_counts(kind, n, data)
        hop = dim.hops(0, 1)
        links = _ring_links(system, kind, dim, n)
        t = sends * message_time_ns(dim, hop, msg, links) + (sends + 1) * injection_ns
        t += reduced * _reduction_ns(system, msg, dim)
        return float(t), after
    if base in ("direct", "oneDirect"):
        # AllToAll.cc: n-1 peers, `window` messages in flight (default n-1), no congestion:
        # a round costs the farthest peer's message; reductions of a round overlap.
        w = n - 1 if window is None else max(1, min(window, n - 1))
        rounds = math.ceil((n - 1) / w)
        far = max(dim.hops(0, j) for j in range(1, n))
        if kind == "all_gather":
            msg, after = data, data * n
        else:
            msg = data // n
            after = data // n if kind == "reduce_scatter" else data
        if system.calibration is not None and dim.topology == "Switch":
            # the messages of a round leave through the NPU's one port to the switch and share
            # its bandwidth (ASTRA-sim's congestion-unaware network runs them side by side):
            # an all-to-all over NVSwitch moves (n-1)/n of the buffer through that port
            step = message_time_ns(dim, far, w * msg) + injection_ns
        else:
            step = message_time_ns(dim, far, msg) + injection_ns
        red = _reduction_ns(system, msg, dim)
        if kind == "all_reduce":
            t = rounds * (step + red) + rounds * step + injection_ns
        elif kind == "reduce_scatter":
            t = rounds * (step + red) + injection_ns
        else:
            t = rounds * step + injection_ns
        return float(t), after
    if base in ("halvingDoubling", "oneHalvingDoubling"):
        steps = max(1, math.ceil(math.log2(n)))
        t = injection_ns
        if kind in ("reduce_scatter", "all_reduce"):
            for k in range(1, steps + 1):
                msg = data >> k
                t += injection_ns + message_time_ns(dim, dim.hops(0, (1 << (k - 1)) % n or 1), msg)
                t += _reduction_ns(system, msg, dim)
        if kind in ("all_gather", "all_reduce"):
            shard = data // n if kind == "all_reduce" else data
            for k in range(steps):
                msg = shard << k
                t += injection_ns + message_time_ns(dim, dim.hops(0, (n >> (k + 1)) or 1), msg)
        after = {"all_reduce": data, "reduce_scatter": data // n, "all_gather": data * n}.get(kind)
        if after is None:
            raise CommModelError("halvingDoubling has no all_to_all")
        return float(t), after
    if base == "doubleBinaryTree":
        # two trees, each reducing then broadcasting half the buffer; depth ceil(log2 n)
        depth = max(1, math.ceil(math.log2(n)))
        msg = data // 2
        hop = dim.hops(0, 1)
        step = message_time_ns(dim, hop, msg) + injection_ns
        t = depth * (step + _reduction_ns(system, msg, dim)) + depth * step + injection_ns
        return float(t), data
    raise CommModelError(f"unknown collective implementation '{impl}'")


# ---------------------------------------------------------------------------
# chunks and streams


def _chunks(system: SystemSpec, kind: str, size: int) -> tuple[int, int]:
    """(number of chunks, bytes per chunk) as Sys::determine_chunk_size / generate_collective."""
    splits = system.astra_sim.preferred_dataset_splits
    chunk = size // splits
    if kind != "all_gather" and system.num_npus > chunk:
        chunk = system.num_npus
        size = splits * chunk
    chunk = max(1, chunk)
    return math.ceil(size / chunk), chunk


def _phases(system: SystemSpec, kind: str, involved: tuple[bool, ...], sizes: tuple[int, ...] | None = None):
    """[(queue dimension, phase kind, implementation, dimension, n)] of one stream; `sizes`:
    the ranks taking part per dimension (default: all of its npus_count)."""
    if sizes is not None:
        return [(q, pk, impl, dim, sizes[q]) for q, pk, impl, dim, _n in _phases(system, kind, involved)]
    dims = [d for d in range(len(system.dims)) if involved[d] and system.dims[d].npus_count > 1]
    impls = system.collectives[kind]
    first = impls[dims[0]] if dims else "ring"
    if first.startswith("one"):
        # oneRing / oneDirect / oneHalvingDoubling: one logical ring over every NPU; ring
        # neighbours r, r+1 always differ in dimension 0.
        return [(0, kind, first, system.dims[0], system.num_npus)]
    out = []
    if kind == "all_gather":
        for d in reversed(dims):
            out.append((d, "all_gather", impls[d], system.dims[d], system.dims[d].npus_count))
    elif kind == "all_reduce" and system.astra_sim.collective_optimization == "localBWAware":
        for d in dims[:-1]:
            out.append((d, "reduce_scatter", _rs_impl(impls[d]), system.dims[d], system.dims[d].npus_count))
        last = dims[-1]
        out.append((last, "all_reduce", impls[last], system.dims[last], system.dims[last].npus_count))
        for d in reversed(dims[:-1]):
            out.append((d, "all_gather", _rs_impl(impls[d]), system.dims[d], system.dims[d].npus_count))
    else:
        for d in dims:
            out.append((d, kind, impls[d], system.dims[d], system.dims[d].npus_count))
    return out


def _rs_impl(impl: str) -> str:
    # a double binary tree only implements all-reduce; ASTRA-sim would build a Ring-shaped
    # phase on a tree topology here, which we model as ring
    return "ring" if impl == "doubleBinaryTree" else impl


def _run_streams(num_streams: int, phase_times: list[tuple[int, float]], capacity: int) -> float:
    """Makespan of identical streams through FIFO per-dimension queues of `capacity` slots.

    All streams enter the queue of their first phase at t=0, in order; a stream that
    finishes a phase joins the back of the next phase's queue (StreamBaseline /
    SchedulerUnit with one queue per dimension)."""
    if num_streams == 0 or not phase_times:
        return 0.0
    queues: dict[int, list] = {}
    running: dict[int, int] = {}
    events: list = []
    seq = 0

    def enqueue(stream: int, p: int, now: float) -> None:
        q = phase_times[p][0]
        queues.setdefault(q, []).append((stream, p))
        running.setdefault(q, 0)
        start(q, now)

    def start(q: int, now: float) -> None:
        nonlocal seq
        while running[q] < capacity and queues[q]:
            stream, p = queues[q].pop(0)
            running[q] += 1
            seq += 1
            heapq.heappush(events, (now + phase_times[p][1], seq, stream, p))

    for s in range(num_streams):
        enqueue(s, 0, 0.0)
    end = 0.0
    while events:
        t, _, stream, p = heapq.heappop(events)
        q = phase_times[p][0]
        running[q] -= 1
        end = max(end, t)
        if p + 1 < len(phase_times):
            nq = phase_times[p + 1][0]
            queues.setdefault(nq, []).append((stream, p + 1))
            running.setdefault(nq, 0)
        start(q, t)
        if p + 1 < len(phase_times):
            start(phase_times[p + 1][0], t)
    return end


def _hierarchical_ns(system: SystemSpec, kind: str, size: int, involved, sizes=None) -> tuple[float, str]:
    phases = _phases(system, kind, involved, sizes)
    if not phases:
        return 0.0, "none"
    streams, chunk = _chunks(system, kind, size)
    inj = system.astra_sim.endpoint_delay_ns
    timed = []
    data = chunk
    for q, pkind, impl, dim, n in phases:
        t, data = phase_time_ns(system, pkind, impl, dim, n, data, inj)
        timed.append((q, t))
    total = _run_streams(streams, timed, system.astra_sim.active_chunks_per_dimension)
    total += _step_latency_ns([(dim, _phase_steps(pkind, impl, n)) for _q, pkind, impl, dim, n in phases])
    names = []
    for q, pkind, impl, dim, n in phases:
        if impl not in names:
            names.append(impl)
    return total, "+".join(names) if len(phases) == 1 else "hierarchical:" + "/".join(
        f"{pk}@dim{q}:{impl}" for q, pk, impl, _, _ in phases
    )


def _product_sizes(system: SystemSpec, group: tuple[int, ...]) -> tuple[tuple[bool, ...], tuple[int, ...]] | None:
    """(involved dimensions, ranks per dimension) when the group is every combination of a
    set of coordinates per dimension (two whole nodes of four; GPUs 0 and 4 of every node),
    on dimensions whose links are all alike (Switch, FullyConnected); else None."""
    coords = [system.coords(r) for r in group]
    sets = [sorted({c[d] for c in coords}) for d in range(len(system.dims))]
    if math.prod(len(x) for x in sets) != len(group) or len(set(coords)) != len(group):
        return None
    involved = tuple(len(x) > 1 for x in sets)
    if any(inv and system.dims[d].topology == "Ring" for d, inv in enumerate(involved)):
        return None
    return involved, tuple(len(x) for x in sets)


def _flat_all_to_all_ns(system: SystemSpec, size: int, group: tuple[int, ...]) -> tuple[float, str]:
    """An all-to-all over a communicator group on a calibrated system, NCCL's way: every
    rank sends D/n to each peer at once; the messages that leave through one dimension's
    port share it, the dimensions' ports run side by side."""
    n = len(group)
    streams, chunk = _chunks(system, "all_to_all", size)
    msg = chunk // n
    worst = 0
    slowest = None
    for i in range(n):
        per_dim: dict = {}
        for j in range(n):
            if i != j:
                dim, hops = _link(system, group[i], group[j])
                k = id(dim)
                count, _dim, far = per_dim.get(k, (0, dim, 0))
                per_dim[k] = (count + 1, dim, max(far, hops))
        for count, dim, far in per_dim.values():
            worst = max(worst, message_time_ns(dim, far, count * msg))
            if dim.step_latency_ns is not None and (slowest is None or dim.step_latency_ns > slowest.step_latency_ns):
                slowest = dim
    t = float(worst + 2 * LOCAL_INJECTION_NS)
    total = _run_streams(streams, [(0, t)], system.astra_sim.active_chunks_per_dimension)
    if slowest is not None:
        total += _step_latency_ns([(slowest, 1)])
    return total, "flat-direct"


def _flat_ring_ns(system: SystemSpec, kind: str, size: int, group: tuple[int, ...]) -> tuple[float, str]:
    """A communicator group smaller than the machine: one ring over the group in list order."""
    impls = system.collectives[kind]
    impl = impls[0] if len(impls) == 1 else "ring"
    n = len(group)
    streams, chunk = _chunks(system, kind, size)
    base, _ = _impl_base(impl)
    if base not in ("ring", "oneRing"):
        # same per-message costs, the slowest link of the group's ring standing for the dimension
        worst = max((_link(system, group[i - 1], group[i]) for i in range(n)), key=lambda dl: message_time_ns(dl[0], dl[1], chunk))
        dim = worst[0]
        t, _ = phase_time_ns(system, kind, impl, dim, n, chunk, LOCAL_INJECTION_NS)
    else:
        sends, reduced, msg, _ = _ring_counts(kind, n, chunk)
        links = [_link(system, group[i - 1], group[i]) for i in range(n)]
        nets = [message_time_ns(dim, hops, msg) for dim, hops in links]
        # rank i receives from i-1; its finish = the S links ending at it. The reduction is
        # fused into the transfers (not charged) only when every link of the ring is calibrated.
        fused = all(dim.calibrated for dim, _ in links)
        red = 0 if fused else _reduction_ns(system, msg)
        fixed = (sends + 1) * LOCAL_INJECTION_NS + reduced * red
        if system.calibration is not None:
            # every link of a ring carries all S messages: the slowest one bounds it (NCCL's
            # multi-node ring runs at its inter-node bandwidth), where ASTRA-sim's
            # congestion-unaware ring sums the links along each message's path
            worst = sends * max(nets)
        else:
            worst = 0
            for i in range(n):
                worst = max(worst, sum(nets[(i - k) % n] for k in range(sends)))
        t = float(fixed + worst)
    total = _run_streams(streams, [(0, t)], system.astra_sim.active_chunks_per_dimension)
    # the ring's steps at its links' calibrated step latencies, as NCCL's tuner: each link's
    # share of the steps at its own ((nsteps - nInterSteps) x intraLat + nInterSteps x interLat)
    stepped = [dim for dim, _h in (_link(system, group[i - 1], group[i]) for i in range(n)) if dim.step_latency_ns is not None]
    if stepped:
        total += _phase_steps(kind, impl, n) * sum(d.step_latency_ns for d in stepped) / n
    return total, f"flat-{impl}"


def collective_time_ns(system: SystemSpec, kind: str, comm_bytes: int, group, algorithm: str | None = None):
    """Time of one collective, and the algorithm used.

    With a calibrated system (`system.calibration`) the bandwidth terms use each calibrated
    dimension's `bandwidth_GBps * bus_efficiency`, without a separate local reduction, and
    an op that moves data (not "none") costs `system.collective_latency_ns` more, once: a
    ring all-reduce of D bytes over n ranks of one dimension is about
    2 (n-1)/n D / (bw * eff) + collective_latency_ns.
    Uncalibrated systems are priced exactly as ASTRA-sim's analytical network.

    `comm_bytes` has ASTRA-sim's comm_size meaning (all_reduce: per-rank buffer;
    all_gather: per-rank input shard; reduce_scatter: per-rank input buffer; all_to_all:
    per-rank buffer; permute/send/recv/broadcast: the message). `group` lists the global
    ranks taking part (for collective_permute/send/recv: [source, target]).
    `algorithm` (a name of ALGORITHM_NAMES: `ring`, `tree`, `direct`, `halving_doubling` or an
    ASTRA-sim implementation) overrides the system's implementation on every dimension it
    uses, for the kinds it implements (`implements`); other kinds keep the system's."""
    protocols = system.calibration.protocols if system.calibration is not None else ()
    if not protocols:
        t, algo = _network_time_ns(system, kind, comm_bytes, group, algorithm)
    else:
        # NCCL's tuner: the collective runs with the protocol it predicts fastest
        best = None
        for proto, variant in _protocol_variants(system):
            t, algo = _network_time_ns(variant, kind, comm_bytes, group, algorithm)
            if algo == "none":
                return 0.0, "none"
            t += proto.base_latency_ns
            if best is None or t < best[0]:
                best = (t, f"{algo}/{proto.name}")
        t, algo = best
    if algo != "none" and system.calibration is not None:
        t = t + system.calibration.collective_latency_ns
    return t, algo


# system -> (the system, [(protocol, the system as that protocol prices it)]); specs are
# immutable and few, so the variants are built once per spec object
_VARIANTS: dict[int, tuple] = {}


def _protocol_variants(system: SystemSpec) -> list:
    hit = _VARIANTS.get(id(system))
    if hit is not None and hit[0] is system:
        return hit[1]
    from dataclasses import replace

    out = []
    for proto in system.calibration.protocols:
        dims = []
        for dim in system.dims:
            factor, cap_factor = proto.bandwidth_factor, None
            cap = dict(dim.protocol_max_bandwidth_GBps or ()).get(proto.name)
            if cap is not None:  # NCCL: busBw = min(cap, busBw x factor)
                cap_factor = cap / (dim.bandwidth_GBps * (dim.bus_efficiency or 1.0))
                factor = min(factor, cap_factor)
            steps = dim.protocol_step_latency_ns
            step = dict(steps)[proto.name] if steps is not None else dim.step_latency_ns
            dims.append(replace(dim, bandwidth_factor=factor, bandwidth_cap_factor=cap_factor, step_latency_ns=step))
        out.append((proto, replace(system, dims=tuple(dims))))
    if len(_VARIANTS) > 64:
        _VARIANTS.clear()
    _VARIANTS[id(system)] = (system, out)
    return out


def _network_time_ns(system: SystemSpec, kind: str, comm_bytes: int, group, algorithm: str | None):
    """collective_time_ns without the calibration's per-op latency (ASTRA-sim's time)."""
    if kind not in KINDS:
        raise CommModelError(f"unknown collective kind '{kind}' (kinds: {', '.join(KINDS)})")
    comm_bytes = int(comm_bytes)
    if comm_bytes < 0:
        raise CommModelError(f"comm_bytes must be >= 0, got {comm_bytes}")
    plan = plan_collective(system, group)
    if len(plan.group) <= 1 or comm_bytes == 0:
        return 0.0, "none"
    if kind in ("send", "recv", "collective_permute"):
        dim, hops = _link(system, plan.group[0], plan.group[1])
        return float(message_time_ns(dim, hops, comm_bytes)) + _step_latency_ns([(dim, 1)]), "p2p"
    if kind == "collective_broadcast":
        root = plan.group[0]
        links = [_link(system, root, r) for r in plan.group[1:]]
        worst = max(message_time_ns(dim, hops, comm_bytes) for dim, hops in links)
        rounds = math.ceil(math.log2(len(plan.group)))
        inj = system.astra_sim.endpoint_delay_ns
        stepped = [dim for dim, _h in links if dim.step_latency_ns is not None]
        steps = _step_latency_ns([(max(stepped, key=lambda d: d.step_latency_ns), rounds)]) if stepped else 0.0
        return float(rounds * (worst + inj) + inj) + steps, "binomialTree"
    if algorithm is not None:
        impl = resolve_algorithm(algorithm)
        if implements(impl, kind):  # otherwise the system's own implementation (see docstring)
            system = _with_impl(system, kind, impl)
    if plan.flat and system.calibration is not None:
        # a calibrated system prices a communicator group as NCCL runs it: a product of
        # per-dimension coordinate sets hierarchically over those sets (each rank's own
        # link in every dimension, all of them at once), an all-to-all directly
        product = _product_sizes(system, plan.group)
        if product is not None:
            return _hierarchical_ns(system, kind, comm_bytes, product[0], product[1])
        if kind == "all_to_all":
            return _flat_all_to_all_ns(system, comm_bytes, plan.group)
    if plan.flat:
        return _flat_ring_ns(system, kind, comm_bytes, plan.group)
    return _hierarchical_ns(system, kind, comm_bytes, plan.involved_dims)


def _with_impl(system: SystemSpec, kind: str, impl: str) -> SystemSpec:
    from dataclasses import replace

    coll = dict(system.collectives)
    coll[kind] = tuple(impl for _ in system.dims)
    return replace(system, collectives=coll)

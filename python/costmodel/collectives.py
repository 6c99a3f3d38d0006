"""Decoding collectives: which devices take part in each collective op, and how many bytes move.

The rules are the StableHLO spec's (docs/spec.md, "Parallel execution" / "Collective ops"):
the process grid is num_replicas x num_partitions (module attributes `mhlo.num_replicas`,
`mhlo.num_partitions`, 1 when absent) and a process (replica r, partition p) has the global
device id `r * num_partitions + p`. Each op splits the grid into process groups with one of
four strategies, chosen from `channel_handle` (channel_id = its handle, 0 when absent) and
`use_global_device_ids`:

| op | channel_id <= 0 | channel_id > 0, ugdi false | channel_id > 0, ugdi true |
|---|---|---|---|
| all_reduce, all_gather, reduce_scatter | cross_replica | cross_replica_and_partition | flattened_ids |
| all_to_all, collective_broadcast, collective_permute | cross_replica | cross_partition | - |

See docs/collectives.md for the full set of rules (empty groups, -1 padding, mesh-axes
groups, send/recv, Shardy collectives) and for the meaning of `comm_bytes`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterator

from .commmodel import KINDS as COMM_KINDS
from .branches import CASE_OPS, op_weights
from .ir import dict_entry, ir
from .shapes import type_info

__all__ = [
    "KINDS",
    "CollectiveInfo",
    "CollectiveError",
    "collective_kind",
    "is_collective",
    "decode_collective",
    "find_collectives",
    "grid_size",
    "process_groups",
    "permute_pairs",
    "compact_groups",
    "sdy_meshes",
]

# Kinds as the communication model knows them, plus Shardy's local all_slice.
# The StableHLO collectives that name device groups (replica_groups or source_target_pairs)
GROUP_COLLECTIVE_OPS = frozenset(
    {
        "stablehlo.all_reduce",
        "stablehlo.all_gather",
        "stablehlo.reduce_scatter",
        "stablehlo.all_to_all",
        "stablehlo.collective_permute",
        "stablehlo.collective_broadcast",
    }
)

_HLO_KINDS = COMM_KINDS
KINDS = (*COMM_KINDS, "all_slice")
_OP_KIND: dict[str, str] = {}
for _d in ("stablehlo", "mhlo"):
    for _k in _HLO_KINDS:
        _OP_KIND[f"{_d}.{_k}"] = _k
for _k in ("all_gather", "all_reduce", "reduce_scatter", "all_to_all", "collective_permute", "all_slice"):
    _OP_KIND[f"sdy.{_k}"] = _k

# Ops whose groups follow the all_reduce table row (three modes) vs the all_to_all row.
_THREE_MODE = {"all_reduce", "all_gather", "reduce_scatter"}

CROSS_REPLICA = "cross_replica"
CROSS_PARTITION = "cross_partition"
CROSS_REPLICA_AND_PARTITION = "cross_replica_and_partition"
FLATTENED_IDS = "flattened_ids"
MESH_AXES = "mesh_axes"  # Shardy collectives: groups from mesh axes, global device ids


class CollectiveError(Exception):
    """A collective that violates the spec (reported as an error at the op's location)."""


@dataclasses.dataclass
class CollectiveInfo:
    kind: str  # one of KINDS
    op_name: str
    bytes_in: int  # per device: bytes of the tensor operands
    bytes_out: int  # per device: bytes of the tensor results
    comm_bytes: int  # ASTRA-sim comm_size meaning (see docs/collectives.md)
    groups: list[list[int]]  # global device ids; for permutes/send/recv: [src, dst] pairs
    mode: str  # process-grouping strategy used
    channel_id: int = 0
    pairs: list[tuple[int, int]] | None = None  # permutes, send, recv
    host_transfer: bool = False  # send/recv to or from the host
    num_devices: int = 1  # size of the device grid the ids live in

    @property
    def group_size(self) -> int:
        return max((len(g) for g in self.groups), default=0)

    @property
    def num_groups(self) -> int:
        return len(self.groups)

    def representative_group(self) -> list[int]:
        """The first of the largest groups."""
        best: list[int] = []
        for g in self.groups:
            if len(g) > len(best):
                best = g
        return best

    def groups_text(self, limit: int = 64) -> str:
        return compact_groups(self.groups, limit)


# ---------------------------------------------------------------------------
# attribute helpers
# ---------------------------------------------------------------------------


# Collectives that JAX exports as custom calls: the target -> the kind we model it as.
# lax.ragged_all_to_all (MoE token dispatch) sends data-dependent slices of its operand;
# we model it as the all_to_all of its whole operand (an upper bound on what it sends),
# with its groups and channel in `backend_config`.
CUSTOM_CALL_COLLECTIVES = {"ragged_all_to_all": "all_to_all"}


def custom_collective_kind(op) -> str | None:
    """The kind of a collective exported as a custom call (CUSTOM_CALL_COLLECTIVES), else None."""
    if op.name != "stablehlo.custom_call" or "call_target_name" not in op.attributes:
        return None
    return CUSTOM_CALL_COLLECTIVES.get(ir.StringAttr(op.attributes["call_target_name"]).value)


def collective_kind(op) -> str | None:
    kind = _OP_KIND.get(op.name)
    return kind if kind is not None else custom_collective_kind(op)


def is_collective(op) -> bool:
    return collective_kind(op) is not None


def _attr(op, name):
    return op.attributes[name] if name in op.attributes else None


def _int_attr(attr) -> int:
    return int(ir.IntegerAttr(attr).value)


def _bool_attr(attr) -> bool:
    if attr is None:
        return False
    try:
        return bool(ir.BoolAttr(attr).value)
    except (ValueError, TypeError):
        return str(attr) == "unit"  # UnitAttr: present means true


_CHANNEL_RE = re.compile(r"handle\s*=\s*(-?\d+)(?:\s*,\s*type\s*=\s*(-?\d+))?")


def channel_id(op) -> int:
    attr = _attr(op, "channel_handle")
    if attr is None:
        # mhlo / older forms may carry channel_id directly
        cid = _attr(op, "channel_id")
        return _int_attr(cid) if cid is not None else 0
    m = _CHANNEL_RE.search(str(attr))
    return int(m.group(1)) if m else 0


def _dense_rows(attr, name: str) -> list[list[int]]:
    """Rows of a 2-D dense integer attribute (-1 padding dropped)."""
    try:
        dense = ir.DenseIntElementsAttr(attr)
    except (ValueError, TypeError):
        raise CollectiveError(f"'{name}' is not a dense integer attribute: {attr}") from None
    shape = list(ir.ShapedType(dense.type).shape)
    if len(shape) != 2:
        if len(shape) == 1 and shape[0] == 0:
            return []
        raise CollectiveError(f"'{name}' must be 2-dimensional, got shape {shape}")
    rows, cols = shape
    if rows == 0 or cols == 0:
        return []
    if dense.is_splat:
        v = int(dense.get_splat_value().value)
        flat = [v] * (rows * cols)
    else:
        flat = [int(x) for x in dense]
    out = []
    for i in range(rows):
        row = [v for v in flat[i * cols : (i + 1) * cols] if v != -1]
        if row:
            out.append(row)
    return out


def grid_size(module) -> tuple[int, int]:
    """(num_replicas, num_partitions) from the module attributes (1 when absent)."""
    attrs = module.attributes
    r = _int_attr(attrs["mhlo.num_replicas"]) if "mhlo.num_replicas" in attrs else 1
    p = _int_attr(attrs["mhlo.num_partitions"]) if "mhlo.num_partitions" in attrs else 1
    return max(r, 1), max(p, 1)


# ---------------------------------------------------------------------------
# process groups (the spec's four strategies)
# ---------------------------------------------------------------------------


def _check_ids(groups: list[list[int]], limit: int, what: str, num_replicas: int, num_partitions: int, mode: str):
    seen: set[int] = set()
    for g in groups:
        for v in g:
            if v < 0 or v >= limit:
                raise CollectiveError(
                    f"{what} names {what_id(mode)} {v}, beyond num_replicas x num_partitions = "
                    f"{num_replicas} x {num_partitions} ({mode}: ids must be in [0, {limit}))"
                )
            if v in seen and what != "source_target_pairs":
                raise CollectiveError(f"{what} names {what_id(mode)} {v} twice")
            seen.add(v)


def what_id(mode: str) -> str:
    return {
        CROSS_REPLICA: "replica",
        CROSS_REPLICA_AND_PARTITION: "replica",
        CROSS_PARTITION: "partition",
        FLATTENED_IDS: "device",
    }.get(mode, "device")


def choose_mode(kind: str, cid: int, use_global_device_ids: bool) -> str:
    if kind in _THREE_MODE:
        if cid <= 0:
            if use_global_device_ids:
                raise CollectiveError("use_global_device_ids requires a channel_handle with a positive handle")
            return CROSS_REPLICA
        return FLATTENED_IDS if use_global_device_ids else CROSS_REPLICA_AND_PARTITION
    return CROSS_REPLICA if cid <= 0 else CROSS_PARTITION


def process_groups(
    raw: list[list[int]], mode: str, num_replicas: int, num_partitions: int, what: str = "replica_groups"
) -> list[list[int]]:
    """Global device ids (r * P + p) of each process group, in the spec's order.

    An empty `raw` means one group of every id of the strategy's id space (XLA's convention).
    """
    R, P = num_replicas, num_partitions
    limit = {CROSS_REPLICA: R, CROSS_REPLICA_AND_PARTITION: R, CROSS_PARTITION: P, FLATTENED_IDS: R * P}[mode]
    if not raw:
        raw = [list(range(limit))]
    _check_ids(raw, limit, what, R, P, mode)
    out: list[list[int]] = []
    if mode == CROSS_REPLICA:
        for g in raw:
            for p in range(P):
                out.append([r * P + p for r in g])
    elif mode == CROSS_PARTITION:
        for g in raw:
            for r in range(R):
                out.append([r * P + p for p in g])
    elif mode == CROSS_REPLICA_AND_PARTITION:
        for g in raw:
            out.append([r * P + p for p in range(P) for r in g])
    else:
        out = [list(g) for g in raw]
    return out


def permute_pairs(
    raw_pairs: list[list[int]], mode: str, num_replicas: int, num_partitions: int
) -> list[tuple[int, int]]:
    """(source, target) global device ids of a collective_permute."""
    R, P = num_replicas, num_partitions
    for pair in raw_pairs:
        if len(pair) != 2:
            raise CollectiveError(f"source_target_pairs rows must have 2 entries, got {pair}")
    limit = {CROSS_REPLICA: R, CROSS_PARTITION: P, FLATTENED_IDS: R * P}[mode]
    _check_ids(raw_pairs, limit, "source_target_pairs", R, P, mode)
    out: list[tuple[int, int]] = []
    if mode == CROSS_REPLICA:
        for s, t in raw_pairs:
            for p in range(P):
                out.append((s * P + p, t * P + p))
    elif mode == CROSS_PARTITION:
        for s, t in raw_pairs:
            for r in range(R):
                out.append((r * P + s, r * P + t))
    else:
        out = [(s, t) for s, t in raw_pairs]
    return out


def compact_groups(groups: list[list[int]], limit: int = 64) -> str:
    """`[[0,1,2,3]]` for small group lists; an iota form `[G,S]<=[N]` (groups of consecutive
    ids), `[G,S]<=[a,b]T(1,0)` (strided) or a truncated list for big ones."""
    total = sum(len(g) for g in groups)
    if total <= limit:
        return "[" + ",".join("[" + ",".join(str(v) for v in g) + "]" for g in groups) + "]"
    G = len(groups)
    S = len(groups[0]) if groups else 0
    if S and all(len(g) == S for g in groups):
        flat = [v for g in groups for v in g]
        n = G * S
        if flat == list(range(n)):
            return f"[{G},{S}]<=[{n}]"
        # groups of stride G: [[0,G,2G..],[1,G+1,..]]
        if flat == [j * G + i for i in range(G) for j in range(S)]:
            return f"[{G},{S}]<=[{S},{G}]T(1,0)"
    head = ",".join("[" + ",".join(str(v) for v in g) + "]" for g in groups[:4])
    return f"[{head},...] ({G} groups of up to {S})"


# ---------------------------------------------------------------------------
# Shardy meshes and axes
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mesh:
    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...]

    @property
    def size(self) -> int:
        n = 1
        for _, s in self.axes:
            n *= s
        return n

    def axis_size(self, name: str) -> int:
        for n, s in self.axes:
            if n == name:
                return s
        raise CollectiveError(f"mesh has no axis '{name}'")

    def device(self, position: int) -> int:
        return self.device_ids[position] if self.device_ids else position

    def coords(self, position: int) -> list[int]:
        out = []
        for _, s in reversed(self.axes):
            out.append(position % s)
            position //= s
        return list(reversed(out))


_MESH_AXIS_RE = re.compile(r'"([^"]+)"\s*=\s*(\d+)')
_DEVICE_IDS_RE = re.compile(r"device_ids\s*=\s*\[([^\]]*)\]")


def _parse_mesh_text(text: str) -> Mesh:
    """`<["x"=2, "y"=4], device_ids=[...]>` or `#sdy.mesh<...>` or
    `#stablehlo.mesh<axes = [#stablehlo.mesh_axis<name = "x", size = 2>, ...]>`."""
    if "mesh_axis" in text:
        axes = tuple(
            (m.group(1), int(m.group(2)))
            for m in re.finditer(r'name\s*=\s*"([^"]+)"\s*,\s*size\s*=\s*(\d+)', text)
        )
    else:
        body = text.split("device_ids", 1)[0]
        axes = tuple((m.group(1), int(m.group(2))) for m in _MESH_AXIS_RE.finditer(body))
    ids: tuple[int, ...] = ()
    m = _DEVICE_IDS_RE.search(text)
    if m and m.group(1).strip():
        ids = tuple(int(v) for v in m.group(1).split(","))
    return Mesh(axes, ids)


def sdy_meshes(module) -> dict[str, Mesh]:
    out: dict[str, Mesh] = {}
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "sdy.mesh":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            out[name] = _parse_mesh_text(str(op.attributes["mesh"]))
    return out


_AXIS_REF_RE = re.compile(r'"([^"]+)"(?:\s*:\s*\((\d+)\)\s*(\d+))?')
_STABLEHLO_AXIS_REF_RE = re.compile(r'name\s*=\s*"([^"]+)"(?:\s*,\s*sub_axis_info\s*=\s*\((\d+)\)\s*(\d+))?')

AxisRef = tuple  # (name, pre_size | None, size | None)


def _axis_refs(text: str, stablehlo_form: bool = False) -> list[AxisRef]:
    rx = _STABLEHLO_AXIS_REF_RE if stablehlo_form else _AXIS_REF_RE
    out = []
    for m in rx.finditer(text):
        if m.group(2) is not None:
            out.append((m.group(1), int(m.group(2)), int(m.group(3))))
        else:
            out.append((m.group(1), None, None))
    return out


def _split_dims(text: str) -> list[str]:
    """`[{"x"}, {}, {"y", "z":(1)2}]` -> ['"x"', '', '"y", "z":(1)2'] (dimension bodies)."""
    return re.findall(r"\{([^{}]*)\}", text)


def _ref_size(mesh: Mesh, ref: AxisRef) -> int:
    return ref[2] if ref[2] is not None else mesh.axis_size(ref[0])


def _ref_coord(mesh: Mesh, coords: list[int], ref: AxisRef) -> tuple[int, int, int]:
    """(axis index, coordinate on the (sub-)axis, stride of the sub-axis in the axis)."""
    names = [n for n, _ in mesh.axes]
    if ref[0] not in names:
        raise CollectiveError(f"mesh has no axis '{ref[0]}'")
    i = names.index(ref[0])
    full = mesh.axes[i][1]
    c = coords[i]
    if ref[1] is None:
        return i, c, 1
    pre, size = ref[1], ref[2]
    if full % (pre * size):
        raise CollectiveError(f"sub-axis '{ref[0]}':({pre}){size} does not divide axis size {full}")
    stride = full // (pre * size)
    return i, (c // stride) % size, stride


def mesh_axes_groups(mesh: Mesh, refs: list[AxisRef]) -> list[list[int]]:
    """Device ids grouped so that members differ only along `refs` (ordered major-first in
    the order of `refs`), as Shardy and `#stablehlo.replica_group_mesh_axes` define them."""
    groups: dict[tuple, list[tuple[int, int]]] = {}
    order: list[tuple] = []
    sizes = [_ref_size(mesh, r) for r in refs]
    for pos in range(mesh.size):
        coords = mesh.coords(pos)
        key = list(coords)
        idx = 0
        for ref, size in zip(refs, sizes):
            i, c, stride = _ref_coord(mesh, coords, ref)
            key[i] -= c * stride
            idx = idx * size + c
        k = tuple(key)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append((idx, mesh.device(pos)))
    return [[d for _, d in sorted(groups[k])] for k in order]


def _sharding_dims(text: str) -> tuple[str, list[list[AxisRef]]]:
    # `#sdy.sharding<@mesh, [{"x"}, {}], replicated={"y"}>`: keep the first [...] only
    m = re.search(r"<\s*(@[\w.$-]+|#sdy\.mesh<[^>]*>|mesh<[^>]*>)\s*,\s*\[([^\]]*)\]", text, re.S)
    if not m:
        raise CollectiveError(f"cannot read sharding {text}")
    dims = [_axis_refs(body) for body in _split_dims("[" + m.group(2) + "]")]
    return m.group(1), dims


# ---------------------------------------------------------------------------
# decoding one op
# ---------------------------------------------------------------------------


def _tensor_bytes(values) -> int:
    total = 0
    for v in values:
        info = type_info(v.type)
        if not info.is_tensor:
            continue  # tokens
        if info.dynamic:
            raise CollectiveError("dynamic shapes are not supported")
        total += info.nbytes
    return total


def decode_collective(
    op, num_replicas: int = 1, num_partitions: int = 1, *, meshes: dict | None = None, cache: dict | None = None
) -> CollectiveInfo:
    """Kind, bytes and global device groups of one collective op. Raises CollectiveError.

    `cache`: a dict the caller keeps for one module (one pass over its collectives): the
    groups of a dense `replica_groups` or `source_target_pairs` attribute (uniqued, so
    one object per distinct value) are worked out once per attribute, mode and grid;
    each info gets its own copy of the lists."""
    op = op.operation if hasattr(op, "operation") else op
    kind = collective_kind(op)
    if kind is None:
        raise CollectiveError(f"'{op.name}' is not a collective")
    if op.name.startswith("sdy."):
        return _decode_sdy(op, kind, num_replicas, num_partitions, meshes)
    R, P = num_replicas, num_partitions
    custom = op.name == "stablehlo.custom_call"
    if custom:  # ragged_all_to_all: its groups and channel in backend_config; its data operand 0
        c = dict_entry(op, "backend_config", "channel_id")
        cid = _int_attr(c) if c is not None else 0
        ugdi = False
        bytes_in = _tensor_bytes([op.operands[0]])
    else:
        cid = channel_id(op)
        ugdi = _bool_attr(_attr(op, "use_global_device_ids"))
        bytes_in = _tensor_bytes(op.operands)
    bytes_out = _tensor_bytes(op.results)
    info = CollectiveInfo(kind, op.name, bytes_in, bytes_out, bytes_in, [], "", cid, num_devices=R * P)

    if kind in ("send", "recv"):
        info.host_transfer = _bool_attr(_attr(op, "is_host_transfer"))
        info.comm_bytes = bytes_in if kind == "send" else bytes_out
        info.mode = FLATTENED_IDS
        stp = _attr(op, "source_target_pairs")
        raw = _dense_rows(stp, "source_target_pairs") if stp is not None else []
        if raw:
            info.pairs = permute_pairs(raw, FLATTENED_IDS, R, P)
            info.groups = [[s, t] for s, t in info.pairs]
        else:
            info.pairs = []
            info.groups = []
        return info

    if kind == "collective_permute":
        mode = choose_mode(kind, cid, False)
        stp = op.attributes["source_target_pairs"]
        key = ("pairs", stp, mode, R, P)
        pairs = cache.get(key) if cache is not None else None
        if pairs is None:
            pairs = permute_pairs(_dense_rows(stp, "source_target_pairs"), mode, R, P)
            if cache is not None:
                cache[key] = pairs
        info.mode = mode
        info.pairs = list(pairs)
        info.groups = [[s, t] for s, t in info.pairs]
        return info

    mode = choose_mode(kind, cid, ugdi)
    rg = dict_entry(op, "backend_config", "replica_groups") if custom else _attr(op, "replica_groups")
    if rg is not None and "replica_group_mesh_axes" in str(rg):
        groups = _mesh_axes_replica_groups(op, rg, meshes)
        info.mode = mode
        # Mesh-axes groups hold flattened device ids (Shardy always sets use_global_device_ids
        # with them); under another mode they index that mode's id space.
        info.groups = process_groups(groups, mode, R, P)
    else:
        key = ("groups", rg, mode, R, P)
        groups = cache.get(key) if cache is not None else None
        if groups is None:
            raw = _dense_rows(rg, "replica_groups") if rg is not None else []
            groups = process_groups(raw, mode, R, P)
            if cache is not None:
                cache[key] = groups
        info.mode = mode
        info.groups = [list(g) for g in groups]
    # comm_bytes: ASTRA-sim comm_size meaning; every kind here uses the per-rank input.
    info.comm_bytes = bytes_in
    return info


def _mesh_axes_replica_groups(op, attr, meshes) -> list[list[int]]:
    text = str(attr)
    m = re.search(r"mesh(?:_name)?\s*=\s*(@[\w.$-]+)", text)
    if m:
        name = m.group(1)[1:]
        mesh = (meshes or {}).get(name)
        if mesh is None:
            raise CollectiveError(f"replica_group_mesh_axes names mesh @{name}, which is not an sdy.mesh of this module")
    else:
        mm = re.search(r"#stablehlo\.mesh<(.*?)>\s*,\s*axes", text, re.S)
        if not mm:
            raise CollectiveError(f"cannot read replica_groups {text}")
        mesh = _parse_mesh_text(mm.group(1))
    # the last "axes = [" is the refs list (an inline mesh has its own "axes = [")
    axes_text = text[text.rfind("axes = [") :]
    refs = _axis_refs(axes_text, stablehlo_form=True)
    return mesh_axes_groups(mesh, refs)


def _mesh_for(ref: str, meshes: dict | None) -> Mesh:
    if ref.startswith("@"):
        mesh = (meshes or {}).get(ref[1:])
        if mesh is None:
            raise CollectiveError(f"sharding names mesh {ref}, which is not an sdy.mesh of this module")
        return mesh
    return _parse_mesh_text(ref)


def _local_bytes(value_type, mesh: Mesh, dims: list[list[AxisRef]]) -> int:
    info = type_info(value_type)
    if info.dynamic:
        raise CollectiveError("dynamic shapes are not supported")
    n = 1
    for i, d in enumerate(info.shape):
        k = 1
        if i < len(dims):
            for ref in dims[i]:
                k *= _ref_size(mesh, ref)
        n *= -(-d // k)
    return n * info.elem_bytes


def _decode_sdy(op, kind, R, P, meshes) -> CollectiveInfo:
    ref, out_dims = _sharding_dims(str(op.attributes["out_sharding"]))
    mesh = _mesh_for(ref, meshes)
    if mesh.size > R * P and (R * P) > 1:
        raise CollectiveError(
            f"mesh of {mesh.size} devices is bigger than num_replicas x num_partitions = {R} x {P}"
        )
    for d in mesh.device_ids:
        if d >= max(R * P, mesh.size):
            raise CollectiveError(f"mesh device id {d} is beyond the {max(R * P, mesh.size)} devices")
    rtype = op.results[0].type
    in_dims = [list(d) for d in out_dims]
    axes: list[AxisRef] = []
    if kind in ("all_gather", "all_slice", "reduce_scatter"):
        key = {"all_gather": "gathering_axes", "all_slice": "slicing_axes", "reduce_scatter": "reduce_scatter_axes"}[kind]
        per_dim = [_axis_refs(b) for b in _split_dims(str(op.attributes[key]).split("[", 1)[1])]
        for i, refs in enumerate(per_dim):
            axes.extend(refs)
            while len(in_dims) <= i:
                in_dims.append([])
            if kind == "all_gather":
                in_dims[i] = in_dims[i] + refs
            else:  # the input lacks the axes the result gains
                in_dims[i] = [r for r in in_dims[i] if r not in refs]
    elif kind == "all_reduce":
        axes = _axis_refs(str(op.attributes["reduction_axes"]))
    elif kind == "all_to_all":
        for m in re.finditer(r"\{([^{}]*)\}\s*:\s*(\d+)\s*->\s*(\d+)", str(op.attributes["params"])):
            refs = _axis_refs(m.group(1))
            src, tgt = int(m.group(2)), int(m.group(3))
            axes.extend(refs)
            in_dims[tgt] = [r for r in in_dims[tgt] if r not in refs]
            in_dims[src] = in_dims[src] + refs
    bytes_out = _local_bytes(rtype, mesh, out_dims)
    bytes_in = _local_bytes(op.operands[0].type, mesh, in_dims)
    info = CollectiveInfo(kind, op.name, bytes_in, bytes_out, bytes_in, [], MESH_AXES, 0, num_devices=max(R * P, mesh.size))
    if kind == "all_slice":
        info.comm_bytes = 0  # a local slice: no communication
        info.groups = mesh_axes_groups(mesh, axes)
        return info
    if kind == "collective_permute":
        src_dims = _operand_sharding_dims(op, meshes)
        info.pairs = _sdy_permute_pairs(mesh, src_dims, out_dims) if src_dims is not None else []
        info.groups = [[s, t] for s, t in info.pairs]
        if src_dims is None:
            info.groups = [[mesh.device(p) for p in range(mesh.size)]]
        return info
    info.groups = mesh_axes_groups(mesh, axes)
    return info


def _operand_sharding_dims(op, meshes) -> list[list[AxisRef]] | None:
    v = op.operands[0]
    owner = v.owner
    if isinstance(v, ir.BlockArgument):
        parent = owner.owner if hasattr(owner, "owner") else None
        parent = parent.operation if parent is not None and hasattr(parent, "operation") else parent
        if parent is not None and parent.name == "func.func" and "arg_attrs" in parent.attributes:
            arg_attrs = ir.ArrayAttr(parent.attributes["arg_attrs"])
            d = ir.DictAttr(arg_attrs[v.arg_number])
            if "sdy.sharding" in d:
                return _sharding_dims(str(d["sdy.sharding"]))[1]
        return None
    src = owner.operation if hasattr(owner, "operation") else owner
    if "out_sharding" in src.attributes:
        return _sharding_dims(str(src.attributes["out_sharding"]))[1]
    if "sdy.sharding" in src.attributes:
        text = str(src.attributes["sdy.sharding"])
        per = re.findall(r"<\s*@[\w.$-]+\s*,\s*\[[^\]]*\][^<>]*>", text)
        idx = ir.OpResult(v).result_number if hasattr(ir, "OpResult") else 0
        if idx < len(per):
            return _sharding_dims(per[idx])[1]
    return None


def _tile_index(mesh: Mesh, coords: list[int], dims: list[list[AxisRef]]) -> tuple[int, ...]:
    out = []
    for refs in dims:
        idx = 0
        for ref in refs:
            _, c, _ = _ref_coord(mesh, coords, ref)
            idx = idx * _ref_size(mesh, ref) + c
        out.append(idx)
    return tuple(out)


def _sdy_permute_pairs(mesh: Mesh, in_dims, out_dims) -> list[tuple[int, int]]:
    """Each device receives the tile it holds under `out_dims` from a device holding that
    tile under `in_dims` (itself when it can, else the first holder)."""
    holders: dict[tuple, list[int]] = {}
    coords = [mesh.coords(p) for p in range(mesh.size)]
    for p in range(mesh.size):
        holders.setdefault(_tile_index(mesh, coords[p], in_dims), []).append(p)
    pairs = []
    for p in range(mesh.size):
        want = _tile_index(mesh, coords[p], out_dims)
        srcs = holders.get(want, [])
        if not srcs or p in srcs:
            continue
        pairs.append((mesh.device(srcs[0]), mesh.device(p)))
    return pairs


# ---------------------------------------------------------------------------
# finding collectives with their multiplicities
# ---------------------------------------------------------------------------


def _trip_count(while_op, on_unknown=None) -> int:
    from .engine import COST_ATTR, infer_trip_count

    if COST_ATTR in while_op.attributes:
        d = ir.DictAttr(while_op.attributes[COST_ATTR])
        if "trip_count" in d:
            return _int_attr(d["trip_count"])
    trip = infer_trip_count(while_op)
    if trip is None:
        if on_unknown is not None:
            on_unknown(while_op)
        return 1
    return trip


def _is_public(fn) -> bool:
    if "sym_visibility" not in fn.attributes:
        return True
    return ir.StringAttr(fn.attributes["sym_visibility"]).value == "public"


def find_collectives(module, *, on_unknown_trip_count=None, on_recursion=None) -> Iterator[tuple[ir.Operation, int]]:
    """Every collective op in the module with how many times one run of the module's public
    functions executes it: the product of enclosing `while` trip counts (from the while's
    `costmodel.cost` trip_count when annotate-cost ran, else inferred; 1 when unknown) summed
    over call sites (func.call, stablehlo.composite, mhlo.async_start called_computation).
    Case/if branches count as annotate-cost's branch policy weighs them
    (`costmodel.branch_weights`: the chosen branch once, the others not at all; under
    `mean` 1/N each, a fractional count); without those weights each branch counts once
    (an upper bound). Collectives in functions no public
    function reaches are yielded with multiplier 0. Each op is yielded once, in program order
    of first discovery.
    """
    funcs: dict[str, ir.Operation] = {}
    order: list[str] = []
    for op in module.regions[0].blocks[0].operations:
        op = op.operation
        if op.name == "func.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            funcs[name] = op
            order.append(name)

    # function -> list of (op, local multiplier) and (callee, local multiplier)
    local_colls: dict[str, list[tuple[ir.Operation, int]]] = {}
    local_calls: dict[str, list[tuple[str, int, ir.Operation]]] = {}
    trip_cache: dict = {}

    def scan(region_owner, mult, colls, calls):
        for region in region_owner.regions:
            scan_region(region, mult, colls, calls)

    def scan_region(region, mult, colls, calls):
        for block in region.blocks:
            for child in block.operations:
                child = child.operation
                name = child.name
                if name in _OP_KIND or (name == "stablehlo.custom_call" and custom_collective_kind(child)):
                    colls.append((child, mult))
                callee_attr = None
                if name == "func.call":
                    callee_attr = "callee"
                elif name == "stablehlo.composite":
                    callee_attr = "decomposition"
                elif name.endswith("async_start") and "called_computation" in child.attributes:
                    callee_attr = "called_computation"
                if callee_attr is not None and callee_attr in child.attributes:
                    callee = ir.FlatSymbolRefAttr(child.attributes[callee_attr]).value
                    calls.append((callee, mult, child))
                if child.regions:
                    inner = mult
                    if name in ("stablehlo.while", "mhlo.while"):
                        trip = _trip_count(child, on_unknown_trip_count)
                        inner = mult * trip
                    weights = op_weights(child) if name in CASE_OPS else None
                    if weights is not None and len(weights) == len(child.regions):
                        # (a branch the policy does not count: its collectives execute 0 times)
                        for branch, w in zip(child.regions, weights):
                            m = inner * w
                            scan_region(branch, int(m) if float(m).is_integer() else m, colls, calls)
                    else:
                        scan(child, inner, colls, calls)

    for name in order:
        colls: list = []
        calls: list = []
        scan(funcs[name], 1, colls, calls)
        local_colls[name] = colls
        local_calls[name] = calls

    # Propagate call counts from public functions (DAG; recursion is cut and reported).
    counts: dict[str, int] = {n: 0 for n in order}
    for n in order:
        if _is_public(funcs[n]):
            counts[n] += 1
    # topological order by DFS from every function
    topo: list[str] = []
    state: dict[str, int] = {}

    def visit(n):
        state[n] = 1
        for callee, _, call_op in local_calls.get(n, []):
            if callee not in funcs:
                continue
            if state.get(callee) == 1:
                if on_recursion is not None:
                    on_recursion(call_op, callee)
                continue
            if callee not in state:
                visit(callee)
        state[n] = 2
        topo.append(n)

    for n in order:
        if n not in state:
            visit(n)
    # callers before callees: reverse post-order
    rank = {n: i for i, n in enumerate(topo)}
    for n in reversed(topo):
        c = counts[n]
        if c == 0:
            continue
        for callee, mult, _ in local_calls.get(n, []):
            if callee in funcs and callee != n and rank[callee] < rank[n]:
                counts[callee] += c * mult

    for n in order:
        for op, mult in local_colls[n]:
            yield op, mult * counts[n]

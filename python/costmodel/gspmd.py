"""GSPMD shardings (`mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"`)
to Shardy (`sdy.mesh` + `sdy.sharding`).

Two halves:

* `parse_sharding(text) -> HloSharding`: the HloSharding text format as XLA prints it
  (`HloSharding::ToString`) and parses it (`ParseSharding` in hlo_parser.cc):
  `{replicated}`, `{maximal device=N}`, `{manual}`, `{unknown}`, tiled shardings with
  an explicit device list `{devices=[2,2]0,2,1,3}` or an iota list
  `{devices=[2,1,4]<=[2,4]T(1,0)}`, `last_tile_dim_replicate`,
  `last_tile_dims={manual, replicated}`, tuple shardings `{{...}, {...}}`, and
  `metadata={...}`, `shard_as N`/`shard_like N` (accepted and ignored). Errors are
  `ShardingParseError` with one line that quotes the offending text.

* `convert_module(module, diagnostics) -> bool`: rewrites every `mhlo.sharding` of a
  module (func arguments and results, `stablehlo.custom_call @Sharding`, any other op)
  into Shardy: one `sdy.mesh` whose axes are the common refinement of every tile
  assignment (so that `{devices=[2,1,4]<=[8] ...}` and `{devices=[1,4,2]<=[2,4]T(1,0) ...}`
  share the mesh `["axis_0"=2, "axis_1"=4]`), `sdy.sharding` attributes, and
  `sdy.sharding_constraint` for `@Sharding` custom calls. Explicit device lists that are
  not an iota permutation get their own mesh with `device_ids`. `{maximal device=N}`
  becomes a maximal mesh `<[], device_ids=[N]>`. GSPMD shard_map regions
  (`@SPMDFullToShardShape` -> body -> `@SPMDShardToFullShape`, `{manual}` or
  `last_tile_dims={manual, ...}`) become `sdy.manual_computation`, as the Shardy export
  of the same program has them (docs/sharding.md).

This module never builds an MLIR context; it works on the module it is given.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re

import numpy as np

from .ir import DiagnosticEngine, ir, walk_ops

__all__ = [
    "HloSharding",
    "ShardingParseError",
    "parse_sharding",
    "MeshPlan",
    "plan_mesh",
    "convert_module",
    "module_has_gspmd_shardings",
]

SHARDING_ATTR = "mhlo.sharding"
SDY_SHARDING_ATTR = "sdy.sharding"


class ShardingParseError(ValueError):
    """A malformed HloSharding string (one line, quotes the text)."""


@dataclasses.dataclass(frozen=True)
class HloSharding:
    """One parsed HloSharding.

    kind: replicated | maximal | manual | unknown | tiled | tuple.
    For tiled: `tile_dims` is the full tile-assignment shape (data dims followed by
    one dim per entry of `subgroup_types`); the device array is
    `iota(prod(iota_reshape)).reshape(iota_reshape).transpose(iota_perm).reshape(tile_dims)`
    when `devices` is None, else `np.array(devices).reshape(tile_dims)`.
    `last_tile_dim_replicate` is normalized to `subgroup_types=("replicated",)`.
    """

    kind: str
    device: int | None = None
    tile_dims: tuple[int, ...] = ()
    devices: tuple[int, ...] | None = None
    iota_reshape: tuple[int, ...] | None = None
    iota_perm: tuple[int, ...] | None = None
    subgroup_types: tuple[str, ...] = ()
    elements: tuple["HloSharding", ...] = ()
    shard_group: tuple[str, int] | None = None  # ("shard_as" | "shard_like", id)
    text: str = ""

    @property
    def num_devices(self) -> int:
        return math.prod(self.tile_dims) if self.kind == "tiled" else 1

    @property
    def data_rank(self) -> int:
        return len(self.tile_dims) - len(self.subgroup_types)

    @property
    def is_iota(self) -> bool:
        return self.kind == "tiled" and self.devices is None

    def device_array(self) -> np.ndarray:
        if self.kind != "tiled":
            raise ValueError(f"sharding '{self.text}' has no tile assignment")
        if self.devices is not None:
            return np.array(self.devices, dtype=np.int64).reshape(self.tile_dims)
        n = math.prod(self.iota_reshape)
        return np.arange(n, dtype=np.int64).reshape(self.iota_reshape).transpose(self.iota_perm).reshape(self.tile_dims)

    def __str__(self) -> str:  # canonical text (without metadata)
        if self.kind == "tuple":
            return "{" + ", ".join(str(e) for e in self.elements) + "}"
        if self.kind == "maximal":
            return f"{{maximal device={self.device}}}"
        if self.kind in ("replicated", "manual", "unknown"):
            return f"{{{self.kind}}}"
        dims = ",".join(str(d) for d in self.tile_dims)
        if self.devices is None:
            body = f"devices=[{dims}]<=[{','.join(map(str, self.iota_reshape))}]"
            if list(self.iota_perm) != list(range(len(self.iota_perm))):
                body += f"T({','.join(map(str, self.iota_perm))})"
        else:
            body = f"devices=[{dims}]{','.join(map(str, self.devices))}"
        if self.subgroup_types == ("replicated",):
            body += " last_tile_dim_replicate"
        elif self.subgroup_types:
            body += " last_tile_dims={" + ", ".join(self.subgroup_types) + "}"
        return "{" + body + "}"


# ---------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------

_SUBGROUP_TYPES = ("replicated", "manual", "unreduced")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    # -- helpers
    def fail(self, what: str, at: int | None = None) -> ShardingParseError:
        at = self.pos if at is None else at
        rest = self.text[at : at + 24]
        near = f"'{rest}'" if rest else "end of text"
        return ShardingParseError(f"bad sharding '{self.text}': {what} at offset {at} (near {near})")

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\n\r":
            self.pos += 1

    def peek(self, s: str) -> bool:
        self.ws()
        return self.text.startswith(s, self.pos)

    def expect(self, s: str, what: str | None = None) -> None:
        self.ws()
        if not self.text.startswith(s, self.pos):
            raise self.fail(f"expected '{s}'" if what is None else what)
        self.pos += len(s)

    def word(self) -> str:
        self.ws()
        m = re.compile(r"[A-Za-z_][A-Za-z0-9_]*").match(self.text, self.pos)
        if not m:
            raise self.fail("expected a keyword (replicated, maximal, manual, devices=..., ...)")
        self.pos = m.end()
        return m.group(0)

    def integer(self, what: str = "an integer") -> int:
        self.ws()
        m = re.compile(r"-?\d+").match(self.text, self.pos)
        if not m:
            raise self.fail(f"expected {what}")
        self.pos = m.end()
        return int(m.group(0))

    def int_list(self, open_: str, close: str, what: str) -> tuple[int, ...]:
        self.expect(open_, f"expected '{open_}' to start {what}")
        out: list[int] = []
        if self.peek(close):
            self.pos += len(close)
            return ()
        while True:
            out.append(self.integer(f"an integer in {what}"))
            if self.peek(","):
                self.pos += 1
                continue
            self.expect(close, f"expected ',' or '{close}' in {what}")
            return tuple(out)

    def skip_braced(self) -> None:
        """Skip a balanced `{...}` (metadata), honouring quoted strings."""
        self.expect("{")
        start = self.pos - 1
        depth = 1
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == '"':
                self.pos += 1
                while self.pos < len(self.text) and self.text[self.pos] != '"':
                    self.pos += 2 if self.text[self.pos] == "\\" else 1
                if self.pos >= len(self.text):
                    raise self.fail("unterminated string in metadata", start)
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    self.pos += 1
                    return
            self.pos += 1
        raise self.fail("unbalanced '{' in metadata", start)

    # -- grammar
    def sharding(self) -> HloSharding:
        self.ws()
        start = self.pos
        self.expect("{", "expected '{' to start a sharding")
        if self.peek("{"):
            elements = [self.sharding()]
            while self.peek(","):
                self.pos += 1
                elements.append(self.sharding())
            self.expect("}", "expected ',' or '}' after a tuple element")
            return HloSharding("tuple", elements=tuple(elements), text=self.text[start : self.pos])
        if self.peek("}"):  # the empty tuple
            self.pos += 1
            return HloSharding("tuple", elements=(), text=self.text[start : self.pos])
        kind = None
        device = None
        tile_dims: tuple[int, ...] | None = None
        devices = None
        reshape = perm = None
        subgroups: tuple[str, ...] = ()
        replicate_last = False
        shard_group = None
        while not self.peek("}"):
            if self.pos >= len(self.text):
                raise self.fail("expected '}' to close the sharding")
            wstart = self.pos
            w = self.word()
            if w in ("replicated", "manual", "unknown"):
                if kind is not None:
                    raise self.fail(f"'{w}' after '{kind}'", wstart)
                kind = w
            elif w == "maximal":
                if kind is not None:
                    raise self.fail(f"'maximal' after '{kind}'", wstart)
                kind = "maximal"
                self.ws()
                dstart = self.pos
                if not self.peek("device") or self.word() != "device":
                    raise self.fail("expected 'device=N' after 'maximal'", dstart)
                self.expect("=")
                device = self.integer("a device id after 'device='")
                if device < 0:
                    raise self.fail(f"negative device id {device}", dstart)
            elif w == "devices":
                if kind is not None:
                    raise self.fail(f"'devices' after '{kind}'", wstart)
                kind = "tiled"
                self.expect("=", "expected '=' after 'devices'")
                tile_dims = self.int_list("[", "]", "the tile dimensions")
                if not tile_dims:
                    raise self.fail("empty tile dimensions", wstart)
                if any(d <= 0 for d in tile_dims):
                    raise self.fail(f"non-positive tile dimension in {list(tile_dims)}", wstart)
                if self.peek("<="):
                    self.pos += 2
                    reshape = self.int_list("[", "]", "the iota dimensions")
                    if not reshape or any(d <= 0 for d in reshape):
                        raise self.fail("iota dimensions must be positive", wstart)
                    if self.peek("T"):
                        self.pos += 1
                        perm = self.int_list("(", ")", "the iota transpose")
                        if sorted(perm) != list(range(len(reshape))):
                            raise self.fail(
                                f"transpose {list(perm)} is not a permutation of the {len(reshape)} iota dimensions",
                                wstart,
                            )
                    else:
                        perm = tuple(range(len(reshape)))
                    if math.prod(reshape) != math.prod(tile_dims):
                        raise self.fail(
                            f"iota over {math.prod(reshape)} devices for tile dimensions {list(tile_dims)} "
                            f"({math.prod(tile_dims)} devices)",
                            wstart,
                        )
                else:
                    lst = [self.integer("a device list or '<=[...]' after the tile dimensions")]
                    while self.peek(","):
                        self.pos += 1
                        lst.append(self.integer("a device id"))
                    devices = tuple(lst)
                    if len(devices) != math.prod(tile_dims):
                        raise self.fail(
                            f"{len(devices)} devices listed for tile dimensions {list(tile_dims)} "
                            f"({math.prod(tile_dims)} devices)",
                            wstart,
                        )
                    if any(d < 0 for d in devices) or len(set(devices)) != len(devices):
                        raise self.fail("device list has negative or repeated ids", wstart)
            elif w == "last_tile_dim_replicate":
                replicate_last = True
            elif w == "last_tile_dims":
                self.expect("=", "expected '=' after 'last_tile_dims'")
                self.expect("{", "expected '{' after 'last_tile_dims='")
                types = []
                while True:
                    tstart = self.pos
                    t = self.word()
                    if t not in _SUBGROUP_TYPES:
                        raise self.fail(f"unknown subgroup type '{t}' (expected manual or replicated)", tstart)
                    types.append(t)
                    if self.peek(","):
                        self.pos += 1
                        continue
                    self.expect("}", "expected ',' or '}' in last_tile_dims")
                    break
                subgroups = tuple(types)
            elif w == "metadata":
                self.expect("=", "expected '=' after 'metadata'")
                self.skip_braced()
            elif w in ("shard_as", "shard_like"):
                shard_group = (w, self.integer(f"a group id after '{w}'"))
            else:
                raise self.fail(f"unknown sharding attribute '{w}'", wstart)
        self.pos += 1  # '}'
        text = self.text[start : self.pos]
        if kind is None:
            raise self.fail("sharding names no kind (replicated, maximal, manual, devices=...)", start)
        if kind != "tiled" and (replicate_last or subgroups):
            raise self.fail(f"'{kind}' sharding cannot have last_tile_dim_replicate/last_tile_dims", start)
        if replicate_last and subgroups:
            raise self.fail("both last_tile_dim_replicate and last_tile_dims", start)
        if replicate_last:
            subgroups = ("replicated",)
        if kind == "tiled":
            if len(subgroups) > len(tile_dims):
                raise self.fail(
                    f"{len(subgroups)} subgroup dimensions but only {len(tile_dims)} tile dimensions", start
                )
            return HloSharding(
                "tiled",
                tile_dims=tile_dims,
                devices=devices,
                iota_reshape=reshape,
                iota_perm=perm,
                subgroup_types=subgroups,
                shard_group=shard_group,
                text=text,
            )
        return HloSharding(kind, device=device, shard_group=shard_group, text=text)


def parse_sharding(text: str) -> HloSharding:
    """Parse one HloSharding string; raises ShardingParseError (one line)."""
    if not isinstance(text, str):
        raise ShardingParseError(f"sharding must be a string, got {type(text).__name__}")
    p = _Parser(text)
    s = p.sharding()
    p.ws()
    if p.pos != len(text):
        raise p.fail("unexpected text after the sharding")
    return s


# ---------------------------------------------------------------------------
# Device arrays -> mesh axes
# ---------------------------------------------------------------------------


def _iota_pieces(s: HloSharding) -> list[list[tuple[int, int]]] | None:
    """For an iota sharding: per tile dim, its (size, stride) pieces in device-id space,
    major to minor; None when the reshape does not align with mesh axes."""
    reshape, perm = s.iota_reshape, s.iota_perm
    strides = [math.prod(reshape[i + 1 :]) for i in range(len(reshape))]
    seq = [[reshape[p], strides[p]] for p in perm if reshape[p] > 1]
    out: list[list[tuple[int, int]]] = []
    i = 0
    for t in s.tile_dims:
        pieces: list[tuple[int, int]] = []
        need = t
        while need > 1:
            if i >= len(seq):
                return None
            size, stride = seq[i]
            if need % size == 0:
                pieces.append((size, stride))
                need //= size
                i += 1
            elif size % need == 0:
                # major part of this dim goes to the tile dim; the minor rest stays
                pieces.append((need, stride * (size // need)))
                seq[i] = [size // need, stride]
                need = 1
            else:
                return None
        out.append(pieces)
    return out


def _as_iota(s: HloSharding) -> HloSharding | None:
    """An explicit device list that is an iota permutation, in iota form (or None)."""
    arr = np.array(s.devices, dtype=np.int64)
    n = arr.size
    if sorted(s.devices) != list(range(n)):
        return None
    if np.array_equal(arr, np.arange(n)):
        return dataclasses.replace(s, devices=None, iota_reshape=(n,), iota_perm=(0,))

    def factorizations(m: int, max_len: int):
        if m == 1:
            yield ()
            return
        if max_len == 0:
            return
        for f in range(2, m + 1):
            if m % f == 0:
                for rest in factorizations(m // f, max_len - 1):
                    yield (f,) + rest

    tried = 0
    for dims in factorizations(n, 4):
        for perm in itertools.permutations(range(len(dims))):
            tried += 1
            if tried > 20000:
                return None
            cand = np.arange(n).reshape(dims).transpose(perm).reshape(-1)
            if np.array_equal(cand, arr):
                return dataclasses.replace(s, devices=None, iota_reshape=dims, iota_perm=tuple(perm))
    return None


@dataclasses.dataclass
class MeshPlan:
    """Meshes for a set of shardings and, per sharding, the mesh axes of each tile dim."""

    meshes: dict[str, tuple[list[tuple[str, int]], list[int] | None]]  # name -> (axes, device_ids)
    # canonical sharding text -> (mesh name, per tile dim list of axis names)
    axes_of: dict[str, tuple[str, list[list[str]]]]


def _chain(bounds: set[int]) -> bool:
    b = sorted(bounds)
    return all(b[i + 1] % b[i] == 0 for i in range(len(b) - 1))


def _axes_from_bounds(bounds: set[int], prefix: str) -> list[tuple[str, int, int]]:
    """(name, size, stride) per mesh axis, major to minor."""
    b = sorted(bounds)
    axes = []
    for i in range(len(b) - 1, 0, -1):
        axes.append((b[i] // b[i - 1], b[i - 1]))
    return [(f"{prefix}{k}", size, stride) for k, (size, stride) in enumerate(axes)]


def _assign(pieces: list[list[tuple[int, int]]], axes: list[tuple[str, int, int]]) -> list[list[str]]:
    by_stride = {stride: (name, size) for name, size, stride in axes}
    out = []
    for dim in pieces:
        names = []
        for size, stride in dim:
            st, end = stride, stride * size
            group = []
            while st < end:
                name, asize = by_stride[st]
                group.append((st, name))
                st *= asize
            names.extend(n for _, n in sorted(group, reverse=True))  # major to minor
        out.append(names)
    return out


def plan_mesh(shardings: list[HloSharding], num_devices: int | None = None) -> MeshPlan:
    """One shared mesh for all iota-expressible tiled shardings (axes: the common
    refinement of their device-id strides), one mesh with device_ids per other explicit
    device list, one maximal mesh per `maximal` device."""
    tiled: dict[str, HloSharding] = {}
    maximal: set[int] = set()

    def collect(s: HloSharding) -> None:
        if s.kind == "tuple":
            for e in s.elements:
                collect(e)
        elif s.kind == "tiled":
            tiled.setdefault(str(s), s)
        elif s.kind == "maximal":
            maximal.add(s.device)

    for s in shardings:
        collect(s)

    iota: dict[str, tuple[HloSharding, list[list[tuple[int, int]]]]] = {}
    explicit: dict[str, HloSharding] = {}
    for key, s in tiled.items():
        cand = s if s.is_iota else _as_iota(s)
        pieces = _iota_pieces(cand) if cand is not None else None
        if pieces is None:
            explicit[key] = s
        else:
            iota[key] = (cand, pieces)

    n = num_devices or max([math.prod(s.tile_dims) for s in tiled.values()] + [1])
    meshes: dict[str, tuple[list[tuple[str, int]], list[int] | None]] = {}
    axes_of: dict[str, tuple[str, list[list[str]]]] = {}

    def bounds_of(pieces) -> set[int]:
        b = set()
        for dim in pieces:
            for size, stride in dim:
                b.update((stride, stride * size))
        return b

    groups: list[tuple[set[int], list[str]]] = []  # (bounds, keys)
    for key, (s, pieces) in iota.items():
        b = bounds_of(pieces) | {1}
        for gb, keys in groups:
            if _chain(gb | b) and max(gb | b) <= n:
                gb |= b
                keys.append(key)
                break
        else:
            groups.append((b, [key]))
    if not groups and (num_devices or 0) > 1 and not explicit:
        groups.append(({1}, []))
    for gi, (b, keys) in enumerate(groups):
        top = max(b)
        if n % top == 0 and n > top:
            b.add(n)
        name = "mesh" if gi == 0 else f"mesh_{gi}"
        axes = _axes_from_bounds(b, "axis_")
        meshes[name] = ([(a, size) for a, size, _ in axes], None)
        for key in keys:
            axes_of[key] = (name, _assign(iota[key][1], axes))
    for ei, (key, s) in enumerate(explicit.items()):
        name = f"mesh_explicit_{ei}"
        axes = [(f"axis_{k}", d) for k, d in enumerate(s.tile_dims) if d > 1]
        meshes[name] = (axes, [int(x) for x in s.devices])
        names, k = [], 0
        for d in s.tile_dims:
            names.append([f"axis_{k}"] if d > 1 else [])
            k += 1
        axes_of[key] = (name, names)
    for dev in sorted(maximal):
        meshes[f"maximal_mesh_{dev}"] = ([], [dev])
    return MeshPlan(meshes, axes_of)


def mesh_attr_text(axes: list[tuple[str, int]], device_ids: list[int] | None) -> str:
    body = "[" + ", ".join(f'"{a}"={s}' for a, s in axes) + "]"
    if device_ids is not None:
        body += ", device_ids=[" + ", ".join(map(str, device_ids)) + "]"
    return f"#sdy.mesh<{body}>"


def mesh_text(name: str, axes: list[tuple[str, int]], device_ids: list[int] | None) -> str:
    return f"sdy.mesh @{name} = <{mesh_attr_text(axes, device_ids)[len('#sdy.mesh<'):-1]}>"


class ConversionError(ValueError):
    pass


def is_manual(s: HloSharding) -> bool:
    """`{manual}`, or a tiled sharding with a manual subgroup (a partially manual
    shard_map region)."""
    if s.kind == "tuple":
        return any(is_manual(e) for e in s.elements)
    return s.kind == "manual" or (s.kind == "tiled" and "manual" in s.subgroup_types)


def manual_axes(s: HloSharding, plan: MeshPlan) -> tuple[str, list[str]] | None:
    """(mesh, axes) of the manual subgroup of a partially manual sharding; None for
    `{manual}` (every axis of the mesh is manual)."""
    if s.kind != "tiled":
        return None
    mesh, per_dim = plan.axes_of[str(s)]
    names = []
    for t, axes in zip(s.subgroup_types, per_dim[s.data_rank :]):
        if t == "manual":
            names.extend(axes)
    return mesh, names


def tensor_sharding_text(
    s: HloSharding,
    rank: int,
    plan: MeshPlan,
    default_mesh: str = "mesh",
    open_dims: tuple[int, ...] = (),
    manual_ok: bool = False,
) -> str | None:
    """`<@mesh, [{"axis_0"}, {}]>` for a (non-tuple) sharding of a rank-`rank` value.

    `manual_ok`: a sharding inside a shard_map region (converted to
    `sdy.manual_computation`) names only the free axes: `{manual}` gives None (nothing
    left to say), a partially manual sharding its tiling over the other axes."""

    def dims_text(per_dim: list[list[str]]) -> str:
        parts = []
        for i, names in enumerate(per_dim):
            inner = ", ".join(f'"{a}"' for a in names)
            if i in open_dims:
                inner = inner + (", ?" if inner else "?")
            parts.append("{" + inner + "}")
        return "[" + ", ".join(parts) + "]"

    if s.kind == "replicated":
        return f"<@{default_mesh}, {dims_text([[] for _ in range(rank)])}>"
    if s.kind == "maximal":
        # Shardy's verifier: a sharding on a maximal mesh has rank 0, whatever the value's
        return f"<@maximal_mesh_{s.device}, []>"
    if s.kind == "manual":
        if manual_ok:
            return None
        raise ConversionError(
            f"sharding '{s.text}' is manual (a GSPMD shard_map region); export the program with "
            "Shardy (jax_use_shardy_partitioner=True) to get sdy.manual_computation"
        )
    if s.kind == "unknown":
        raise ConversionError(f"sharding '{s.text}' is 'unknown' (left to propagation); nothing to convert")
    if s.kind == "tuple":
        raise ConversionError(f"tuple sharding '{s.text}' on a single value")
    if s.data_rank != rank:
        raise ConversionError(
            f"sharding '{s.text}' has {s.data_rank} data tile dimensions but the value has rank {rank}"
        )
    mesh, per_dim = plan.axes_of[str(s)]
    for t, names in zip(s.subgroup_types, per_dim[s.data_rank :]):
        if t == "manual" and names and not manual_ok:
            raise ConversionError(
                f"sharding '{s.text}' is partially manual (last_tile_dims={{manual}}); export the program "
                "with Shardy (jax_use_shardy_partitioner=True) to get sdy.manual_computation"
            )
        if t == "unreduced" and names:
            raise ConversionError(f"sharding '{s.text}' has unreduced subgroup dimensions; not supported")
    return f"<@{mesh}, {dims_text(per_dim[: s.data_rank])}>"


# ---------------------------------------------------------------------------
# Module rewriting
# ---------------------------------------------------------------------------

_MANUAL_CALLS = ("SPMDFullToShardShape", "SPMDShardToFullShape")


def _str_attr(attr) -> str | None:
    try:
        return ir.StringAttr(attr).value
    except (ValueError, TypeError):
        return None


def _dict_items(attr) -> dict:
    d = ir.DictAttr(attr)
    return {d[i].name: d[i].attr for i in range(len(d))}


def _func_attr_dicts(func: ir.Operation, key: str, count: int) -> list[dict]:
    if key in func.attributes:
        arr = ir.ArrayAttr(func.attributes[key])
        return [_dict_items(a) for a in arr]
    return [{} for _ in range(count)]


def _rank(t: ir.Type) -> int | None:
    try:
        return ir.RankedTensorType(t).rank
    except (ValueError, TypeError):
        return None


def _func_types(func: ir.Operation) -> tuple[list[ir.Type], list[ir.Type]]:
    ft = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
    return list(ft.inputs), list(ft.results)


def _unspecified_dims(op: ir.Operation) -> tuple[int, ...]:
    if "backend_config" not in op.attributes:
        return ()
    text = _str_attr(op.attributes["backend_config"]) or ""
    m = re.search(r"unspecified_dims=\[([0-9,\s]*)\]", text)
    if not m:
        return ()
    return tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)


def module_has_gspmd_shardings(module: ir.Operation) -> bool:
    for op in walk_ops(module):
        if SHARDING_ATTR in op.attributes:
            return True
        if op.name == "func.func":
            for key in ("arg_attrs", "res_attrs"):
                if key in op.attributes:
                    for d in ir.ArrayAttr(op.attributes[key]):
                        if SHARDING_ATTR in _dict_items(d):
                            return True
    return False


def _module_num_partitions(module: ir.Operation) -> int | None:
    if "mhlo.num_partitions" in module.attributes:
        return ir.IntegerAttr(module.attributes["mhlo.num_partitions"]).value
    return None


def convert_module(module: ir.Operation, diagnostics: DiagnosticEngine) -> bool:
    """Rewrite the module's GSPMD shardings into Shardy in place.

    Returns True when something was converted. Errors are emitted on `diagnostics`
    (with the location of the value's owner) and make the function return False after
    having checked every sharding; the module is then left unchanged.
    """
    ok = True
    sites = []  # (kind, op, index, HloSharding)
    for op in walk_ops(module):
        if op.name == "func.func":
            ins, outs = _func_types(op)
            for key, types in (("arg_attrs", ins), ("res_attrs", outs)):
                for i, d in enumerate(_func_attr_dicts(op, key, len(types))):
                    if SHARDING_ATTR in d:
                        text = _str_attr(d[SHARDING_ATTR])
                        try:
                            sites.append((key, op, i, parse_sharding(text)))
                        except ShardingParseError as err:
                            diagnostics.error(op.location, str(err))
                            ok = False
            continue
        if SHARDING_ATTR in op.attributes:
            text = _str_attr(op.attributes[SHARDING_ATTR])
            try:
                sites.append(("op", op, -1, parse_sharding(text)))
            except ShardingParseError as err:
                diagnostics.error(op.location, str(err))
                ok = False
        if op.name == "stablehlo.custom_call" and _str_attr(op.attributes["call_target_name"]) in _MANUAL_CALLS:
            if SHARDING_ATTR not in op.attributes:
                diagnostics.error(
                    op.location,
                    f"custom_call @{_str_attr(op.attributes['call_target_name'])} (a GSPMD shard_map boundary) "
                    f"without {SHARDING_ATTR}",
                )
                ok = False
            elif sites and sites[-1][1] == op:
                sites[-1] = ("boundary",) + sites[-1][1:]
    if not ok:
        return False
    if not sites:
        return False

    plan = plan_mesh([s for *_, s in sites], _module_num_partitions(module))
    default_mesh = next((n for n in plan.meshes if n == "mesh"), None)
    if default_mesh is None:
        # Only replicated/maximal/explicit shardings: still need a mesh for replicated values.
        n = _module_num_partitions(module) or 1
        plan.meshes["mesh"] = ([("axis_0", n)] if n > 1 else [], None)
        default_mesh = "mesh"

    # Build every new attribute first (so that an error leaves the module untouched).
    edits = []
    with module.context:
        for kind, op, index, s in sites:
            try:
                if kind == "boundary":
                    continue  # becomes part of an sdy.manual_computation below
                if is_manual(s):
                    edits.append(_manual_site_edit(kind, op, index, s, plan, default_mesh))
                    continue
                if kind in ("arg_attrs", "res_attrs"):
                    ins, outs = _func_types(op)
                    t = (ins if kind == "arg_attrs" else outs)[index]
                    if s.kind == "tuple":
                        if len(s.elements) != 1:
                            raise ConversionError(f"tuple sharding '{s.text}' with {len(s.elements)} elements on one value")
                        s = s.elements[0]
                    rank = _rank(t)
                    if rank is None:
                        raise ConversionError(f"sharding '{s.text}' on a value of type {t} (not a ranked tensor)")
                    attr = ir.Attribute.parse("#sdy.sharding" + tensor_sharding_text(s, rank, plan, default_mesh))
                    edits.append((kind, op, index, attr))
                    continue
                results = list(op.results)
                is_constraint = (
                    op.name == "stablehlo.custom_call"
                    and _str_attr(op.attributes["call_target_name"]) == "Sharding"
                )
                if is_constraint:
                    if s.kind == "tuple":
                        if len(s.elements) != 1:
                            raise ConversionError(f"tuple sharding '{s.text}' on a single-result @Sharding call")
                        s = s.elements[0]
                    if len(results) != 1 or len(op.operands) != 1:
                        raise ConversionError("custom_call @Sharding must have one operand and one result")
                    rank = _rank(results[0].type)
                    if rank is None:
                        raise ConversionError(f"@Sharding on a value of type {results[0].type}")
                    attr = ir.Attribute.parse(
                        "#sdy.sharding" + tensor_sharding_text(s, rank, plan, default_mesh, _unspecified_dims(op))
                    )
                    edits.append(("constraint", op, -1, attr))
                    continue
                elems = s.elements if s.kind == "tuple" else (s,) * len(results)
                if len(elems) != len(results):
                    raise ConversionError(
                        f"tuple sharding '{s.text}' has {len(elems)} elements but '{op.name}' has {len(results)} results"
                    )
                parts = []
                for r, e in zip(results, elems):
                    rank = _rank(r.type)
                    if rank is None:
                        # tokens and tuples: Shardy wants a rank-0 sharding for them
                        rank = 0
                    if e.kind == "tiled" and e.data_rank != rank:
                        raise ConversionError(
                            f"sharding '{e.text}' has {e.data_rank} data tile dimensions but result of type {r.type} has rank {rank}"
                        )
                    parts.append(tensor_sharding_text(e, rank, plan, default_mesh))
                if not parts:
                    edits.append(("drop", op, -1, None))
                    continue
                attr = ir.Attribute.parse("#sdy.sharding_per_value<[" + ", ".join(parts) + "]>")
                edits.append(("op", op, -1, attr))
            except ConversionError as err:
                diagnostics.error(op.location, str(err))
                ok = False
            except ir.MLIRError as err:  # our text did not parse: a bug, say it plainly
                diagnostics.error(op.location, f"internal error building a Shardy sharding for '{s.text}': {err}")
                ok = False
        if not ok:
            return False

        # Insert the meshes at the top of the module.
        body = module.regions[0].blocks[0]
        existing = {_str_attr(o.attributes["sym_name"]) for o in body.operations if "sym_name" in o.attributes}
        anchor = body.operations[0] if len(body.operations) else None
        for name, (axes, ids) in plan.meshes.items():
            if name in existing:
                diagnostics.error(module.location, f"cannot add sdy.mesh @{name}: the symbol already exists")
                return False
        ip = ir.InsertionPoint(anchor) if anchor is not None else ir.InsertionPoint(body)
        for name, (axes, ids) in plan.meshes.items():
            with module.location, ip:
                ir.Operation.create(
                    "sdy.mesh",
                    attributes={
                        "sym_name": ir.StringAttr.get(name),
                        "mesh": ir.Attribute.parse(mesh_attr_text(axes, ids)),
                    },
                )

        func_dicts: dict = {}
        for kind, op, index, attr in edits:
            if kind in ("arg_attrs", "res_attrs"):
                key = (op, kind)
                if key not in func_dicts:
                    ins, outs = _func_types(op)
                    func_dicts[key] = _func_attr_dicts(op, kind, len(ins if kind == "arg_attrs" else outs))
                d = func_dicts[key][index]
                d.pop(SHARDING_ATTR, None)
                d[SDY_SHARDING_ATTR] = attr
            elif kind == "constraint":
                with op.location, ir.InsertionPoint(op):
                    new = ir.Operation.create(
                        "sdy.sharding_constraint",
                        results=[op.results[0].type],
                        operands=[op.operands[0]],
                        attributes={"sharding": attr},
                    )
                op.results[0].replace_all_uses_with(new.results[0])
                op.erase()
            elif kind == "op":
                del op.attributes[SHARDING_ATTR]
                op.attributes[SDY_SHARDING_ATTR] = attr
            elif kind == "unwrap":  # a @Sharding {manual}: nothing left to constrain
                op.results[0].replace_all_uses_with(op.operands[0])
                op.erase()
            elif kind == "drop_arg":
                key = (op, index[0])
                if key not in func_dicts:
                    ins, outs = _func_types(op)
                    func_dicts[key] = _func_attr_dicts(op, index[0], len(ins if index[0] == "arg_attrs" else outs))
                func_dicts[key][index[1]].pop(SHARDING_ATTR, None)
            else:
                del op.attributes[SHARDING_ATTR]
        for (op, kind), dicts in func_dicts.items():
            op.attributes[kind] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])
        boundaries = [(op, s) for kind, op, _, s in sites if kind == "boundary"]
        if boundaries and not _build_manual_computations(boundaries, plan, default_mesh, diagnostics):
            return False
    return True


def _manual_site_edit(kind, op, index, s: HloSharding, plan: MeshPlan, default_mesh: str):
    """The edit for a sharding inside a GSPMD shard_map region: only its free axes are
    kept (Shardy's `sdy.manual_computation` body names no manual axis)."""
    if kind in ("arg_attrs", "res_attrs"):
        ins, outs = _func_types(op)
        t = (ins if kind == "arg_attrs" else outs)[index]
        text = tensor_sharding_text(s, _rank(t) or 0, plan, default_mesh, manual_ok=True)
        if text is None:
            return ("drop_arg", op, (kind, index), None)
        return (kind, op, index, ir.Attribute.parse("#sdy.sharding" + text))
    results = list(op.results)
    if op.name == "stablehlo.custom_call" and _str_attr(op.attributes["call_target_name"]) == "Sharding":
        if s.kind == "tuple":
            if len(s.elements) != 1:
                raise ConversionError(f"tuple sharding '{s.text}' on a single-result @Sharding call")
            s = s.elements[0]
        rank = _rank(results[0].type)
        text = tensor_sharding_text(s, rank or 0, plan, default_mesh, _unspecified_dims(op), manual_ok=True)
        if text is None or not rank:
            return ("unwrap", op, -1, None)
        return ("constraint", op, -1, ir.Attribute.parse("#sdy.sharding" + text))
    elems = s.elements if s.kind == "tuple" else (s,) * len(results)
    parts = [tensor_sharding_text(e, _rank(r.type) or 0, plan, default_mesh, manual_ok=True) for r, e in zip(results, elems)]
    if len(elems) != len(results) or any(p is None for p in parts) or not parts:
        return ("drop", op, -1, None)
    return ("op", op, -1, ir.Attribute.parse("#sdy.sharding_per_value<[" + ", ".join(parts) + "]>"))


def _value_owner(v):
    owner = v.owner
    return getattr(owner, "operation", owner)


def _build_manual_computations(boundaries, plan: MeshPlan, default_mesh: str, diagnostics: DiagnosticEngine) -> bool:
    """Turn every GSPMD shard_map region into an `sdy.manual_computation`.

    JAX's GSPMD lowering of `shard_map` is `@Sharding` (the input's sharding) ->
    `@SPMDFullToShardShape` {manual} -> body (a call of the body function, on local
    shapes) -> `@Sharding` {manual} -> `@SPMDShardToFullShape` (the output's sharding).
    The body is every op of the block that uses, transitively, a FullToShard result,
    up to the ShardToFull calls; regions sharing ops are one. The manual axes are the
    FullToShard sharding's manual subgroup (`last_tile_dims={manual, ...}`) or, for
    `{manual}`, every axis of the mesh."""
    ok = True
    groups: list = []  # (block, [(op, sharding, target)])
    for op, s in boundaries:
        target = _str_attr(op.attributes["call_target_name"])
        for block, items in groups:
            if block == op.block:
                items.append((op, s, target))
                break
        else:
            groups.append((op.block, [(op, s, target)]))
    for block, items in groups:
        block_ops = [o.operation for o in block.operations]
        index = {o: i for i, o in enumerate(block_ops)}
        fulls = [(op, s) for op, s, t in items if t == "SPMDFullToShardShape"]
        to_fulls = [(op, s) for op, s, t in items if t == "SPMDShardToFullShape"]
        # forward closure of each FullToShard result, stopping at ShardToFull calls
        to_full_set = {op for op, _ in to_fulls}
        comp_of: dict = {}  # op index -> component id
        parent = list(range(len(fulls)))

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for k, (f, _) in enumerate(fulls):
            stack = [f]
            seen = {f}
            while stack:
                cur = stack.pop()
                i = index[cur]
                if i in comp_of and find(comp_of[i]) != find(k):
                    parent[find(comp_of[i])] = find(k)
                comp_of[i] = k
                for r in cur.results:
                    for use in r.uses:
                        user = use.owner
                        user = getattr(user, "operation", user)
                        # the user op of this block that contains the use
                        while user is not None and user not in index:
                            user = user.parent
                        if user is None or user in seen or user in to_full_set:
                            continue
                        seen.add(user)
                        stack.append(user)
        components: dict[int, dict] = {}
        for k, (f, s) in enumerate(fulls):
            components.setdefault(find(k), {"in": [], "out": [], "body": set()})["in"].append((f, s))
        for i, k in comp_of.items():
            if block_ops[i] not in {f for f, _ in fulls}:
                components[find(k)]["body"].add(i)
        for t, s in to_fulls:
            producer = _value_owner(t.operands[0])
            if isinstance(producer, ir.Operation) and producer in index and index[producer] in comp_of:
                components[find(comp_of[index[producer]])]["out"].append((t, s))
            else:
                diagnostics.error(t.location, "custom_call @SPMDShardToFullShape whose operand does not come from a shard_map body")
                ok = False
        if not ok:
            return False
        terminator = block_ops[-1]
        if terminator in index and index[terminator] in comp_of:
            diagnostics.error(
                terminator.location,
                f"'{terminator.name}' uses a value of a GSPMD shard_map region (local shape, after "
                "@SPMDFullToShardShape) that leaves it without @SPMDShardToFullShape",
            )
            return False
        for comp in components.values():
            if not _make_manual_computation(block, block_ops, index, comp, plan, default_mesh, diagnostics):
                ok = False
    return ok


def _sharding_of_value(v, plan: MeshPlan, default_mesh: str) -> str | None:
    """The sharding an sdy.sharding_constraint (the converted `@Sharding` in front of a
    FullToShard call) gives a value, as `<@mesh, [...]>` text."""
    owner = _value_owner(v)
    if isinstance(owner, ir.Operation) and owner.name == "sdy.sharding_constraint":
        return str(owner.attributes["sharding"])[len("#sdy.sharding") :]
    return None


def _make_manual_computation(block, block_ops, index, comp, plan, default_mesh, diagnostics) -> bool:
    ins = sorted(comp["in"], key=lambda x: index[x[0]])
    outs = sorted(comp["out"], key=lambda x: index[x[0]])
    body = [block_ops[i] for i in sorted(comp["body"])]
    where = ins[0][0]
    in_texts, out_texts = [], []
    for f, s in ins:
        text = _sharding_of_value(f.operands[0], plan, default_mesh)
        if text is None:
            diagnostics.error(f.location, "custom_call @SPMDFullToShardShape without a @Sharding call in front: the shard_map input's sharding is unknown")
            return False
        in_texts.append(text)
    for t, s in outs:
        try:
            rank = _rank(t.results[0].type)
            out_texts.append(tensor_sharding_text(s, rank or 0, plan, default_mesh, _unspecified_dims(t)))
        except ConversionError as err:
            diagnostics.error(t.location, str(err))
            return False
    meshes = {re.match(r"<@([\w.$-]+)", x).group(1) for x in in_texts + out_texts}
    if len(meshes) != 1:
        diagnostics.error(where.location, f"shard_map inputs and outputs on different meshes ({', '.join(sorted(meshes))})")
        return False
    mesh = meshes.pop()
    partial = [manual_axes(s, plan) for f, s in ins if s.kind == "tiled"]
    if partial:
        names = partial[0][1]
        if any(p != partial[0] for p in partial):
            diagnostics.error(where.location, "shard_map inputs with different manual axes")
            return False
    else:
        names = [a for a, _ in plan.meshes[mesh][0]]
    order = [a for a, _ in plan.meshes[mesh][0]]
    names = sorted(set(names), key=order.index)
    with where.location:
        in_attr = ir.Attribute.parse("#sdy.sharding_per_value<[" + ", ".join(in_texts) + "]>")
        out_attr = ir.Attribute.parse("#sdy.sharding_per_value<[" + ", ".join(out_texts) + "]>")
        axes_attr = ir.Attribute.parse("#sdy<manual_axes{" + ", ".join(f'"{a}"' for a in names) + "}>")
    # values the body uses from outside (other than FullToShard results): constants are cloned in
    full_ops = {f for f, _ in ins}
    body_set = set(body)
    captured = []
    for op in body:
        for inner in [op] + list(walk_ops(op)):
            for v in inner.operands:
                owner = _value_owner(v)
                if isinstance(owner, ir.Operation) and owner in index and owner not in body_set and owner not in full_ops:
                    if len(owner.operands) or len(owner.regions):
                        diagnostics.error(
                            op.location,
                            f"a shard_map body uses '{owner.name}' computed outside it on global shapes; cannot convert",
                        )
                        return False
                    captured.append(owner)
    # insert after the last input and every op the outputs' users need come later
    anchor = max((f for f, _ in ins), key=lambda o: index[o])
    with anchor.location, ir.InsertionPoint(anchor):
        mc = ir.Operation.create(
            "sdy.manual_computation",
            results=[t.results[0].type for t, _ in outs],
            operands=[f.operands[0] for f, _ in ins],
            attributes={"in_shardings": in_attr, "out_shardings": out_attr, "manual_axes": axes_attr},
            regions=1,
        )
    anchor.move_before(mc)
    new_block = mc.regions[0].blocks.append(*[f.results[0].type for f, _ in ins], arg_locs=[f.location for f, _ in ins])
    clones = {}
    for c in dict.fromkeys(captured):
        with ir.InsertionPoint(new_block):
            clones[c] = c.clone()
    for op in body:
        new_block.append(op)
    for c, copy in clones.items():
        for r_old, r_new in zip(c.results, copy.results):
            for op in body:
                for inner in [op] + list(walk_ops(op)):
                    for k, v in enumerate(inner.operands):
                        if v == r_old:
                            inner.operands[k] = r_new
    for (f, _), arg in zip(ins, new_block.arguments):
        f.results[0].replace_all_uses_with(arg)
    ret_vals = []
    for t, _ in outs:
        v = t.operands[0]
        owner = _value_owner(v)
        if isinstance(owner, ir.Operation) and owner in full_ops:
            v = new_block.arguments[[f for f, _ in ins].index(owner)]
        ret_vals.append(v)
    with anchor.location, ir.InsertionPoint(new_block):
        ir.Operation.create("sdy.return", operands=ret_vals)
    for (t, _), r in zip(outs, mc.results):
        t.results[0].replace_all_uses_with(r)
    for t, _ in outs:
        t.erase()
    for f, _ in ins:
        f.erase()
    _restore_dominance(block)
    return True


def _restore_dominance(block) -> None:
    """Stable topological order of a block (an op before its users, otherwise the
    program order), after a manual computation was built at its last input: a user of
    an earlier output may have come before it."""
    import heapq

    ops = [o.operation for o in block.operations]
    index = {o: i for i, o in enumerate(ops)}

    def deps(op):
        out = set()
        for inner in [op] + list(walk_ops(op)):
            for v in inner.operands:
                owner = _value_owner(v)
                while isinstance(owner, ir.Operation) and owner not in index:
                    owner = owner.parent
                if isinstance(owner, ir.Operation) and owner in index and owner != op:
                    out.add(index[owner])
        return out

    before = [deps(op) for op in ops]
    if all(all(d < i for d in ds) for i, ds in enumerate(before)):
        return
    users = [[] for _ in ops]
    indeg = [len(ds) for ds in before]
    for i, ds in enumerate(before):
        for d in ds:
            users[d].append(i)
    ready = [i for i, n in enumerate(indeg) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(ops):
        return  # a cycle: left to the verifier
    terminator = ops[-1]
    for i in order:
        if ops[i] != terminator:
            ops[i].move_before(terminator)

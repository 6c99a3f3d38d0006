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
  becomes a maximal mesh `<[], device_ids=[N]>`. GSPMD manual regions
  (`@SPMDFullToShardShape` / `@SPMDShardToFullShape`, `{manual}`) are reported as
  errors: export such programs with Shardy (`jax_use_shardy_partitioner=True`), which
  emits `sdy.manual_computation`.

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


def tensor_sharding_text(
    s: HloSharding, rank: int, plan: MeshPlan, default_mesh: str = "mesh", open_dims: tuple[int, ...] = ()
) -> str:
    """`<@mesh, [{"axis_0"}, {}]>` for a (non-tuple) sharding of a rank-`rank` value."""

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
        return f"<@maximal_mesh_{s.device}, {dims_text([[] for _ in range(rank)])}>"
    if s.kind == "manual":
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
        if t == "manual" and names:
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
        if op.name == "stablehlo.custom_call":
            target = _str_attr(op.attributes["call_target_name"])
            if target in _MANUAL_CALLS:
                diagnostics.error(
                    op.location,
                    f"custom_call @{target} (a GSPMD shard_map region) cannot be converted to Shardy; "
                    "export the program with Shardy (jax_use_shardy_partitioner=True), which emits "
                    "sdy.manual_computation",
                )
                ok = False
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
            else:
                del op.attributes[SHARDING_ATTR]
        for (op, kind), dicts in func_dicts.items():
            op.attributes[kind] = ir.ArrayAttr.get([ir.DictAttr.get(d) for d in dicts])
    return True

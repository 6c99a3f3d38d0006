"""What XLA does around Shardy, for `propagate-shardings` to partition a program as XLA
would (docs/sharding.md, "Partitioned as XLA partitions it").

JAX compiles a sharded program by converting it to HLO, running Shardy's propagation on
the HLO converted back to MLIR, and partitioning with XLA's own SPMD partitioner. We run
Shardy's passes from the bindings for all of it; where the result depends on something
XLA does differently, this module does it XLA's way:

* `broadcasts_as_hlo(module)`: a `broadcast_in_dim` that only adds size-1 dimensions is a
  `reshape` in HLO (and a pure permutation a `transpose`); Shardy's propagation treats
  them differently.
* `order_as_hlo(module)`: the ops of each block in the post-order XLA's HLO -> MLIR
  conversion gives them (Shardy resolves conflicts in walk order).
* `merge_duplicate_reshards(module)`: one collective per resharded value (XLA's reshard
  cache), not one per use.
* `dot_strategies(module)`: a dot_general's operands resharded as XLA's dot partitioner
  (`PartitionBaseCase`) reshards them, before Shardy's `insert-explicit-reshards`
  chooses by tensor size.
* `dynamic_slice_strategies(module)`: a `dynamic_slice` of an operand sharded on a
  sliced dimension reshards the operand to the slice's sharding (XLA replicates the
  sliced dimensions) instead of moving the axis to another dimension.
* `window_and_sort_strategies(module)`: a `reduce_window` whose window spans a sharded
  dimension (a cumsum) and a `sort` along a sharded dimension (top_k, argsort) are run
  with that dimension replicated (operands all-gathered, the result sliced back), as
  XLA's partitioner does for a sort dimension; Shardy's conversion aborts on both.
* `reductions_as_xla(module)` (on the per-device program): a reduction over a sharded
  dimension ends in an all-reduce with the reduction's own operation (Shardy's always
  adds: a max became a sum), and a variadic one (argmax) all-gathers the partial results
  and reduces them again, as XLA's partitioner does (Shardy all-reduced each result
  with a sum).

Functions take a module whose context is active (the pass's); none builds a context.
"""

from __future__ import annotations

import math
import re

from .ir import ir, walk_ops

__all__ = [
    "broadcasts_as_hlo",
    "order_as_hlo",
    "merge_duplicate_reshards",
    "dot_strategies",
    "dynamic_slice_strategies",
    "reductions_as_xla",
    "window_and_sort_strategies",
    "sharding_list",
    "is_sharded",
]

def _ranked(t) -> bool:
    return t.typeid == ir.RankedTensorType.static_typeid


def _owner(v):
    owner = v.owner
    return getattr(owner, "operation", owner)


# ---------------------------------------------------------------------------
# Sharding texts


def sharding_list(per_value: ir.Attribute) -> list[str] | None:
    """`#sdy.sharding_per_value<[<@m, [...]>, ...]>` -> `#sdy.sharding<@m, [...]>` texts."""
    text = str(per_value)
    prefix = "#sdy.sharding_per_value<["
    if not text.startswith(prefix) or not text.endswith("]>"):
        return None
    body, out, depth, start = text[len(prefix) : -2], [], 0, 0
    for i, c in enumerate(body):
        if c in "<[{(":
            depth += 1
        elif c in ">]})":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(body[start:i].strip())
            start = i + 1
    if body.strip():
        out.append(body[start:].strip())
    return [f"#sdy.sharding{t}" if t.startswith("<") else t for t in out]


def is_sharded(sharding: str) -> bool:
    """Whether a sharding text names an axis on some dimension."""
    return '"' in sharding[sharding.find("[") :]


def _parse_dims(text: str):
    """`<@mesh, [{"a"}, {}, {"b", "c"}]>` -> ("mesh", [["a"], [], ["b", "c"]]); None for
    open dimensions, sub-axes, priorities or replicated/unreduced axis lists (those are
    left to Shardy)."""
    m = re.fullmatch(r"<@([\w.$-]+), \[(.*)\]>", text.strip())
    if not m:
        return None
    body = m.group(2)
    if re.sub(r"\{[^{}]*\}", "", body).replace(",", "").strip():
        return None
    out = []
    for d in re.findall(r"\{([^{}]*)\}", body):
        names = [x.strip() for x in d.split(",") if x.strip()]
        if any(not re.fullmatch(r'"[^"]*"', n) for n in names):
            return None
        out.append([n[1:-1] for n in names])
    return m.group(1), out


def _dims_text(mesh: str, dims: list[list[str]]) -> str:
    return "<@" + mesh + ", [" + ", ".join("{" + ", ".join(f'"{a}"' for a in d) + "}" for d in dims) + "]>"


def _value_sharding(v) -> str | None:
    """The sharding Shardy gave a value (`<@mesh, [...]>`), or None if unknown."""
    owner = _owner(v)
    if isinstance(owner, ir.Operation):
        if "sdy.sharding" not in owner.attributes:
            return None
        shardings = sharding_list(owner.attributes["sdy.sharding"])
        idx = next(i for i, r in enumerate(owner.results) if r == v)
        return shardings[idx][len("#sdy.sharding") :] if shardings and idx < len(shardings) else None
    parent = owner.owner  # a block argument: `owner` is its block, the block's owner the op
    parent = getattr(parent, "operation", parent)
    if parent is None:
        return None
    if parent.name == "func.func" and "arg_attrs" in parent.attributes:
        d = ir.DictAttr(ir.ArrayAttr(parent.attributes["arg_attrs"])[v.arg_number])
        if "sdy.sharding" in d:
            return str(d["sdy.sharding"])[len("#sdy.sharding") :]
    if parent.name == "stablehlo.while" and "sdy.sharding" in parent.attributes:
        shardings = sharding_list(parent.attributes["sdy.sharding"])
        if shardings and v.arg_number < len(shardings):
            return shardings[v.arg_number][len("#sdy.sharding") :]
    return None


# ---------------------------------------------------------------------------
# The program as XLA's HLO import gives it


def broadcasts_as_hlo(module: ir.Operation) -> int:
    """A `broadcast_in_dim` that only adds size-1 dimensions becomes a `reshape`, one that
    only permutes dimensions a `transpose`, one that does neither its operand — as in the
    HLO that XLA compiles. Shardy's propagation treats a broadcast and a reshape
    differently: a `lax.scan` stashing its per-layer residuals with `broadcast_in_dim` +
    `dynamic_update_slice` gets its stacked residuals sharded on another dimension than
    XLA gives them. Returns how many were rewritten."""
    n = 0
    for op in [o for o in walk_ops(module) if o.name == "stablehlo.broadcast_in_dim"]:
        src, dst = op.operands[0].type, op.results[0].type
        if not _ranked(src) or not _ranked(dst):
            continue
        src, dst = ir.RankedTensorType(src), ir.RankedTensorType(dst)
        if not src.has_static_shape or not dst.has_static_shape:
            continue
        dims = [int(d) for d in ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"])]
        if math.prod(src.shape) != math.prod(dst.shape) or any(src.shape[i] != dst.shape[d] for i, d in enumerate(dims)):
            continue  # a real broadcast
        attrs = {}
        for i in range(len(op.attributes)):
            a = op.attributes[i]
            if a.name != "broadcast_dimensions":
                attrs[a.name] = a.attr
        with ir.InsertionPoint(op), op.location:
            if dims == sorted(dims):
                if src == dst:
                    new = op.operands[0]
                else:
                    new = ir.Operation.create("stablehlo.reshape", results=[dst], operands=[op.operands[0]], attributes=attrs).results[0]
            elif src.rank == dst.rank:
                attrs["permutation"] = ir.DenseI64ArrayAttr.get([dims.index(d) for d in range(dst.rank)])
                new = ir.Operation.create("stablehlo.transpose", results=[dst], operands=[op.operands[0]], attributes=attrs).results[0]
            else:
                continue  # permutes and adds dimensions: left as it is
        op.results[0].replace_all_uses_with(new)
        op.erase()
        n += 1
    return n


def order_as_hlo(module: ir.Operation) -> None:
    """The ops of every block in the order XLA's HLO -> MLIR conversion gives them: a
    post-order depth-first walk of the data flow from each op without users
    (side-effecting and dead ops in program order, the terminator last), operands first
    to last (`HloComputation::MakeInstructionPostOrder`; an HLO computation keeps no op
    order of its own). Shardy's propagation resolves conflicting shardings in walk
    order, so the order decides real choices: a `lax.scan` training step whose backward
    pass computes the weight gradients before the input gradient (as JAX emits it) gets
    other shardings for its stashed residuals than XLA gives them."""
    for op in walk_ops(module):
        for region in op.regions:
            for block in region.blocks:
                _order_block(block)


def _order_block(block) -> None:
    ops = [o.operation for o in block.operations]
    if len(ops) < 3:
        return
    index = {op: i for i, op in enumerate(ops)}

    def producers(op):
        """Ops of this block whose results `op` uses: its operands, then values its
        regions capture (HLO makes those explicit operands after the others)."""
        out = []
        for inner in [op] + (list(walk_ops(op)) if len(op.regions) else []):
            for v in inner.operands:
                owner = _owner(v)
                if isinstance(owner, ir.Operation) and owner in index and owner != op:
                    out.append(owner)
        return out

    state = [0] * len(ops)  # 0 new, 1 visiting, 2 done
    order = []
    terminator = ops[-1]
    roots = [op for op in ops[:-1] if all(not list(r.uses) for r in op.results)] + [terminator]
    for root in roots:
        stack = [root]
        while stack:
            cur = stack[-1]
            i = index[cur]
            if state[i] == 0:
                state[i] = 1
                for p in reversed(producers(cur)):
                    if state[index[p]] == 0:
                        stack.append(p)
            else:
                stack.pop()
                if state[i] == 1:
                    state[i] = 2
                    order.append(cur)
    if len(order) != len(ops) or order == ops:
        return
    for op in order[:-1]:
        op.move_before(terminator)


# ---------------------------------------------------------------------------
# XLA's SPMD partitioner choices

_SDY_COLLECTIVES = ("sdy.all_gather", "sdy.all_slice", "sdy.all_to_all", "sdy.collective_permute", "sdy.all_reduce")


def merge_duplicate_reshards(module: ir.Operation) -> int:
    """Two identical `sdy` collectives of the same value become one (the first, which
    dominates): XLA's SPMD partitioner reshards a value once and reuses the result (its
    reshard cache), `sdy-reshard-to-collectives` emits a collective per use (an FSDP step
    all-gathers its input for the forward matmul and again for the backward one).
    `costmodel.reshard_cse.merge_identical_collectives` on Shardy's collectives.
    Returns how many were removed."""
    from .reshard_cse import merge_identical_collectives

    return merge_identical_collectives(module, frozenset(_SDY_COLLECTIVES))


def _dot_dims(op):
    text = str(op.attributes["dot_dimension_numbers"])

    def dims(key):
        m = re.search(key + r" = \[([\d, ]*)\]", text)
        return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []

    return (
        dims("lhs_batching_dimensions"),
        dims("rhs_batching_dimensions"),
        dims("lhs_contracting_dimensions"),
        dims("rhs_contracting_dimensions"),
    )


def _reshard(value, mesh: str, dims: list[list[str]], where) -> ir.Value:
    """`sdy.reshard` of `value` to `dims`, before the op `where` or at the insertion
    point `where`."""
    ip = where if isinstance(where, ir.InsertionPoint) else ir.InsertionPoint(where)
    with value.location, ip:
        op = ir.Operation.create(
            "sdy.reshard",
            results=[value.type],
            operands=[value],
            attributes={"sharding": ir.Attribute.parse("#sdy.sharding" + _dims_text(mesh, dims))},
        )
    return op.results[0]


def dot_strategies(module: ir.Operation) -> int:
    """Reshard dot_general operands as XLA's dot partitioner does, where its choice is
    not Shardy's (after propagation, before `sdy-insert-explicit-reshards`):

    1. Both operands sharded on their contracting dimensions the same way and nowhere
       else: a local dot, an all-reduce over those axes, and the result resharded to its
       propagated sharding (XLA: "LHS and RHS have the same partitioned contracting
       dimensions"; the weight gradient of an FSDP or data-parallel step). The smaller
       operand would be resharded to the other's sharding; here they already agree.
    2. One operand X sharded on its batch and free dimensions exactly as the result and
       on its contracting dimensions only with axes the result does not use: the other
       operand Y is resharded to the result's sharding on its batch and free dimensions
       and X's on its contracting ones (XLA: "LHS and output have the same partitioned
       non-contracting dimensions" -> the other operand replicated; an FSDP matmul
       all-gathers the weight sharded on its contracting dimension).

    Shardy's `insert-explicit-reshards` would instead compare tensor sizes and may move
    the activations (all-to-all to the contracting dimension, all-reduce of the product,
    slice back). Dots whose shardings are open, use sub-axes or span several meshes are
    left to Shardy. Returns how many dots were changed."""
    n = 0
    for op in list(walk_ops(module)):
        if op.name != "stablehlo.dot_general" or "sdy.sharding" not in op.attributes:
            continue
        out = sharding_list(op.attributes["sdy.sharding"])
        out = _parse_dims(out[0][len("#sdy.sharding") :]) if out and len(out) == 1 else None
        shardings = [_value_sharding(v) for v in op.operands]
        if out is None or None in shardings:
            continue
        lhs, rhs = (_parse_dims(s) for s in shardings)
        if lhs is None or rhs is None or not (out[0] == lhs[0] == rhs[0]):
            continue
        mesh, o = out
        lhs, rhs = lhs[1], rhs[1]
        lb, rb, lc, rc = _dot_dims(op)
        lf = [d for d in range(len(lhs)) if d not in lb and d not in lc]
        rf = [d for d in range(len(rhs)) if d not in rb and d not in rc]
        # result dimension of each operand dimension
        l_out = {d: i for i, d in enumerate(lb)} | {d: len(lb) + i for i, d in enumerate(lf)}
        r_out = {d: i for i, d in enumerate(rb)} | {d: len(lb) + len(lf) + i for i, d in enumerate(rf)}

        # 1. the same contracting sharding on both sides, nothing else sharded
        l_con, r_con = [lhs[d] for d in lc], [rhs[d] for d in rc]
        if (
            l_con == r_con
            and any(l_con)
            and not any(lhs[d] for d in l_out)
            and not any(rhs[d] for d in r_out)
        ):
            if any(o):
                with op.location:
                    op.attributes["sdy.sharding"] = ir.Attribute.parse(
                        "#sdy.sharding_per_value<[" + _dims_text(mesh, [[] for _ in o]) + "]>"
                    )
                result = op.results[0]
                users = [(getattr(u.owner, "operation", u.owner), u.operand_number) for u in result.uses]
                resharded = _reshard(result, mesh, o, ir.InsertionPoint.after(op))
                for user, k in users:
                    user.operands[k] = resharded
                n += 1
            continue

        # 2. one operand sharded as the result
        out_axes = {a for d in o for a in d}
        for x, xo, xc, y, yo, yc, yi in (
            (lhs, l_out, lc, rhs, r_out, rc, 1),
            (rhs, r_out, rc, lhs, l_out, lc, 0),
        ):
            if any(x[d] != o[i] for d, i in xo.items()):
                continue
            x_con = [x[d] for d in xc]
            if any(a in out_axes for axes in x_con for a in axes):
                continue
            target = [[] for _ in y]
            for d, i in yo.items():
                target[d] = list(o[i])
            for k, d in enumerate(yc):
                target[d] = list(x_con[k])
            if target != y:
                op.operands[yi] = _reshard(op.operands[yi], mesh, target, op)
                n += 1
            break
    return n


def dynamic_slice_strategies(module: ir.Operation) -> int:
    """A `dynamic_slice` whose operand is sharded on a dimension it slices: the operand
    is resharded to the (propagated) sharding of the slice, as XLA's partitioner does
    ("we currently do not partition the sliced dimensions": the operand is replicated
    along them; a `lax.scan` over parameters stacked and sharded on the layer axis
    all-gathers the stack). Shardy's `insert-explicit-reshards` would move the axis to
    another dimension (all-to-all), slice, and gather the slice. Returns how many
    operands were resharded."""
    n = 0
    for op in list(walk_ops(module)):
        if op.name != "stablehlo.dynamic_slice":
            continue
        src = _value_sharding(op.operands[0])
        src = _parse_dims(src) if src is not None else None
        if src is None or not _ranked(op.operands[0].type):
            continue
        mesh, s = src
        shape = ir.RankedTensorType(op.operands[0].type).shape
        sizes = [int(x) for x in ir.DenseI64ArrayAttr(op.attributes["slice_sizes"])]
        if not any(s[d] and sizes[d] != shape[d] for d in range(len(s))):
            continue
        if "sdy.sharding" in op.attributes:
            res = sharding_list(op.attributes["sdy.sharding"])
            res = _parse_dims(res[0][len("#sdy.sharding") :]) if res else None
            if res is None or res[0] != mesh:
                continue
            target = res[1]
        else:
            target = [[] for _ in s]  # no sharding after propagation: replicated
        if target != s:
            op.operands[0] = _reshard(op.operands[0], mesh, target, op)
            n += 1
    return n


# ---------------------------------------------------------------------------
# Reductions over sharded dimensions (the per-device program)

_COMBINERS = frozenset(
    {"stablehlo.add", "stablehlo.maximum", "stablehlo.minimum", "stablehlo.multiply", "stablehlo.and",
     "stablehlo.or", "stablehlo.xor"}
)


def _sole_users(value) -> list:
    return [getattr(u.owner, "operation", u.owner) for u in value.uses]


def _combiner(reduce_op) -> str | None:
    """The binary op of a single-input reduce's body (`%r = OP %a, %b; return %r`)."""
    body = reduce_op.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    if len(ops) != 2 or ops[0].name not in _COMBINERS or ops[1].name != "stablehlo.return":
        return None
    args = list(body.arguments)
    if len(args) != 2 or list(ops[0].operands) != args and list(ops[0].operands) != args[::-1]:
        return None
    return ops[0].name


def _set_combiner(all_reduce, name: str) -> bool:
    """Make the all-reduce's body `name` (its body is `%r = add %a, %b; return %r`)."""
    body = all_reduce.regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    if len(ops) != 2 or ops[0].name == name or ops[0].name not in _COMBINERS:
        return False
    old = ops[0]
    with old.location, ir.InsertionPoint(old):
        new = ir.Operation.create(name, results=[old.results[0].type], operands=list(old.operands))
    old.results[0].replace_all_uses_with(new.results[0])
    old.erase()
    return True


def _group_size(all_reduce) -> int | None:
    try:
        groups = ir.DenseElementsAttr(all_reduce.attributes["replica_groups"])
        shape = list(ir.ShapedType(groups.type).shape)
    except (KeyError, ValueError, TypeError):
        return None
    return shape[1] if len(shape) == 2 else None


def _gather_partials(reduce_op, all_reduces: list) -> None:
    """Replace the all-reduces of a variadic reduce's partial results: each partial is
    all-gathered along a new minor dimension and one reduce (a clone of the local one,
    with its body) combines the gathered partials (XLA: bf16[4,4] and s32[4,4] all-gathers
    for an argmax of bf16[8,32000] sharded 2 x 4)."""
    first = all_reduces[0]
    n = _group_size(first)
    gathered = []
    with reduce_op.location, ir.InsertionPoint(first):
        for ar in all_reduces:
            partial = ar.operands[0]
            t = ir.RankedTensorType(partial.type)
            shape = list(t.shape)
            col = ir.Operation.create(
                "stablehlo.reshape", results=[ir.RankedTensorType.get(shape + [1], t.element_type)], operands=[partial]
            ).results[0]
            attrs = {
                "all_gather_dim": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), len(shape)),
                "replica_groups": ar.attributes["replica_groups"],
            }
            for key in ("channel_handle", "use_global_device_ids"):
                if key in ar.attributes:
                    attrs[key] = ar.attributes[key]
            gathered.append(ir.Operation.create(
                "stablehlo.all_gather", results=[ir.RankedTensorType.get(shape + [n], t.element_type)], operands=[col],
                attributes=attrs,
            ).results[0])
        final = reduce_op.clone(ip=ir.InsertionPoint(first))
    k = len(all_reduces)
    for i, g in enumerate(gathered):
        final.operands[i] = g
    final.attributes["dimensions"] = ir.DenseI64ArrayAttr.get([len(ir.RankedTensorType(gathered[0].type).shape) - 1])
    for i, ar in enumerate(all_reduces[:k]):
        ar.results[0].replace_all_uses_with(final.results[i])
        ar.erase()


# on a reduce whose result Shardy all-reduces (an `sdy.all_reduce` reads it): only those
# all-reduces are Shardy's, a user's own (a psum of a max under shard_map) is left as it is
SHARDY_REDUCED_ATTR = "costmodel.shardy_reduced"


def mark_shardy_reductions(module: ir.Operation) -> int:
    """Before the global-to-local conversion: mark every reduce one of whose results an
    `sdy.all_reduce` reads (Shardy's own all-reduce of a partial reduction). Returns how
    many were marked."""
    n = 0
    for op in walk_ops(module):
        if op.name != "sdy.all_reduce" or not len(op.operands):
            continue
        owner = _owner(op.operands[0])
        if isinstance(owner, ir.Operation) and owner.name == "stablehlo.reduce":
            owner.attributes[SHARDY_REDUCED_ATTR] = ir.UnitAttr.get()
            n += 1
    return n


def reductions_as_xla(module: ir.Operation) -> int:
    """On the per-device program: every local reduce whose results each feed one
    all-reduce (of one group) only, which is how Shardy's global-to-local conversion ends
    a reduction over a sharded dimension, always with an add. A single-input reduce's
    all-reduce gets the reduce's own operation (maximum, minimum, multiply, and, or,
    xor), so that the per-device program computes what the global one does; a variadic
    reduce (argmax, argmin: values and indices) all-gathers its partial results and
    reduces them again, as XLA's partitioner does. Only the reduces
    `mark_shardy_reductions` marked (their all-reduces are Shardy's); the marks are
    removed. Returns how many reduces were fixed."""
    fixed = 0
    for op in list(walk_ops(module)):
        if op.name != "stablehlo.reduce" or SHARDY_REDUCED_ATTR not in op.attributes:
            continue
        del op.attributes[SHARDY_REDUCED_ATTR]
        if not op.regions[0].blocks:
            continue
        results = list(op.results)
        users = [_sole_users(r) for r in results]
        if not all(len(u) == 1 and u[0].name == "stablehlo.all_reduce" and len(u[0].operands) == 1 for u in users):
            continue
        all_reduces = [u[0] for u in users]
        if len({str(a.attributes["replica_groups"]) if "replica_groups" in a.attributes else "" for a in all_reduces}) != 1:
            continue
        if len(results) == 1:
            name = _combiner(op)
            if name is not None and _set_combiner(all_reduces[0], name):
                fixed += 1
            continue
        if _group_size(all_reduces[0]) and all(_ranked(r.type) for r in results):
            _gather_partials(op, all_reduces)
            fixed += 1
    return fixed


# ---------------------------------------------------------------------------
# Windows and sorts along sharded dimensions (before insert-explicit-reshards)


def _blocked_dims(op) -> set[int]:
    """The dimensions of a reduce_window or sort that Shardy cannot shard: a window wider
    than 1 (or padded, strided or dilated), the sort dimension."""
    if op.name == "stablehlo.sort":
        try:
            return {ir.IntegerAttr(op.attributes["dimension"]).value}
        except (KeyError, ValueError, TypeError):
            return set()
    rank = len(ir.RankedTensorType(op.operands[0].type).shape) if _ranked(op.operands[0].type) else 0

    def ints(key):
        if key not in op.attributes:
            return None
        try:
            return [int(x) for x in ir.DenseI64ArrayAttr(op.attributes[key])]
        except (ValueError, TypeError):
            try:
                return [int(x) for x in ir.DenseIntElementsAttr(op.attributes[key])]
            except (ValueError, TypeError):
                return None

    window = ints("window_dimensions") or [1] * rank
    strides = ints("window_strides") or [1] * rank
    padding = ints("padding") or [0] * (2 * rank)
    return {d for d in range(rank) if window[d] != 1 or strides[d] != 1 or padding[2 * d] or padding[2 * d + 1]}


_LOCAL_SOURCES = frozenset({"stablehlo.iota", "stablehlo.constant"})


def window_and_sort_strategies(module: ir.Operation) -> int:
    """Every `reduce_window` and `sort` whose propagated sharding shards a dimension it
    cannot (`_blocked_dims`): its operands are resharded and its results re-annotated
    with those dimensions replicated; Shardy's explicit reshards then all-gather the
    operands and slice the results back for their users. Returns how many ops changed."""
    n = 0
    for op in list(walk_ops(module)):
        if op.name not in ("stablehlo.reduce_window", "stablehlo.sort") or "sdy.sharding" not in op.attributes:
            continue
        blocked = _blocked_dims(op)
        shardings = sharding_list(op.attributes["sdy.sharding"])
        if not blocked or not shardings:
            continue
        parsed = [_parse_dims(t[len("#sdy.sharding"):]) for t in shardings]
        if any(p is None for p in parsed):
            continue
        if not any(p[1][d] for p in parsed for d in blocked if d < len(p[1])):
            continue
        new = []
        for mesh, dims in parsed:
            new.append((mesh, [[] if d in blocked else axes for d, axes in enumerate(dims)]))
        k = len(op.results)
        for i, v in enumerate(list(op.operands)[:k]):  # the inputs (reduce_window: then the inits)
            src = _value_sharding(v)
            src = _parse_dims(src) if src is not None else None
            mesh, dims = new[min(i, len(new) - 1)]
            if src is not None and src[1] == dims:
                continue
            owner = _owner(v)
            if isinstance(owner, ir.Operation) and owner.name in _LOCAL_SOURCES and len(owner.results) == 1:
                # an iota or a constant is made whole on each device: no all-gather (XLA:
                # the sort's index iota is not communicated)
                owner.attributes["sdy.sharding"] = ir.Attribute.parse(
                    "#sdy.sharding_per_value<[" + _dims_text(mesh, dims) + "]>"
                )
                continue
            op.operands[i] = _reshard(v, mesh, dims, op)
        op.attributes["sdy.sharding"] = ir.Attribute.parse(
            "#sdy.sharding_per_value<[" + ", ".join(_dims_text(m, d) for m, d in new) + "]>"
        )
        # a slice of the result (top_k: the first k of the sort) stays replicated along that
        # dimension too, as XLA keeps it, instead of being sliced back and gathered again
        for r, (mesh, dims) in zip(op.results, new):
            for use in list(r.uses):
                user = _owner_of_use(use)
                if user.name != "stablehlo.slice" or "sdy.sharding" not in user.attributes:
                    continue
                theirs = sharding_list(user.attributes["sdy.sharding"])
                theirs = _parse_dims(theirs[0][len("#sdy.sharding"):]) if theirs else None
                if theirs is None or theirs[0] != mesh or len(theirs[1]) != len(dims):
                    continue
                kept = [[] if d in blocked else axes for d, axes in enumerate(theirs[1])]
                user.attributes["sdy.sharding"] = ir.Attribute.parse(
                    "#sdy.sharding_per_value<[" + _dims_text(mesh, kept) + "]>"
                )
        n += 1
    return n


def _owner_of_use(use):
    owner = use.owner
    return getattr(owner, "operation", owner)

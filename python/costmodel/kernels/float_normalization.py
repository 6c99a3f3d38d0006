"""XLA GPU's float normalization of bf16 convolutions, applied to a StableHLO module.

The published XLA-compiled ResNet-18 step (`resnet18_train_4_devices-opt.mlir`, the
kernel-formation oracle of docs/kernels.md) runs every convolution in f32 although the
JAX export computes them in bf16: XLA's float normalization put converts around the
convolutions (cuDNN on the GPU it compiled for took no bf16 convolution) and, as
excess precision is allowed by default (`xla_allow_excess_precision`), its
SimplifyFPConversions pass dropped the f32 -> bf16 -> f32 round trips that this
leaves next to them. `upcast_convolutions` does the same to our copy of the export so
that our kernel formation can be compared with XLA's like for like (both sides then
move the same tensors in the same precision); it is not part of any cost pipeline.
"""

from __future__ import annotations

from ..ir import ir

__all__ = ["upcast_convolutions"]

_NARROW = ("bf16", "f16")


def _owner(v):
    owner = v.owner
    return getattr(owner, "operation", owner)


def _elem(t) -> str:
    return str(ir.RankedTensorType(t).element_type)


def upcast_convolutions(module: ir.Operation) -> int:
    """Rewrite every bf16/f16 `stablehlo.convolution` of the module's functions into
    convert -> f32 convolution -> convert, then drop f32 -> bf16 -> f32 convert pairs
    (and converts left unused). Needs the module's context active. Returns the number
    of convolutions rewritten."""
    count = 0
    for fn in module.regions[0].blocks[0].operations:
        fn = fn.operation
        if fn.name != "func.func":
            continue
        for block in fn.regions[0].blocks:
            count += _upcast_block(block)
    return count


def _upcast_block(block) -> int:
    f32 = ir.F32Type.get()
    count = 0
    upcast: dict = {}  # one convert per value, as XLA's CSE leaves it
    for op in [o.operation for o in block.operations]:
        if op.name != "stablehlo.convolution":
            continue
        rt = ir.RankedTensorType(op.results[0].type)
        if str(rt.element_type) not in _NARROW:
            continue
        with op.location:
            ups = []
            for v in op.operands:
                if v not in upcast:
                    t = ir.RankedTensorType(v.type)
                    producer = _owner(v)
                    if isinstance(producer, ir.Operation) and producer.name != "func.func":
                        ip = ir.InsertionPoint.after(producer)
                    else:  # a block argument
                        ip = ir.InsertionPoint.at_block_begin(block)
                    with ip:
                        upcast[v] = ir.Operation.create(
                            "stablehlo.convert", results=[ir.RankedTensorType.get(t.shape, f32)], operands=[v]
                        ).results[0]
                ups.append(upcast[v])
            with ir.InsertionPoint(op):
                attrs = {name: op.attributes[name] for name in op.attributes}
                conv = ir.Operation.create(
                    "stablehlo.convolution",
                    results=[ir.RankedTensorType.get(rt.shape, f32)],
                    operands=ups,
                    attributes=attrs,
                )
                down = ir.Operation.create("stablehlo.convert", results=[rt], operands=[conv.results[0]])
        op.results[0].replace_all_uses_with(down.results[0])
        op.erase()
        count += 1
    if count:
        _drop_round_trips(block)
    return count


def _drop_round_trips(block) -> None:
    """convert(convert(x: f32 -> bf16) -> f32) is x when excess precision is allowed."""
    changed = True
    while changed:
        changed = False
        for op in [o.operation for o in block.operations]:
            if op.name != "stablehlo.convert":
                continue
            src = _owner(op.operands[0])
            if getattr(src, "name", None) != "stablehlo.convert":
                continue
            inner = src.operands[0]
            if inner.type == op.results[0].type and _elem(src.results[0].type) in _NARROW:
                op.results[0].replace_all_uses_with(inner)
                changed = True
        for op in [o.operation for o in block.operations]:
            if op.name == "stablehlo.convert" and not list(op.results[0].uses):
                op.erase()
                changed = True

"""Regenerates the jax.export fixtures in this directory (needs jax and flatbuffers):

    python tests/data/jax_export/make.py

- artifact.mlirbc: `Exported.mlir_module_serialized`, a StableHLO portable artifact
  (VHLO bytecode);
- exported.bin: `Exported.serialize()`, the flatbuffer that wraps the artifact;
- vhlo.mlir: the artifact printed as VHLO text.
The function is tanh(x @ w).sum(axis=0) with x: f32[8,16], w: f32[16,4], so the
annotated costs are known: dot_general 2*8*4*16 = 1024 flops, tanh 32
transcendentals, reduce 28 flops (4 columns of 8 -> 7 adds each).
"""

import os

import jax
import jax.numpy as jnp
from jax import export

from costmodel.ir import ir, make_context

HERE = os.path.dirname(os.path.abspath(__file__))


def f(x, w):
    return jnp.tanh(x @ w).sum(axis=0)


exp = export.export(jax.jit(f))(
    jax.ShapeDtypeStruct((8, 16), jnp.float32), jax.ShapeDtypeStruct((16, 4), jnp.float32)
)
with open(os.path.join(HERE, "artifact.mlirbc"), "wb") as fh:
    fh.write(exp.mlir_module_serialized)
with open(os.path.join(HERE, "exported.bin"), "wb") as fh:
    fh.write(exp.serialize())
with make_context():
    vhlo = ir.Module.parse(exp.mlir_module_serialized).operation.get_asm()
with open(os.path.join(HERE, "vhlo.mlir"), "w") as fh:
    fh.write(vhlo)

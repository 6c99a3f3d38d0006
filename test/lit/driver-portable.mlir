// Inputs written by jax.export (fixtures made by tests/data/jax_export/make.py from
// tanh(x @ w).sum(0), x: f32[8,16], w: f32[16,4]): the portable artifact
// (`mlir_module_serialized`, VHLO bytecode), the whole serialized `Exported`
// (flatbuffer around the artifact), and VHLO text; all are upgraded to StableHLO.

// RUN: stablehlo-opt %data/jax_export/artifact.mlirbc --annotate-cost | FileCheck %s
// RUN: stablehlo-opt %data/jax_export/exported.bin --annotate-cost | FileCheck %s
// RUN: stablehlo-opt %data/jax_export/vhlo.mlir --annotate-cost | FileCheck %s
// RUN: stablehlo-opt - --annotate-cost < %data/jax_export/artifact.mlirbc | FileCheck %s
// RUN: stablehlo-opt %data/jax_export/artifact.mlirbc --emit-bytecode | stablehlo-opt - --annotate-cost | FileCheck %s

// CHECK: module @jit_f attributes {costmodel.summary = {
// CHECK-SAME: total_flops = 1052 : i64
// CHECK-SAME: total_transcendentals = 32 : i64
// CHECK-SAME: unsupported_count = 0 : i64
// CHECK-NOT: vhlo.
// CHECK: stablehlo.dot_general {{.*}}flops = 1024 : i64
// CHECK: stablehlo.tanh {{.*}}transcendentals = 32 : i64

// Bytes that are neither MLIR text nor bytecode: one line, exit 1.
// RUN: not stablehlo-opt %S/Inputs/not-mlir.bin 2>&1 | FileCheck %s --check-prefix=GARBAGE
// GARBAGE: stablehlo-opt: error: {{.*}}not-mlir.bin: not MLIR text (invalid UTF-8 at byte 0) nor MLIR bytecode
// RUN: not stablehlo-opt %S/Inputs/truncated.mlirbc 2>&1 | FileCheck %s --check-prefix=TRUNCATED
// TRUNCATED: stablehlo-opt: error: {{.*}}truncated.mlirbc: cannot read MLIR bytecode:

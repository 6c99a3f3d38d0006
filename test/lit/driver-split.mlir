// --split-input-file: each chunk is parsed and costed on its own, outputs are joined
// with '// -----', and diagnostics keep the line numbers of the whole file.

// RUN: stablehlo-opt %s --split-input-file --annotate-cost | FileCheck %s
// RUN: not stablehlo-opt %s --annotate-cost 2>&1 | FileCheck %s --check-prefix=NOSPLIT

// CHECK-LABEL: func.func @first
// CHECK: stablehlo.add {{.*}}costmodel.cost = {backend = "roofline", bound = "memory", bytes_read = 32 : i64, bytes_written = 16 : i64, flops = 4 : i64
// CHECK: // -----
// CHECK-LABEL: func.func @second
// CHECK: stablehlo.multiply {{.*}}flops = 8 : i64
// CHECK: // -----
// CHECK-LABEL: func.func @first
// CHECK-NOT: // -----

// The third chunk defines @first again: fine in its own chunk, an error without
// splitting (a redefinition, reported at its line in this file).
// NOSPLIT: driver-split.mlir:[[# @LINE + 16]]:{{[0-9]+}}: error: redefinition of symbol named 'first'

func.func @first(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.add %a, %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @second(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = stablehlo.multiply %a, %a : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @first(%a: tensor<2xf32>) -> tensor<2xf32> {
  return %a : tensor<2xf32>
}

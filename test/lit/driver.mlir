// Driver basics: passes as flags and as a pipeline, stdin, bytecode round trip,
// split-input-file, debug info, generic form, unregistered dialects.

// RUN: stablehlo-opt %s | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: stablehlo-opt - < %s | FileCheck %s --check-prefix=ROUNDTRIP
// RUN: stablehlo-opt %s --annotate-cost="hardware=a100-40gb" | FileCheck %s --check-prefix=FLAG
// RUN: stablehlo-opt %s -annotate-cost=hardware=a100-40gb | FileCheck %s --check-prefix=FLAG
// RUN: stablehlo-opt %s --pass-pipeline="builtin.module(canonicalize, annotate-cost{hardware=a100-40gb})" | FileCheck %s --check-prefix=FLAG
// RUN: stablehlo-opt %s --canonicalize --cse --annotate-cost=hardware=a100-40gb | FileCheck %s --check-prefix=FLAG
// RUN: stablehlo-opt %s --emit-bytecode | stablehlo-opt - --annotate-cost=hardware=a100-40gb | FileCheck %s --check-prefix=FLAG
// RUN: stablehlo-opt %s --annotate-cost --emit-bytecode -o %t.mlirbc
// RUN: stablehlo-opt %t.mlirbc | FileCheck %s --check-prefix=BYTECODE
// RUN: stablehlo-opt %s --mlir-print-debuginfo | FileCheck %s --check-prefix=DEBUGINFO
// RUN: stablehlo-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC
// RUN: stablehlo-opt %s --annotate-cost -o %t.out.mlir
// RUN: FileCheck %s --check-prefix=BYTECODE --input-file %t.out.mlir
// RUN: stablehlo-opt --help | FileCheck %s --check-prefix=HELP
// RUN: stablehlo-opt --list-passes | FileCheck %s --check-prefix=HELP

// HELP: --annotate-cost
// HELP-NEXT: backend=<str>
// HELP-NEXT: hardware=<str>

// ROUNDTRIP-LABEL: func.func @main
// ROUNDTRIP: stablehlo.exponential %arg0 : tensor<4xf32>
// ROUNDTRIP-NOT: costmodel

// FLAG: module attributes {costmodel.summary = {backend = "roofline"
// FLAG-SAME: hardware = "a100-40gb"
// FLAG: stablehlo.exponential %arg0 {costmodel.cost = {backend = "roofline", bound = "memory", bytes_read = 16 : i64, bytes_written = 16 : i64, flops = 0 : i64
// FLAG-SAME: transcendentals = 4 : i64}}

// BYTECODE: costmodel.summary
// BYTECODE: stablehlo.exponential %arg0 {costmodel.cost = {backend = "roofline"

// DEBUGINFO: loc("{{.*}}driver.mlir":[[# @LINE + 4]]:8)

// GENERIC: "stablehlo.exponential"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}

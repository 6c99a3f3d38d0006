// --verify-diagnostics checks expected-* comments against real diagnostics of our
// passes (warnings from annotate-cost), of the parser and verifier (errors), per
// split chunk, with line numbers of the whole file.

// RUN: stablehlo-opt %s --split-input-file --verify-diagnostics --annotate-cost | FileCheck %s
// A wrong expectation fails the run and says why.
// RUN: not stablehlo-opt %S/Inputs/verify-mismatch.mlir --verify-diagnostics --annotate-cost 2>&1 | FileCheck %s --check-prefix=MISMATCH
// Without --verify-diagnostics the diagnostics reach stderr as file:line:col lines,
// the good chunks still print, and the exit status is 1.
// RUN: not stablehlo-opt %s --split-input-file --annotate-cost 2>&1 >/dev/null | FileCheck %s --check-prefix=STDERR

// CHECK-LABEL: func.func @loop
// CHECK: stablehlo.while
// CHECK: // -----
// CHECK-LABEL: func.func @cc
// CHECK: costmodel.unsupported
// CHECK-NOT: @bad

// MISMATCH: verify-mismatch.mlir:5:{{[0-9]+}}: error: unexpected warning: cannot infer the trip count
// MISMATCH: verify-mismatch.mlir:4:{{[0-9]+}}: error: expected warning "this warning is never emitted" was not produced

func.func @loop(%n: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  %c1 = stablehlo.constant dense<1> : tensor<i32>
  // STDERR: driver-verify-diagnostics.mlir:[[# @LINE + 2]]:10: warning: cannot infer the trip count of this 'stablehlo.while'
  // expected-warning@+1 {{cannot infer the trip count of this 'stablehlo.while'}}
  %r:2 = stablehlo.while(%i = %c0, %acc = %x) : tensor<i32>, tensor<4xf32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %i1 = stablehlo.add %i, %c1 : tensor<i32>
      %e = stablehlo.exponential %acc : tensor<4xf32>
      stablehlo.return %i1, %e : tensor<i32>, tensor<4xf32>
    }
  return %r#1 : tensor<4xf32>
}

// -----

func.func @cc(%x: tensor<4xf32>) -> tensor<4xf32> {
  // STDERR: driver-verify-diagnostics.mlir:[[# @LINE + 2]]:8: warning: 'stablehlo.custom_call' not costed
  // expected-warning@+1 {{custom_call target 'my_kernel' has no cost rule}}
  %0 = stablehlo.custom_call @my_kernel(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// A verifier error, expected: this chunk fails, the others still print.
func.func @bad(%a: tensor<4xf32>) -> tensor<2xf32> {
  // STDERR: driver-verify-diagnostics.mlir:[[# @LINE + 2]]:3: error: type of return operand 0
  // expected-error@+1 {{type of return operand 0 ('tensor<4xf32>') doesn't match function result type ('tensor<2xf32>')}}
  return %a : tensor<4xf32>
}

// -----

func.func @parse_error(%a: tensor<4xf32>) -> tensor<4xf32> {
  // STDERR: driver-verify-diagnostics.mlir:[[# @LINE + 2]]:26: error: use of undeclared SSA value name
  // expected-error@+1 {{use of undeclared SSA value name}}
  %0 = stablehlo.add %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Input of driver-verify-diagnostics.mlir: the expectation is wrong on purpose.
func.func @loop(%n: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  // expected-warning@+1 {{this warning is never emitted}}
  %r = stablehlo.while(%i = %c0) : tensor<i32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      stablehlo.return %i : tensor<i32>
    }
  return %x : tensor<4xf32>
}

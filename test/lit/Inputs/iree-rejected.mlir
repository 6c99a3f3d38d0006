func.func @main(%x: tensor<1x9x9x1xf32>, %s: tensor<1x4x4x1xf32>) -> tensor<1x9x9x1xf32> {
  %init = stablehlo.constant dense<0.0> : tensor<f32>
  %0 = "stablehlo.select_and_scatter"(%x, %s, %init) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
  }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %c : tensor<f32>
  }) {window_dimensions = array<i64: 1, 3, 3, 1>, window_strides = array<i64: 1, 2, 2, 1>} : (tensor<1x9x9x1xf32>, tensor<1x4x4x1xf32>, tensor<f32>) -> tensor<1x9x9x1xf32>
  return %0 : tensor<1x9x9x1xf32>
}

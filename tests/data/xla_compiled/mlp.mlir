module @jit_mlp attributes {mhlo.cross_program_prefetches = [], mhlo.input_output_alias = [], mhlo.is_dynamic = false, mhlo.use_auto_spmd_partitioning = false} {
  func.func private @region_0.1(%arg0: tensor<f32>, %arg1: tensor<f32>) -> tensor<f32> {
    %0 = stablehlo.maximum %arg0, %arg1 : tensor<f32>
    return %0 : tensor<f32>
  }
  func.func private @region_1.2(%arg0: tensor<f32>, %arg1: tensor<f32>) -> tensor<f32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<f32>
    return %0 : tensor<f32>
  }
  func.func private @region_2.3(%arg0: tensor<f32>, %arg1: tensor<f32>) -> tensor<f32> {
    %0 = stablehlo.add %arg0, %arg1 : tensor<f32>
    return %0 : tensor<f32>
  }
  func.func private @fused_computation(%arg0: tensor<f32>, %arg1: tensor<512x512xf32>, %arg2: tensor<512xf32>) -> tensor<512xf32> {
    %0 = stablehlo.broadcast_in_dim %arg2, dims = [0] : (tensor<512xf32>) -> tensor<512x512xf32>
    %1 = stablehlo.multiply %arg1, %0 : tensor<512x512xf32>
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %3 = stablehlo.multiply %1, %2 : tensor<512x512xf32>
    %4 = stablehlo.reduce(%3 init: %arg0) applies stablehlo.add across dimensions = [0] : (tensor<512x512xf32>, tensor<f32>) -> tensor<512xf32>
    return %4 : tensor<512xf32>
  }
  func.func private @fused_computation.1(%arg0: tensor<512x512xf32>, %arg1: tensor<f32>) -> tensor<512xf32> {
    %0 = stablehlo.reduce(%arg0 init: %arg1) applies stablehlo.add across dimensions = [1] : (tensor<512x512xf32>, tensor<f32>) -> tensor<512xf32>
    return %0 : tensor<512xf32>
  }
  func.func private @fused_computation.2(%arg0: tensor<512x512xf32>, %arg1: tensor<f32>) -> tensor<512x512xf32> {
    %0 = stablehlo.dot_general %arg0, %arg0, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
    %1 = stablehlo.broadcast_in_dim %arg1, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
    %2 = stablehlo.add %0, %1 : tensor<512x512xf32>
    %3 = stablehlo.tanh %2 : tensor<512x512xf32>
    %cst = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %4 = stablehlo.reduce(%3 init: %cst) applies stablehlo.maximum across dimensions = [1] : (tensor<512x512xf32>, tensor<f32>) -> tensor<512xf32>
    %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<512xf32>) -> tensor<512x512xf32>
    %6 = stablehlo.subtract %3, %5 : tensor<512x512xf32>
    %7 = stablehlo.exponential %6 : tensor<512x512xf32>
    return %7 : tensor<512x512xf32>
  }
  func.func private @fused_computation.3(%arg0: tensor<512xf32>) -> tensor<512xf32> {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<512xf32>
    %1 = stablehlo.divide %0, %arg0 : tensor<512xf32>
    return %1 : tensor<512xf32>
  }
  func.func @main(%arg0: tensor<512x512xf32>) -> tensor<512xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %0 = "mhlo.fusion"(%arg0, %cst_0) <{fusion_kind = #mhlo<fusion_kind kCustom>}> ({
    ^bb0(%arg1: tensor<512x512xf32>, %arg2: tensor<f32>):
      %4 = stablehlo.dot_general %arg1, %arg1, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<512x512xf32>, tensor<512x512xf32>) -> tensor<512x512xf32>
      %5 = stablehlo.broadcast_in_dim %arg2, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
      %6 = stablehlo.add %4, %5 : tensor<512x512xf32>
      %7 = stablehlo.tanh %6 : tensor<512x512xf32>
      %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32>
      %8 = stablehlo.reduce(%7 init: %cst_1) applies stablehlo.maximum across dimensions = [1] : (tensor<512x512xf32>, tensor<f32>) -> tensor<512xf32>
      %9 = stablehlo.broadcast_in_dim %8, dims = [0] : (tensor<512xf32>) -> tensor<512x512xf32>
      %10 = stablehlo.subtract %7, %9 : tensor<512x512xf32>
      %11 = stablehlo.exponential %10 : tensor<512x512xf32>
      mhlo.return %11 : tensor<512x512xf32>
    }) {output_operand_aliasing = []} : (tensor<512x512xf32>, tensor<f32>) -> tensor<512x512xf32>
    %1 = "mhlo.fusion"(%0, %cst) <{fusion_kind = #mhlo<fusion_kind kCustom>}> ({
    ^bb0(%arg1: tensor<512x512xf32>, %arg2: tensor<f32>):
      %4 = stablehlo.reduce(%arg1 init: %arg2) applies stablehlo.add across dimensions = [1] : (tensor<512x512xf32>, tensor<f32>) -> tensor<512xf32>
      mhlo.return %4 : tensor<512xf32>
    }) {output_operand_aliasing = []} : (tensor<512x512xf32>, tensor<f32>) -> tensor<512xf32>
    %2 = "mhlo.fusion"(%1) <{fusion_kind = #mhlo<fusion_kind kLoop>}> ({
    ^bb0(%arg1: tensor<512xf32>):
      %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
      %4 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<512xf32>
      %5 = stablehlo.divide %4, %arg1 : tensor<512xf32>
      mhlo.return %5 : tensor<512xf32>
    }) {output_operand_aliasing = []} : (tensor<512xf32>) -> tensor<512xf32>
    %3 = "mhlo.fusion"(%cst, %0, %2) <{fusion_kind = #mhlo<fusion_kind kCustom>}> ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<512x512xf32>, %arg3: tensor<512xf32>):
      %4 = stablehlo.broadcast_in_dim %arg3, dims = [0] : (tensor<512xf32>) -> tensor<512x512xf32>
      %5 = stablehlo.multiply %arg2, %4 : tensor<512x512xf32>
      %cst_1 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
      %6 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<512x512xf32>
      %7 = stablehlo.multiply %5, %6 : tensor<512x512xf32>
      %8 = stablehlo.reduce(%7 init: %arg1) applies stablehlo.add across dimensions = [0] : (tensor<512x512xf32>, tensor<f32>) -> tensor<512xf32>
      mhlo.return %8 : tensor<512xf32>
    }) {output_operand_aliasing = []} : (tensor<f32>, tensor<512x512xf32>, tensor<512xf32>) -> tensor<512xf32>
    return %3 : tensor<512xf32>
  }
}

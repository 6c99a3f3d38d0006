module @jit_tp_layernorm attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 2 : i64}, {name = "model", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<16x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<64x256xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<256x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> (tensor<16x64xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<16x64xf32>, tensor<f32>) -> tensor<16xf32>
    %1 = stablehlo.broadcast_in_dim %0, dims = [0] : (tensor<16xf32>) -> tensor<16x1xf32>
    %cst_0 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<16x1xf32>
    %3 = stablehlo.divide %1, %2 : tensor<16x1xf32>
    %4 = stablehlo.broadcast_in_dim %3, dims = [0, 1] : (tensor<16x1xf32>) -> tensor<16x64xf32>
    %5 = stablehlo.subtract %arg0, %4 : tensor<16x64xf32>
    %6 = chlo.square %5 : tensor<16x64xf32> -> tensor<16x64xf32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %7 = stablehlo.reduce(%6 init: %cst_1) applies stablehlo.add across dimensions = [1] : (tensor<16x64xf32>, tensor<f32>) -> tensor<16xf32>
    %8 = stablehlo.broadcast_in_dim %7, dims = [0] : (tensor<16xf32>) -> tensor<16x1xf32>
    %cst_2 = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<16x1xf32>
    %10 = stablehlo.divide %8, %9 : tensor<16x1xf32>
    %11 = stablehlo.broadcast_in_dim %3, dims = [0, 1] : (tensor<16x1xf32>) -> tensor<16x64xf32>
    %12 = stablehlo.subtract %arg0, %11 : tensor<16x64xf32>
    %cst_3 = stablehlo.constant dense<9.99999974E-6> : tensor<f32>
    %13 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<16x1xf32>
    %14 = stablehlo.add %10, %13 : tensor<16x1xf32>
    %15 = stablehlo.rsqrt %14 : tensor<16x1xf32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1] : (tensor<16x1xf32>) -> tensor<16x64xf32>
    %17 = stablehlo.multiply %12, %16 : tensor<16x64xf32>
    %18 = stablehlo.dot_general %17, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x64xf32>, tensor<64x256xf32>) -> tensor<16x256xf32>
    %19 = stablehlo.multiply %18, %18 : tensor<16x256xf32>
    %20 = stablehlo.multiply %19, %18 : tensor<16x256xf32>
    %cst_4 = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %21 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<16x256xf32>
    %22 = stablehlo.multiply %21, %20 : tensor<16x256xf32>
    %23 = stablehlo.add %18, %22 : tensor<16x256xf32>
    %cst_5 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %24 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<16x256xf32>
    %25 = stablehlo.multiply %24, %23 : tensor<16x256xf32>
    %26 = stablehlo.tanh %25 : tensor<16x256xf32>
    %cst_6 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %27 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<16x256xf32>
    %28 = stablehlo.add %27, %26 : tensor<16x256xf32>
    %cst_7 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %29 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<16x256xf32>
    %30 = stablehlo.multiply %29, %28 : tensor<16x256xf32>
    %31 = stablehlo.multiply %18, %30 : tensor<16x256xf32>
    %32 = stablehlo.dot_general %31, %arg2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x256xf32>, tensor<256x64xf32>) -> tensor<16x64xf32>
    return %32 : tensor<16x64xf32>
  }
}

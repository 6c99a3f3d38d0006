module @jit_private_calls attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 2 : i64}, {name = "model", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<32x128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<128x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> (tensor<64x32xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) {
    %0 = call @block(%arg0, %arg1) : (tensor<64x32xf32>, tensor<32x128xf32>) -> tensor<64x128xf32>
    %1 = call @block_0(%0, %arg2) : (tensor<64x128xf32>, tensor<128x32xf32>) -> tensor<64x32xf32>
    return %1 : tensor<64x32xf32>
  }
  func.func private @block(%arg0: tensor<64x32xf32>, %arg1: tensor<32x128xf32>) -> tensor<64x128xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x32xf32>, tensor<32x128xf32>) -> tensor<64x128xf32>
    %1 = call @relu(%0) : (tensor<64x128xf32>) -> tensor<64x128xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x128xf32>
    %3 = stablehlo.compare GT, %1, %2, FLOAT : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xi1>
    %cst_0 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %4 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<64x128xf32>
    %5 = stablehlo.multiply %4, %1 : tensor<64x128xf32>
    %6 = call @_where(%3, %1, %5) : (tensor<64x128xi1>, tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
    return %6 : tensor<64x128xf32>
  }
  func.func private @relu(%arg0: tensor<64x128xf32>) -> tensor<64x128xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x128xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<64x128xf32>
    return %1 : tensor<64x128xf32>
  }
  func.func private @_where(%arg0: tensor<64x128xi1>, %arg1: tensor<64x128xf32>, %arg2: tensor<64x128xf32>) -> tensor<64x128xf32> {
    %0 = stablehlo.select %arg0, %arg1, %arg2 : tensor<64x128xi1>, tensor<64x128xf32>
    return %0 : tensor<64x128xf32>
  }
  func.func private @block_0(%arg0: tensor<64x128xf32>, %arg1: tensor<128x32xf32>) -> tensor<64x32xf32> {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x128xf32>, tensor<128x32xf32>) -> tensor<64x32xf32>
    %1 = call @relu_1(%0) : (tensor<64x32xf32>) -> tensor<64x32xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %3 = stablehlo.compare GT, %1, %2, FLOAT : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xi1>
    %cst_0 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %4 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %5 = stablehlo.multiply %4, %1 : tensor<64x32xf32>
    %6 = call @_where_2(%3, %1, %5) : (tensor<64x32xi1>, tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
    return %6 : tensor<64x32xf32>
  }
  func.func private @relu_1(%arg0: tensor<64x32xf32>) -> tensor<64x32xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %1 = stablehlo.maximum %arg0, %0 : tensor<64x32xf32>
    return %1 : tensor<64x32xf32>
  }
  func.func private @_where_2(%arg0: tensor<64x32xi1>, %arg1: tensor<64x32xf32>, %arg2: tensor<64x32xf32>) -> tensor<64x32xf32> {
    %0 = stablehlo.select %arg0, %arg1, %arg2 : tensor<64x32xi1>, tensor<64x32xf32>
    return %0 : tensor<64x32xf32>
  }
}

module @jit_reshard_permute attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 2 : i64}, {name = "model", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<64x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>}) -> (tensor<64x16xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"model", "data"}, {}]>}) {
    %cst = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x16xf32>
    %1 = stablehlo.multiply %arg0, %0 : tensor<64x16xf32>
    %2 = sdy.sharding_constraint %1 <@mesh, [{"model", "data"}, {}]> : tensor<64x16xf32>
    %cst_0 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %3 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<64x16xf32>
    %4 = stablehlo.add %2, %3 : tensor<64x16xf32>
    return %4 : tensor<64x16xf32>
  }
}

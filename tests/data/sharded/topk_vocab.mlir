module @jit_topk_vocab attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]> {stablehlo.mesh = {axes = [{name = "d", size = 8 : i64}]}}
  func.func public @main(%arg0: tensor<8x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"d"}]>}) -> (tensor<8x4xf32> {jax.result_info = "result[0]", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, tensor<8x4xi32> {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %values, %indices = chlo.top_k(%arg0, k = 4) : tensor<8x512xf32> -> (tensor<8x4xf32>, tensor<8x4xi32>)
    return %values, %indices : tensor<8x4xf32>, tensor<8x4xi32>
  }
}

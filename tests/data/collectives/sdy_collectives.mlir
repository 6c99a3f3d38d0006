// Shardy collectives in the global view (what propagation + reshard-to-collectives produce before export).
module {
  sdy.mesh @mesh = <["x"=2, "y"=4]>
  func.func @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}, %arg1: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"y"}]>}) -> (tensor<16x32xf32>, tensor<16x32xf32>) {
    %0 = sdy.all_gather [{}, {"y"}] %arg0 out_sharding=<@mesh, [{"x"}, {}]> : tensor<16x32xf32>
    %1 = sdy.all_slice [{}, {"y"}] %0 out_sharding=<@mesh, [{"x"}, {"y"}]> : tensor<16x32xf32>
    %2 = sdy.all_to_all [{"x"}: 0->1] %1 out_sharding=<@mesh, [{}, {"y", "x"}]> : tensor<16x32xf32>
    %3 = sdy.collective_permute %2 out_sharding=<@mesh, [{}, {"x", "y"}]> : tensor<16x32xf32>
    %4 = sdy.all_reduce {"x"} %arg1 out_sharding=<@mesh, [{}, {"y"}]> : tensor<16x32xf32>
    %5 = sdy.reduce_scatter [{"x"}, {}] %4 out_sharding=<@mesh, [{"x"}, {"y"}]> : tensor<16x32xf32>
    return %3, %5 : tensor<16x32xf32>, tensor<16x32xf32>
  }
}

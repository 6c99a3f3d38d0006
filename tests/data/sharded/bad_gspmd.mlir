// A malformed GSPMD sharding (iota over 4 devices for 8 tiles): propagate-shardings
// must fail with one error at the function (test/lit/propagate-shardings.mlir).
module @bad attributes {mhlo.num_partitions = 8 : i32} {
  func.func @main(%arg0: tensor<8xf32> {mhlo.sharding = "{devices=[8]<=[4]}"}) -> tensor<8xf32> {
    return %arg0 : tensor<8xf32>
  }
}

// Errors of propagate-shardings (checked by ../propagate-shardings.mlir): one line each,
// at the op, exit 1, no traceback.
// CHECK-NOT: Traceback

// Diagnostics. A recursive private function cannot be inlined (nor partitioned).
// CHECK: propagate-shardings-errors.mlir:[[# @LINE + 4]]:10: error: propagate-shardings: recursive call to @f: a recursive program cannot be partitioned
module @recursive attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func private @f(%a: tensor<8xf32>) -> tensor<8xf32> {
    %0 = func.call @f(%a) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
  func.func @main(%a: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}]>}) -> tensor<8xf32> {
    %0 = func.call @f(%a) : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}

// -----

// A GSPMD shard_map region whose local value leaves it without @SPMDShardToFullShape.
// CHECK: propagate-shardings-errors.mlir:[[# @LINE + 5]]:5: error: 'func.return' uses a value of a GSPMD shard_map region (local shape, after @SPMDFullToShardShape) that leaves it without @SPMDShardToFullShape
module @manual_leak attributes {mhlo.num_partitions = 8 : i32} {
  func.func @main(%arg0: tensor<64x16xf32> {mhlo.sharding = "{devices=[8,1]<=[8]}"}) -> tensor<8x16xf32> {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[8,1]<=[8]}"} : (tensor<64x16xf32>) -> tensor<64x16xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<64x16xf32>) -> tensor<8x16xf32>
    return %1 : tensor<8x16xf32>
  }
}

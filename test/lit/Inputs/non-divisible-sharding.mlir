// A 12-row value constrained to 8 devices: sdy-convert-global-to-local aborts on it
// (CHECK failure) unless sdy-pad-for-divisibility ran first (used by driver-errors.mlir).
module @m attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func @main(%arg0: tensor<12x16xf32>) -> (tensor<12x16xf32>) {
    %0 = stablehlo.tanh %arg0 : tensor<12x16xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{"d"}, {}]> : tensor<12x16xf32>
    %2 = stablehlo.sine %1 : tensor<12x16xf32>
    return %2 : tensor<12x16xf32>
  }
}

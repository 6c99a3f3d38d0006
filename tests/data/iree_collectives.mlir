// Collectives IREE 3.13 compiles (tests/test_iree.py): all_gather, reduce_scatter,
// all_to_all, collective_permute (all_reduce: tests/data/sharded/tp_mlp.mlir).
module attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {
func.func @ag(%x: tensor<8x4xf32>) -> tensor<32x4xf32> {
  %0 = "stablehlo.all_gather"(%x) {all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<8x4xf32>) -> tensor<32x4xf32>
  return %0 : tensor<32x4xf32>
}
}
// -----
module attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {
func.func @rs(%x: tensor<32x4xf32>) -> tensor<8x4xf32> {
  %0 = "stablehlo.reduce_scatter"(%x) ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) {scatter_dimension = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<32x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
}
// -----
module attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {
func.func @a2a(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "stablehlo.all_to_all"(%x) {split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = 4 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
}
// -----
module attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 4 : i32} {
func.func @cp(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = "stablehlo.collective_permute"(%x) {source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>, channel_handle = #stablehlo.channel_handle<handle = 1, type = 0>} : (tensor<8x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}
}

// Less common forms: -1 padded and empty replica groups, async_start, send/recv with
// source_target_pairs, collective_broadcast, a host transfer.
module attributes {mhlo.num_replicas = 4 : i32} {
  func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1, 2], [3, -1, -1]]> : tensor<2x3xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %1 = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %1 : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "stablehlo.all_reduce"(%0) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %1 = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %1 : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    %3 = "stablehlo.async_start"(%2) ({
    ^bb0(%x: tensor<4xf32>):
      %4 = "stablehlo.all_gather"(%x) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> : (tensor<4xf32>) -> tensor<16xf32>
      stablehlo.return %4 : tensor<16xf32>
    }) : (tensor<4xf32>) -> !stablehlo.future<tensor<16xf32>>
    %5 = "stablehlo.async_done"(%3) : (!stablehlo.future<tensor<16xf32>>) -> tensor<16xf32>
    %t = stablehlo.after_all : !stablehlo.token
    %6 = "stablehlo.send"(%2, %t) <{channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>, is_host_transfer = false, source_target_pairs = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> : (tensor<4xf32>, !stablehlo.token) -> !stablehlo.token
    %7:2 = "stablehlo.recv"(%6) <{channel_handle = #stablehlo.channel_handle<handle = 5, type = 1>, is_host_transfer = false, source_target_pairs = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> : (!stablehlo.token) -> (tensor<4xf32>, !stablehlo.token)
    %8 = "stablehlo.collective_broadcast"(%7#0) <{replica_groups = dense<[[2, 1]]> : tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<4xf32>
    %9 = "stablehlo.send"(%8, %7#1) <{channel_handle = #stablehlo.channel_handle<handle = 6, type = 2>, is_host_transfer = true}> : (tensor<4xf32>, !stablehlo.token) -> !stablehlo.token
    return %8 : tensor<4xf32>
  }
}

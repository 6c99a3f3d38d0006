module @jit_scan_fsdp attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 2 : i64}, {name = "model", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>}, %arg1: tensor<3x32x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}, {}]>}, %arg2: tensor<3x64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}, {}]>}) -> (tensor<3x32x64xf32> {jax.result_info = "result[0]", sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}, {}]>}, tensor<3x64x32xf32> {jax.result_info = "result[1]", sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}, {}]>}) {
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<3x64x32xf32>
    %cst_1 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %1 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<3x64x64xf32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<3x64x64xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %3:8 = stablehlo.while(%iterArg = %arg1, %iterArg_11 = %arg2, %iterArg_12 = %cst, %iterArg_13 = %c, %iterArg_14 = %arg0, %iterArg_15 = %0, %iterArg_16 = %1, %iterArg_17 = %2) : tensor<3x32x64xf32>, tensor<3x64x32xf32>, tensor<f32>, tensor<i32>, tensor<64x32xf32>, tensor<3x64x32xf32>, tensor<3x64x64xf32>, tensor<3x64x64xf32>
    cond {
      %c_18 = stablehlo.constant dense<3> : tensor<i32>
      %18 = stablehlo.compare LT, %iterArg_13, %c_18, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %18 : tensor<i1>
    } do {
      %18 = func.call @dynamic_index_in_dim(%iterArg, %iterArg_13) : (tensor<3x32x64xf32>, tensor<i32>) -> tensor<32x64xf32>
      %19 = func.call @dynamic_index_in_dim_0(%iterArg_11, %iterArg_13) : (tensor<3x64x32xf32>, tensor<i32>) -> tensor<64x32xf32>
      %20:4 = func.call @closed_call(%iterArg_12, %iterArg_14, %18, %19) : (tensor<f32>, tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x64xf32>, tensor<64x64xf32>)
      %21 = func.call @dynamic_update_index_in_dim(%iterArg_15, %20#1, %iterArg_13) : (tensor<3x64x32xf32>, tensor<64x32xf32>, tensor<i32>) -> tensor<3x64x32xf32>
      %22 = func.call @dynamic_update_index_in_dim_1(%iterArg_16, %20#2, %iterArg_13) : (tensor<3x64x64xf32>, tensor<64x64xf32>, tensor<i32>) -> tensor<3x64x64xf32>
      %23 = func.call @dynamic_update_index_in_dim_1(%iterArg_17, %20#3, %iterArg_13) : (tensor<3x64x64xf32>, tensor<64x64xf32>, tensor<i32>) -> tensor<3x64x64xf32>
      %c_18 = stablehlo.constant dense<1> : tensor<i32>
      %24 = stablehlo.add %iterArg_13, %c_18 : tensor<i32>
      stablehlo.return %iterArg, %iterArg_11, %iterArg_12, %24, %20#0, %21, %22, %23 : tensor<3x32x64xf32>, tensor<3x64x32xf32>, tensor<f32>, tensor<i32>, tensor<64x32xf32>, tensor<3x64x32xf32>, tensor<3x64x64xf32>, tensor<3x64x64xf32>
    }
    %cst_3 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %4 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %5 = stablehlo.multiply %4, %3#4 : tensor<64x32xf32>
    %cst_4 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_5 = stablehlo.constant dense<2.048000e+03> : tensor<f32>
    %6 = stablehlo.divide %cst_4, %cst_5 : tensor<f32>
    %7 = stablehlo.broadcast_in_dim %6, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %8 = stablehlo.multiply %7, %5 : tensor<64x32xf32>
    %cst_6 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<3x32x64xf32>
    %cst_7 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %10 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<3x64x32xf32>
    %c_8 = stablehlo.constant dense<0> : tensor<i32>
    %11:9 = stablehlo.while(%iterArg = %arg1, %iterArg_11 = %3#5, %iterArg_12 = %3#6, %iterArg_13 = %3#7, %iterArg_14 = %arg2, %iterArg_15 = %c_8, %iterArg_16 = %8, %iterArg_17 = %9, %iterArg_18 = %10) : tensor<3x32x64xf32>, tensor<3x64x32xf32>, tensor<3x64x64xf32>, tensor<3x64x64xf32>, tensor<3x64x32xf32>, tensor<i32>, tensor<64x32xf32>, tensor<3x32x64xf32>, tensor<3x64x32xf32>
    cond {
      %c_19 = stablehlo.constant dense<3> : tensor<i32>
      %18 = stablehlo.compare LT, %iterArg_15, %c_19, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %18 : tensor<i1>
    } do {
      %c_19 = stablehlo.constant dense<3> : tensor<i32>
      %18 = stablehlo.subtract %c_19, %iterArg_15 : tensor<i32>
      %c_20 = stablehlo.constant dense<1> : tensor<i32>
      %19 = stablehlo.subtract %18, %c_20 : tensor<i32>
      %20 = func.call @dynamic_index_in_dim(%iterArg, %19) : (tensor<3x32x64xf32>, tensor<i32>) -> tensor<32x64xf32>
      %21 = func.call @dynamic_index_in_dim_0(%iterArg_11, %19) : (tensor<3x64x32xf32>, tensor<i32>) -> tensor<64x32xf32>
      %22 = func.call @dynamic_index_in_dim_2(%iterArg_12, %19) : (tensor<3x64x64xf32>, tensor<i32>) -> tensor<64x64xf32>
      %23 = func.call @dynamic_index_in_dim_2(%iterArg_13, %19) : (tensor<3x64x64xf32>, tensor<i32>) -> tensor<64x64xf32>
      %24 = func.call @dynamic_index_in_dim_0(%iterArg_14, %19) : (tensor<3x64x32xf32>, tensor<i32>) -> tensor<64x32xf32>
      %25:3 = func.call @closed_call_3(%iterArg_16, %20, %21, %22, %23, %24) : (tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x32xf32>, tensor<64x64xf32>, tensor<64x64xf32>, tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x32xf32>)
      %26 = func.call @dynamic_update_index_in_dim_4(%iterArg_17, %25#1, %19) : (tensor<3x32x64xf32>, tensor<32x64xf32>, tensor<i32>) -> tensor<3x32x64xf32>
      %27 = func.call @dynamic_update_index_in_dim(%iterArg_18, %25#2, %19) : (tensor<3x64x32xf32>, tensor<64x32xf32>, tensor<i32>) -> tensor<3x64x32xf32>
      %c_21 = stablehlo.constant dense<1> : tensor<i32>
      %28 = stablehlo.add %iterArg_15, %c_21 : tensor<i32>
      stablehlo.return %iterArg, %iterArg_11, %iterArg_12, %iterArg_13, %iterArg_14, %28, %25#0, %26, %27 : tensor<3x32x64xf32>, tensor<3x64x32xf32>, tensor<3x64x64xf32>, tensor<3x64x64xf32>, tensor<3x64x32xf32>, tensor<i32>, tensor<64x32xf32>, tensor<3x32x64xf32>, tensor<3x64x32xf32>
    }
    %cst_9 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_9, dims = [] : (tensor<f32>) -> tensor<3x32x64xf32>
    %13 = stablehlo.multiply %12, %11#7 : tensor<3x32x64xf32>
    %14 = stablehlo.subtract %arg1, %13 : tensor<3x32x64xf32>
    %cst_10 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %15 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<3x64x32xf32>
    %16 = stablehlo.multiply %15, %11#8 : tensor<3x64x32xf32>
    %17 = stablehlo.subtract %arg2, %16 : tensor<3x64x32xf32>
    return %14, %17 : tensor<3x32x64xf32>, tensor<3x64x32xf32>
  }
  func.func private @dynamic_index_in_dim(%arg0: tensor<3x32x64xf32>, %arg1: tensor<i32>) -> tensor<32x64xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 32, 64] : (tensor<3x32x64xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x32x64xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x32x64xf32>) -> tensor<32x64xf32>
    return %1 : tensor<32x64xf32>
  }
  func.func private @dynamic_index_in_dim_0(%arg0: tensor<3x64x32xf32>, %arg1: tensor<i32>) -> tensor<64x32xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 64, 32] : (tensor<3x64x32xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x64x32xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x64x32xf32>) -> tensor<64x32xf32>
    return %1 : tensor<64x32xf32>
  }
  func.func private @closed_call(%arg0: tensor<f32>, %arg1: tensor<64x32xf32>, %arg2: tensor<32x64xf32>, %arg3: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x64xf32>, tensor<64x64xf32>) {
    %0 = stablehlo.dot_general %arg1, %arg2, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
    %1 = stablehlo.tanh %0 : tensor<64x64xf32>
    %2 = stablehlo.broadcast_in_dim %arg0, dims = [] : (tensor<f32>) -> tensor<64x64xf32>
    %3 = stablehlo.subtract %2, %1 : tensor<64x64xf32>
    %4 = stablehlo.dot_general %1, %arg3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x64xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
    return %4, %arg1, %1, %3 : tensor<64x32xf32>, tensor<64x32xf32>, tensor<64x64xf32>, tensor<64x64xf32>
  }
  func.func private @dynamic_update_index_in_dim(%arg0: tensor<3x64x32xf32>, %arg1: tensor<64x32xf32>, %arg2: tensor<i32>) -> tensor<3x64x32xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<64x32xf32>) -> tensor<1x64x32xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x64x32xf32>, tensor<1x64x32xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x64x32xf32>
    return %1 : tensor<3x64x32xf32>
  }
  func.func private @dynamic_update_index_in_dim_1(%arg0: tensor<3x64x64xf32>, %arg1: tensor<64x64xf32>, %arg2: tensor<i32>) -> tensor<3x64x64xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<64x64xf32>) -> tensor<1x64x64xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x64x64xf32>, tensor<1x64x64xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x64x64xf32>
    return %1 : tensor<3x64x64xf32>
  }
  func.func private @dynamic_index_in_dim_2(%arg0: tensor<3x64x64xf32>, %arg1: tensor<i32>) -> tensor<64x64xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %0 = stablehlo.dynamic_slice %arg0, %arg1, %c, %c_0, sizes = [1, 64, 64] : (tensor<3x64x64xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<1x64x64xf32>
    %1 = stablehlo.reshape %0 : (tensor<1x64x64xf32>) -> tensor<64x64xf32>
    return %1 : tensor<64x64xf32>
  }
  func.func private @closed_call_3(%arg0: tensor<64x32xf32>, %arg1: tensor<32x64xf32>, %arg2: tensor<64x32xf32>, %arg3: tensor<64x64xf32>, %arg4: tensor<64x64xf32>, %arg5: tensor<64x32xf32>) -> (tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x32xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg3, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x32xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %1 = stablehlo.transpose %0, dims = [1, 0] : (tensor<32x64xf32>) -> tensor<64x32xf32>
    %2 = stablehlo.dot_general %arg0, %arg5, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x32xf32>, tensor<64x32xf32>) -> tensor<64x64xf32>
    %3 = stablehlo.multiply %2, %arg4 : tensor<64x64xf32>
    %4 = stablehlo.multiply %3, %arg3 : tensor<64x64xf32>
    %5 = stablehlo.add %3, %4 : tensor<64x64xf32>
    %6 = stablehlo.dot_general %5, %arg2, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x64xf32>, tensor<64x32xf32>) -> tensor<64x32xf32>
    %7 = stablehlo.transpose %6, dims = [1, 0] : (tensor<64x32xf32>) -> tensor<32x64xf32>
    %8 = stablehlo.dot_general %5, %arg1, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x64xf32>, tensor<32x64xf32>) -> tensor<64x32xf32>
    return %8, %7, %1 : tensor<64x32xf32>, tensor<32x64xf32>, tensor<64x32xf32>
  }
  func.func private @dynamic_update_index_in_dim_4(%arg0: tensor<3x32x64xf32>, %arg1: tensor<32x64xf32>, %arg2: tensor<i32>) -> tensor<3x32x64xf32> {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1, 2] : (tensor<32x64xf32>) -> tensor<1x32x64xf32>
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_0 = stablehlo.constant dense<0> : tensor<i32>
    %1 = stablehlo.dynamic_update_slice %arg0, %0, %arg2, %c, %c_0 : (tensor<3x32x64xf32>, tensor<1x32x64xf32>, tensor<i32>, tensor<i32>, tensor<i32>) -> tensor<3x32x64xf32>
    return %1 : tensor<3x32x64xf32>
  }
}

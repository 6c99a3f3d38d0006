module @jit_adamw_fsdp_donated attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 2 : i64}, {name = "model", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<32x128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}]>, tf.aliasing_output = 0 : i32}, %arg1: tensor<128x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>, tf.aliasing_output = 1 : i32}, %arg2: tensor<32x128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}]>, tf.aliasing_output = 2 : i32}, %arg3: tensor<128x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>, tf.aliasing_output = 3 : i32}, %arg4: tensor<32x128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}]>, tf.aliasing_output = 4 : i32}, %arg5: tensor<128x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>, tf.aliasing_output = 5 : i32}, %arg6: tensor<64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>}, %arg7: tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) -> (tensor<32x128xf32> {jax.result_info = "result[0]['w1']", sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}]>}, tensor<128x32xf32> {jax.result_info = "result[0]['w2']", sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>}, tensor<32x128xf32> {jax.result_info = "result[1]['w1']", sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}]>}, tensor<128x32xf32> {jax.result_info = "result[1]['w2']", sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>}, tensor<32x128xf32> {jax.result_info = "result[2]['w1']", sdy.sharding = #sdy.sharding<@mesh, [{}, {"data", "model"}]>}, tensor<128x32xf32> {jax.result_info = "result[2]['w2']", sdy.sharding = #sdy.sharding<@mesh, [{"data", "model"}, {}]>}) {
    %0 = stablehlo.dot_general %arg6, %arg0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x32xf32>, tensor<32x128xf32>) -> tensor<64x128xf32>
    %1 = stablehlo.tanh %0 : tensor<64x128xf32>
    %cst = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %2 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x128xf32>
    %3 = stablehlo.subtract %2, %1 : tensor<64x128xf32>
    %4 = stablehlo.dot_general %1, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x128xf32>, tensor<128x32xf32>) -> tensor<64x32xf32>
    %cst_0 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %5 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %6 = stablehlo.multiply %5, %4 : tensor<64x32xf32>
    %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_2 = stablehlo.constant dense<2.048000e+03> : tensor<f32>
    %7 = stablehlo.divide %cst_1, %cst_2 : tensor<f32>
    %8 = stablehlo.broadcast_in_dim %7, dims = [] : (tensor<f32>) -> tensor<64x32xf32>
    %9 = stablehlo.multiply %8, %6 : tensor<64x32xf32>
    %10 = stablehlo.dot_general %9, %1, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x32xf32>, tensor<64x128xf32>) -> tensor<32x128xf32>
    %11 = stablehlo.transpose %10, dims = [1, 0] : (tensor<32x128xf32>) -> tensor<128x32xf32>
    %12 = stablehlo.dot_general %9, %arg1, contracting_dims = [1] x [1], precision = [DEFAULT, DEFAULT] : (tensor<64x32xf32>, tensor<128x32xf32>) -> tensor<64x128xf32>
    %13 = stablehlo.multiply %12, %3 : tensor<64x128xf32>
    %14 = stablehlo.multiply %13, %1 : tensor<64x128xf32>
    %15 = stablehlo.add %13, %14 : tensor<64x128xf32>
    %16 = stablehlo.dot_general %15, %arg6, contracting_dims = [0] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x128xf32>, tensor<64x32xf32>) -> tensor<128x32xf32>
    %17 = stablehlo.transpose %16, dims = [1, 0] : (tensor<128x32xf32>) -> tensor<32x128xf32>
    %cst_3 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %18 = stablehlo.add %arg7, %cst_3 : tensor<f32>
    %cst_4 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %19 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %20 = stablehlo.multiply %19, %arg2 : tensor<32x128xf32>
    %cst_5 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %21 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %22 = stablehlo.multiply %21, %17 : tensor<32x128xf32>
    %23 = stablehlo.add %20, %22 : tensor<32x128xf32>
    %cst_6 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %24 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %25 = stablehlo.multiply %24, %arg3 : tensor<128x32xf32>
    %cst_7 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %26 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %27 = stablehlo.multiply %26, %11 : tensor<128x32xf32>
    %28 = stablehlo.add %25, %27 : tensor<128x32xf32>
    %cst_8 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %29 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %30 = stablehlo.multiply %29, %arg4 : tensor<32x128xf32>
    %cst_9 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %31 = stablehlo.broadcast_in_dim %cst_9, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %32 = stablehlo.multiply %31, %17 : tensor<32x128xf32>
    %33 = stablehlo.multiply %32, %17 : tensor<32x128xf32>
    %34 = stablehlo.add %30, %33 : tensor<32x128xf32>
    %cst_10 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %35 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %36 = stablehlo.multiply %35, %arg5 : tensor<128x32xf32>
    %cst_11 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %37 = stablehlo.broadcast_in_dim %cst_11, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %38 = stablehlo.multiply %37, %11 : tensor<128x32xf32>
    %39 = stablehlo.multiply %38, %11 : tensor<128x32xf32>
    %40 = stablehlo.add %36, %39 : tensor<128x32xf32>
    %cst_12 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %41 = stablehlo.power %cst_12, %18 : tensor<f32>
    %cst_13 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %42 = stablehlo.subtract %cst_13, %41 : tensor<f32>
    %43 = stablehlo.broadcast_in_dim %42, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %44 = stablehlo.divide %23, %43 : tensor<32x128xf32>
    %cst_14 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %45 = stablehlo.power %cst_14, %18 : tensor<f32>
    %cst_15 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %46 = stablehlo.subtract %cst_15, %45 : tensor<f32>
    %47 = stablehlo.broadcast_in_dim %46, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %48 = stablehlo.divide %34, %47 : tensor<32x128xf32>
    %49 = stablehlo.sqrt %48 : tensor<32x128xf32>
    %cst_16 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %50 = stablehlo.broadcast_in_dim %cst_16, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %51 = stablehlo.add %49, %50 : tensor<32x128xf32>
    %52 = stablehlo.divide %44, %51 : tensor<32x128xf32>
    %cst_17 = stablehlo.constant dense<0.899999976> : tensor<f32>
    %53 = stablehlo.power %cst_17, %18 : tensor<f32>
    %cst_18 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %54 = stablehlo.subtract %cst_18, %53 : tensor<f32>
    %55 = stablehlo.broadcast_in_dim %54, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %56 = stablehlo.divide %28, %55 : tensor<128x32xf32>
    %cst_19 = stablehlo.constant dense<9.990000e-01> : tensor<f32>
    %57 = stablehlo.power %cst_19, %18 : tensor<f32>
    %cst_20 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %58 = stablehlo.subtract %cst_20, %57 : tensor<f32>
    %59 = stablehlo.broadcast_in_dim %58, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %60 = stablehlo.divide %40, %59 : tensor<128x32xf32>
    %61 = stablehlo.sqrt %60 : tensor<128x32xf32>
    %cst_21 = stablehlo.constant dense<9.99999993E-9> : tensor<f32>
    %62 = stablehlo.broadcast_in_dim %cst_21, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %63 = stablehlo.add %61, %62 : tensor<128x32xf32>
    %64 = stablehlo.divide %56, %63 : tensor<128x32xf32>
    %cst_22 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %65 = stablehlo.broadcast_in_dim %cst_22, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %66 = stablehlo.multiply %65, %arg0 : tensor<32x128xf32>
    %67 = stablehlo.add %52, %66 : tensor<32x128xf32>
    %cst_23 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %68 = stablehlo.broadcast_in_dim %cst_23, dims = [] : (tensor<f32>) -> tensor<32x128xf32>
    %69 = stablehlo.multiply %68, %67 : tensor<32x128xf32>
    %70 = stablehlo.subtract %arg0, %69 : tensor<32x128xf32>
    %cst_24 = stablehlo.constant dense<1.000000e-01> : tensor<f32>
    %71 = stablehlo.broadcast_in_dim %cst_24, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %72 = stablehlo.multiply %71, %arg1 : tensor<128x32xf32>
    %73 = stablehlo.add %64, %72 : tensor<128x32xf32>
    %cst_25 = stablehlo.constant dense<1.000000e-03> : tensor<f32>
    %74 = stablehlo.broadcast_in_dim %cst_25, dims = [] : (tensor<f32>) -> tensor<128x32xf32>
    %75 = stablehlo.multiply %74, %73 : tensor<128x32xf32>
    %76 = stablehlo.subtract %arg1, %75 : tensor<128x32xf32>
    return %70, %76, %23, %28, %34, %40 : tensor<32x128xf32>, tensor<128x32xf32>, tensor<32x128xf32>, tensor<128x32xf32>, tensor<32x128xf32>, tensor<128x32xf32>
  }
}

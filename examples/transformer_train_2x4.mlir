module @jit_train_step attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]> {stablehlo.mesh = {axes = [{name = "data", size = 2 : i64}, {name = "model", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<1024x1024xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg1: tensor<1024x1024xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<1024x1024xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg3: tensor<1024x1024xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg4: tensor<1024x4096xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg5: tensor<4096x1024xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}, %arg6: tensor<16x512x1024xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}, {}]>}) -> (tensor<f32> {jax.result_info = "result[0]"}, tensor<1024x1024xbf16> {jax.result_info = "result[1][0]"}, tensor<1024x1024xbf16> {jax.result_info = "result[1][1]"}, tensor<1024x1024xbf16> {jax.result_info = "result[1][2]"}, tensor<1024x1024xbf16> {jax.result_info = "result[1][3]"}, tensor<1024x4096xbf16> {jax.result_info = "result[1][4]"}, tensor<4096x1024xbf16> {jax.result_info = "result[1][5]"}) {
    %0 = stablehlo.dot_general %arg6, %arg0, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<16x512x1024xbf16>
    %1 = stablehlo.reshape %0 : (tensor<16x512x1024xbf16>) -> tensor<16x512x16x64xbf16>
    %2 = stablehlo.dot_general %arg6, %arg1, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<16x512x1024xbf16>
    %3 = stablehlo.reshape %2 : (tensor<16x512x1024xbf16>) -> tensor<16x512x16x64xbf16>
    %4 = stablehlo.dot_general %arg6, %arg2, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<16x512x1024xbf16>
    %5 = stablehlo.reshape %4 : (tensor<16x512x1024xbf16>) -> tensor<16x512x16x64xbf16>
    %6 = stablehlo.dot_general %1, %3, batching_dims = [0, 2] x [0, 2], contracting_dims = [3] x [3], precision = [DEFAULT, DEFAULT] : (tensor<16x512x16x64xbf16>, tensor<16x512x16x64xbf16>) -> tensor<16x16x512x512xbf16>
    %cst = stablehlo.constant dense<6.400000e+01> : tensor<f32>
    %7 = stablehlo.sqrt %cst : tensor<f32>
    %8 = stablehlo.convert %7 : (tensor<f32>) -> tensor<bf16>
    %9 = stablehlo.broadcast_in_dim %8, dims = [] : (tensor<bf16>) -> tensor<16x16x512x512xbf16>
    %10 = stablehlo.divide %6, %9 : tensor<16x16x512x512xbf16>
    %11 = stablehlo.convert %10 : (tensor<16x16x512x512xbf16>) -> tensor<16x16x512x512xf32>
    %cst_0 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %12 = stablehlo.reduce(%11 init: %cst_0) applies stablehlo.maximum across dimensions = [3] : (tensor<16x16x512x512xf32>, tensor<f32>) -> tensor<16x16x512xf32>
    %cst_1 = stablehlo.constant dense<0xFF800000> : tensor<f32>
    %13 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<16x16x512xf32>
    %14 = stablehlo.maximum %13, %12 : tensor<16x16x512xf32>
    %15 = stablehlo.broadcast_in_dim %14, dims = [0, 1, 2] : (tensor<16x16x512xf32>) -> tensor<16x16x512x1xf32>
    %16 = stablehlo.broadcast_in_dim %15, dims = [0, 1, 2, 3] : (tensor<16x16x512x1xf32>) -> tensor<16x16x512x512xf32>
    %17 = stablehlo.subtract %11, %16 : tensor<16x16x512x512xf32>
    %18 = stablehlo.exponential %17 : tensor<16x16x512x512xf32>
    %cst_2 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %19 = stablehlo.reduce(%18 init: %cst_2) applies stablehlo.add across dimensions = [3] : (tensor<16x16x512x512xf32>, tensor<f32>) -> tensor<16x16x512xf32>
    %20 = stablehlo.broadcast_in_dim %19, dims = [0, 1, 2] : (tensor<16x16x512xf32>) -> tensor<16x16x512x1xf32>
    %21 = stablehlo.broadcast_in_dim %20, dims = [0, 1, 2, 3] : (tensor<16x16x512x1xf32>) -> tensor<16x16x512x512xf32>
    %22 = stablehlo.divide %18, %21 : tensor<16x16x512x512xf32>
    %23 = stablehlo.multiply %20, %20 : tensor<16x16x512x1xf32>
    %cst_3 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %24 = stablehlo.broadcast_in_dim %cst_3, dims = [] : (tensor<f32>) -> tensor<16x16x512x1xf32>
    %25 = stablehlo.divide %24, %23 : tensor<16x16x512x1xf32>
    %26 = stablehlo.convert %22 : (tensor<16x16x512x512xf32>) -> tensor<16x16x512x512xbf16>
    %27 = stablehlo.dot_general %5, %26, batching_dims = [0, 2] x [0, 1], contracting_dims = [1] x [3], precision = [DEFAULT, DEFAULT] : (tensor<16x512x16x64xbf16>, tensor<16x16x512x512xbf16>) -> tensor<16x16x64x512xbf16>
    %28 = stablehlo.transpose %27, dims = [0, 3, 1, 2] : (tensor<16x16x64x512xbf16>) -> tensor<16x512x16x64xbf16>
    %29 = stablehlo.reshape %28 : (tensor<16x512x16x64xbf16>) -> tensor<16x512x1024xbf16>
    %30 = stablehlo.dot_general %29, %arg3, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<16x512x1024xbf16>
    %31 = stablehlo.add %arg6, %30 : tensor<16x512x1024xbf16>
    %32 = stablehlo.dot_general %31, %arg4, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<1024x4096xbf16>) -> tensor<16x512x4096xbf16>
    %33 = stablehlo.multiply %32, %32 : tensor<16x512x4096xbf16>
    %34 = stablehlo.multiply %33, %32 : tensor<16x512x4096xbf16>
    %35 = stablehlo.multiply %32, %32 : tensor<16x512x4096xbf16>
    %cst_4 = stablehlo.constant dense<3.000000e+00> : tensor<bf16>
    %36 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %37 = stablehlo.multiply %36, %35 : tensor<16x512x4096xbf16>
    %cst_5 = stablehlo.constant dense<4.467770e-02> : tensor<bf16>
    %38 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %39 = stablehlo.multiply %38, %34 : tensor<16x512x4096xbf16>
    %40 = stablehlo.add %32, %39 : tensor<16x512x4096xbf16>
    %cst_6 = stablehlo.constant dense<7.968750e-01> : tensor<bf16>
    %41 = stablehlo.broadcast_in_dim %cst_6, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %42 = stablehlo.multiply %41, %40 : tensor<16x512x4096xbf16>
    %43 = stablehlo.tanh %42 : tensor<16x512x4096xbf16>
    %cst_7 = stablehlo.constant dense<1.000000e+00> : tensor<bf16>
    %44 = stablehlo.broadcast_in_dim %cst_7, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %45 = stablehlo.subtract %44, %43 : tensor<16x512x4096xbf16>
    %cst_8 = stablehlo.constant dense<1.000000e+00> : tensor<bf16>
    %46 = stablehlo.broadcast_in_dim %cst_8, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %47 = stablehlo.add %46, %43 : tensor<16x512x4096xbf16>
    %cst_9 = stablehlo.constant dense<5.000000e-01> : tensor<bf16>
    %48 = stablehlo.broadcast_in_dim %cst_9, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %49 = stablehlo.multiply %48, %47 : tensor<16x512x4096xbf16>
    %50 = stablehlo.multiply %32, %49 : tensor<16x512x4096xbf16>
    %51 = stablehlo.dot_general %50, %arg5, contracting_dims = [2] x [0], precision = [DEFAULT, DEFAULT] : (tensor<16x512x4096xbf16>, tensor<4096x1024xbf16>) -> tensor<16x512x1024xbf16>
    %52 = stablehlo.add %31, %51 : tensor<16x512x1024xbf16>
    %53 = stablehlo.convert %52 : (tensor<16x512x1024xbf16>) -> tensor<16x512x1024xf32>
    %54 = stablehlo.multiply %53, %53 : tensor<16x512x1024xf32>
    %cst_10 = stablehlo.constant dense<2.000000e+00> : tensor<f32>
    %55 = stablehlo.broadcast_in_dim %cst_10, dims = [] : (tensor<f32>) -> tensor<16x512x1024xf32>
    %56 = stablehlo.multiply %55, %53 : tensor<16x512x1024xf32>
    %cst_11 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %57 = stablehlo.reduce(%54 init: %cst_11) applies stablehlo.add across dimensions = [0, 1, 2] : (tensor<16x512x1024xf32>, tensor<f32>) -> tensor<f32>
    %cst_12 = stablehlo.constant dense<0x4B000000> : tensor<f32>
    %58 = stablehlo.divide %57, %cst_12 : tensor<f32>
    %cst_13 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %cst_14 = stablehlo.constant dense<0x4B000000> : tensor<f32>
    %59 = stablehlo.divide %cst_13, %cst_14 : tensor<f32>
    %60 = stablehlo.broadcast_in_dim %59, dims = [] : (tensor<f32>) -> tensor<16x512x1024xf32>
    %61 = stablehlo.multiply %60, %56 : tensor<16x512x1024xf32>
    %62 = stablehlo.convert %61 : (tensor<16x512x1024xf32>) -> tensor<16x512x1024xbf16>
    %63 = stablehlo.dot_general %62, %50, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<16x512x4096xbf16>) -> tensor<1024x4096xbf16>
    %64 = stablehlo.transpose %63, dims = [1, 0] : (tensor<1024x4096xbf16>) -> tensor<4096x1024xbf16>
    %65 = stablehlo.dot_general %62, %arg5, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<4096x1024xbf16>) -> tensor<16x512x4096xbf16>
    %66 = stablehlo.multiply %32, %65 : tensor<16x512x4096xbf16>
    %67 = stablehlo.multiply %65, %49 : tensor<16x512x4096xbf16>
    %cst_15 = stablehlo.constant dense<5.000000e-01> : tensor<bf16>
    %68 = stablehlo.broadcast_in_dim %cst_15, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %69 = stablehlo.multiply %68, %66 : tensor<16x512x4096xbf16>
    %70 = stablehlo.multiply %69, %45 : tensor<16x512x4096xbf16>
    %71 = stablehlo.multiply %70, %43 : tensor<16x512x4096xbf16>
    %72 = stablehlo.add %70, %71 : tensor<16x512x4096xbf16>
    %cst_16 = stablehlo.constant dense<7.968750e-01> : tensor<bf16>
    %73 = stablehlo.broadcast_in_dim %cst_16, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %74 = stablehlo.multiply %73, %72 : tensor<16x512x4096xbf16>
    %75 = stablehlo.add %67, %74 : tensor<16x512x4096xbf16>
    %cst_17 = stablehlo.constant dense<4.467770e-02> : tensor<bf16>
    %76 = stablehlo.broadcast_in_dim %cst_17, dims = [] : (tensor<bf16>) -> tensor<16x512x4096xbf16>
    %77 = stablehlo.multiply %76, %74 : tensor<16x512x4096xbf16>
    %78 = stablehlo.multiply %77, %37 : tensor<16x512x4096xbf16>
    %79 = stablehlo.add %75, %78 : tensor<16x512x4096xbf16>
    %80 = stablehlo.dot_general %79, %31, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x4096xbf16>, tensor<16x512x1024xbf16>) -> tensor<4096x1024xbf16>
    %81 = stablehlo.transpose %80, dims = [1, 0] : (tensor<4096x1024xbf16>) -> tensor<1024x4096xbf16>
    %82 = stablehlo.dot_general %79, %arg4, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x4096xbf16>, tensor<1024x4096xbf16>) -> tensor<16x512x1024xbf16>
    %83 = stablehlo.add %62, %82 : tensor<16x512x1024xbf16>
    %84 = stablehlo.dot_general %83, %29, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<16x512x1024xbf16>) -> tensor<1024x1024xbf16>
    %85 = stablehlo.transpose %84, dims = [1, 0] : (tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16>
    %86 = stablehlo.dot_general %83, %arg3, contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<16x512x1024xbf16>
    %87 = stablehlo.reshape %86 : (tensor<16x512x1024xbf16>) -> tensor<16x512x16x64xbf16>
    %88 = stablehlo.transpose %87, dims = [0, 2, 3, 1] : (tensor<16x512x16x64xbf16>) -> tensor<16x16x64x512xbf16>
    %89 = stablehlo.dot_general %88, %5, batching_dims = [0, 1] x [0, 2], contracting_dims = [2] x [3], precision = [DEFAULT, DEFAULT] : (tensor<16x16x64x512xbf16>, tensor<16x512x16x64xbf16>) -> tensor<16x16x512x512xbf16>
    %90 = stablehlo.dot_general %88, %26, batching_dims = [0, 1] x [0, 1], contracting_dims = [3] x [2], precision = [DEFAULT, DEFAULT] : (tensor<16x16x64x512xbf16>, tensor<16x16x512x512xbf16>) -> tensor<16x16x64x512xbf16>
    %91 = stablehlo.transpose %90, dims = [0, 3, 1, 2] : (tensor<16x16x64x512xbf16>) -> tensor<16x512x16x64xbf16>
    %92 = stablehlo.convert %89 : (tensor<16x16x512x512xbf16>) -> tensor<16x16x512x512xf32>
    %93 = stablehlo.broadcast_in_dim %25, dims = [0, 1, 2, 3] : (tensor<16x16x512x1xf32>) -> tensor<16x16x512x512xf32>
    %94 = stablehlo.multiply %92, %93 : tensor<16x16x512x512xf32>
    %95 = stablehlo.multiply %94, %18 : tensor<16x16x512x512xf32>
    %cst_18 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %96 = stablehlo.reduce(%95 init: %cst_18) applies stablehlo.add across dimensions = [3] : (tensor<16x16x512x512xf32>, tensor<f32>) -> tensor<16x16x512xf32>
    %97 = stablehlo.reshape %96 : (tensor<16x16x512xf32>) -> tensor<16x16x512x1xf32>
    %98 = stablehlo.negate %97 : tensor<16x16x512x1xf32>
    %99 = stablehlo.broadcast_in_dim %20, dims = [0, 1, 2, 3] : (tensor<16x16x512x1xf32>) -> tensor<16x16x512x512xf32>
    %100 = stablehlo.divide %92, %99 : tensor<16x16x512x512xf32>
    %cst_19 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %101 = stablehlo.reduce(%98 init: %cst_19) applies stablehlo.add across dimensions = [3] : (tensor<16x16x512x1xf32>, tensor<f32>) -> tensor<16x16x512xf32>
    %102 = stablehlo.broadcast_in_dim %101, dims = [0, 1, 2] : (tensor<16x16x512xf32>) -> tensor<16x16x512x512xf32>
    %103 = stablehlo.add %100, %102 : tensor<16x16x512x512xf32>
    %104 = stablehlo.multiply %103, %18 : tensor<16x16x512x512xf32>
    %105 = stablehlo.convert %104 : (tensor<16x16x512x512xf32>) -> tensor<16x16x512x512xbf16>
    %106 = stablehlo.broadcast_in_dim %8, dims = [] : (tensor<bf16>) -> tensor<16x16x512x512xbf16>
    %107 = stablehlo.divide %105, %106 : tensor<16x16x512x512xbf16>
    %108 = stablehlo.dot_general %107, %1, batching_dims = [0, 1] x [0, 2], contracting_dims = [2] x [1], precision = [DEFAULT, DEFAULT] : (tensor<16x16x512x512xbf16>, tensor<16x512x16x64xbf16>) -> tensor<16x16x512x64xbf16>
    %109 = stablehlo.transpose %108, dims = [0, 2, 1, 3] : (tensor<16x16x512x64xbf16>) -> tensor<16x512x16x64xbf16>
    %110 = stablehlo.dot_general %107, %3, batching_dims = [0, 1] x [0, 2], contracting_dims = [3] x [1], precision = [DEFAULT, DEFAULT] : (tensor<16x16x512x512xbf16>, tensor<16x512x16x64xbf16>) -> tensor<16x16x512x64xbf16>
    %111 = stablehlo.transpose %110, dims = [0, 2, 1, 3] : (tensor<16x16x512x64xbf16>) -> tensor<16x512x16x64xbf16>
    %112 = stablehlo.reshape %91 : (tensor<16x512x16x64xbf16>) -> tensor<16x512x1024xbf16>
    %113 = stablehlo.dot_general %112, %arg6, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<16x512x1024xbf16>) -> tensor<1024x1024xbf16>
    %114 = stablehlo.transpose %113, dims = [1, 0] : (tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16>
    %115 = stablehlo.reshape %109 : (tensor<16x512x16x64xbf16>) -> tensor<16x512x1024xbf16>
    %116 = stablehlo.dot_general %115, %arg6, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<16x512x1024xbf16>) -> tensor<1024x1024xbf16>
    %117 = stablehlo.transpose %116, dims = [1, 0] : (tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16>
    %118 = stablehlo.reshape %111 : (tensor<16x512x16x64xbf16>) -> tensor<16x512x1024xbf16>
    %119 = stablehlo.dot_general %118, %arg6, contracting_dims = [0, 1] x [0, 1], precision = [DEFAULT, DEFAULT] : (tensor<16x512x1024xbf16>, tensor<16x512x1024xbf16>) -> tensor<1024x1024xbf16>
    %120 = stablehlo.transpose %119, dims = [1, 0] : (tensor<1024x1024xbf16>) -> tensor<1024x1024xbf16>
    %cst_20 = stablehlo.constant dense<9.994500e-04> : tensor<bf16>
    %121 = stablehlo.broadcast_in_dim %cst_20, dims = [] : (tensor<bf16>) -> tensor<1024x1024xbf16>
    %122 = stablehlo.multiply %121, %120 : tensor<1024x1024xbf16>
    %123 = stablehlo.subtract %arg0, %122 : tensor<1024x1024xbf16>
    %cst_21 = stablehlo.constant dense<9.994500e-04> : tensor<bf16>
    %124 = stablehlo.broadcast_in_dim %cst_21, dims = [] : (tensor<bf16>) -> tensor<1024x1024xbf16>
    %125 = stablehlo.multiply %124, %117 : tensor<1024x1024xbf16>
    %126 = stablehlo.subtract %arg1, %125 : tensor<1024x1024xbf16>
    %cst_22 = stablehlo.constant dense<9.994500e-04> : tensor<bf16>
    %127 = stablehlo.broadcast_in_dim %cst_22, dims = [] : (tensor<bf16>) -> tensor<1024x1024xbf16>
    %128 = stablehlo.multiply %127, %114 : tensor<1024x1024xbf16>
    %129 = stablehlo.subtract %arg2, %128 : tensor<1024x1024xbf16>
    %cst_23 = stablehlo.constant dense<9.994500e-04> : tensor<bf16>
    %130 = stablehlo.broadcast_in_dim %cst_23, dims = [] : (tensor<bf16>) -> tensor<1024x1024xbf16>
    %131 = stablehlo.multiply %130, %85 : tensor<1024x1024xbf16>
    %132 = stablehlo.subtract %arg3, %131 : tensor<1024x1024xbf16>
    %cst_24 = stablehlo.constant dense<9.994500e-04> : tensor<bf16>
    %133 = stablehlo.broadcast_in_dim %cst_24, dims = [] : (tensor<bf16>) -> tensor<1024x4096xbf16>
    %134 = stablehlo.multiply %133, %81 : tensor<1024x4096xbf16>
    %135 = stablehlo.subtract %arg4, %134 : tensor<1024x4096xbf16>
    %cst_25 = stablehlo.constant dense<9.994500e-04> : tensor<bf16>
    %136 = stablehlo.broadcast_in_dim %cst_25, dims = [] : (tensor<bf16>) -> tensor<4096x1024xbf16>
    %137 = stablehlo.multiply %136, %64 : tensor<4096x1024xbf16>
    %138 = stablehlo.subtract %arg5, %137 : tensor<4096x1024xbf16>
    return %58, %123, %126, %129, %132, %135, %138 : tensor<f32>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x1024xbf16>, tensor<1024x4096xbf16>, tensor<4096x1024xbf16>
  }
}

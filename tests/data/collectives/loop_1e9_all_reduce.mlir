module attributes {mhlo.num_replicas = 4 : i32} {
  func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %cn = stablehlo.constant dense<1000000000> : tensor<i32>
    %r:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<1024xf32>
     cond {
      %p = stablehlo.compare LT, %i, %cn : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %n = stablehlo.add %i, %c1 : tensor<i32>
      %a = "stablehlo.all_reduce"(%v) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
      ^bb0(%p0: tensor<f32>, %p1: tensor<f32>):
        %s = stablehlo.add %p0, %p1 : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<1024xf32>) -> tensor<1024xf32>
      stablehlo.return %n, %a : tensor<i32>, tensor<1024xf32>
    }
    return %r#1 : tensor<1024xf32>
  }
}

module @bare_gemm attributes {mhlo.num_replicas = 1 : i32} {
  func.func @main(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> tensor<512x512xbf16> {
    %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>
    return %1 : tensor<512x512xbf16>
  }
}

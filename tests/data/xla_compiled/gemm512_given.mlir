module @given_gemm attributes {mhlo.num_replicas = 1 : i32} {
  func.func @main(%a: tensor<512x512xbf16>, %b: tensor<512x512xbf16>) -> tensor<512x512xbf16> {
    %0 = "mhlo.fusion"(%a, %b) <{fusion_kind = #mhlo<fusion_kind kCustom>}> ({
    ^bb0(%x: tensor<512x512xbf16>, %y: tensor<512x512xbf16>):
      %1 = stablehlo.dot_general %x, %y, contracting_dims = [1] x [0] : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>
      mhlo.return %1 : tensor<512x512xbf16>
    }) : (tensor<512x512xbf16>, tensor<512x512xbf16>) -> tensor<512x512xbf16>
    return %0 : tensor<512x512xbf16>
  }
}

module @cc attributes {mhlo.num_replicas = 1 : i32} {
  func.func @main(%a: tensor<4096x4096xbf16>, %b: tensor<4096x4096xbf16>, %x: tensor<256x56x56x64xbf16>, %w: tensor<64x3x3x64xbf16>) -> (tensor<4096x4096xbf16>, tensor<256x56x56x64xbf16>, tensor<4096x4096xbf16>) {
    %0 = stablehlo.custom_call @__cublas$gemm(%a, %b) {backend_config = "{\"operation_queue_id\":\"0\",\"wait_on_operation_queues\":[],\"gemm_backend_config\":{\"alpha_real\":1,\"beta\":0,\"dot_dimension_numbers\":{\"lhs_contracting_dimensions\":[\"1\"],\"rhs_contracting_dimensions\":[\"0\"],\"lhs_batch_dimensions\":[],\"rhs_batch_dimensions\":[]},\"alpha_imag\":0,\"precision_config\":{\"operand_precision\":[\"DEFAULT\",\"DEFAULT\"],\"algorithm\":\"ALG_UNSET\"},\"epilogue\":\"DEFAULT\",\"lhs_stride\":\"16777216\",\"rhs_stride\":\"16777216\",\"grad_x\":false,\"grad_y\":false,\"damax_output\":false},\"force_earliest_schedule\":false}"} : (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) -> tuple<tensor<4096x4096xbf16>, tensor<33554432xui8>>
    %g = stablehlo.get_tuple_element %0[0] : (tuple<tensor<4096x4096xbf16>, tensor<33554432xui8>>) -> tensor<4096x4096xbf16>
    %1 = stablehlo.custom_call @__cudnn$convForward(%x, %w) {backend_config = "not json at all {", api_version = 2 : i32} : (tensor<256x56x56x64xbf16>, tensor<64x3x3x64xbf16>) -> tuple<tensor<256x56x56x64xbf16>, tensor<0xui8>>
    %c = stablehlo.get_tuple_element %1[0] : (tuple<tensor<256x56x56x64xbf16>, tensor<0xui8>>) -> tensor<256x56x56x64xbf16>
    %2 = stablehlo.custom_call @__cublas$lt$matmul(%a, %b) {api_version = 4 : i32, backend_config = {odd = 3 : i64}} : (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16>
    return %g, %c, %2 : tensor<4096x4096xbf16>, tensor<256x56x56x64xbf16>, tensor<4096x4096xbf16>
  }
}

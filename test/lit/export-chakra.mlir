// RUN: rm -rf %t && stablehlo-opt %s --annotate-cost="hardware=a100-40gb" --export-chakra="system=a100-40gb-x4 chakra-dir=%t simulate=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MSG
// RUN: costmodel chakra check %t | FileCheck %s --check-prefix=CHECKER
// RUN: costmodel chakra dump %t/trace.1.et | FileCheck %s --check-prefix=DUMP
// RUN: cat %t/comm_group.json | FileCheck %s --check-prefix=GROUPS
// RUN: costmodel simulate %t | FileCheck %s --check-prefix=SIM
// RUN: not stablehlo-opt %s --annotate-cost --export-chakra="system=a100-40gb-x4 chakra-dir=%t granularity=block" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD

// MSG: chakra: wrote 4 ranks (24 nodes, 2 collectives and 1 point-to-point send per rank) to {{.*}}/
// MSG-NEXT: simulate: step time {{.*}} over 4 ranks

// CHECKER: ok: {{.*}}: 4 ranks, 24 nodes, 2 collectives per rank, 8 collective issues, 4 point-to-point messages

// DUMP: "version": "0.0.4"
// DUMP: "name": "comp.1"
// DUMP-NEXT: "type": "COMP_NODE"
// DUMP: "type": "COMM_COLL_NODE"
// DUMP: "name": "comm_type"
// DUMP-NEXT: "int64_val": 2
// DUMP: "name": "comm_size"
// DUMP-NEXT: "int64_val": 32
// DUMP: "name": "pg_name"
// DUMP-NEXT: "string_val": "1"
// DUMP: "type": "COMM_SEND_NODE"
// DUMP: "name": "comm_dst"
// DUMP-NEXT: "int64_val": 2
// DUMP: "type": "COMM_RECV_NODE"
// DUMP: "name": "comm_src"
// DUMP-NEXT: "int64_val": 0
// DUMP: "type": "COMM_COLL_NODE"
// DUMP: "int64_val": 0
// DUMP: "name": "comm_size"
// DUMP-NEXT: "int64_val": 64

// GROUPS: "1": [
// GROUPS: "2": [

// SIM: step time:
// SIM: rank {{ *}}finish

// BAD: error: option 'granularity' expects 'op' or 'region', got 'block'

module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @main(%x: tensor<8xf32>) -> tensor<16xf32> {
    %0 = stablehlo.exponential %x : tensor<8xf32>
    %1 = "stablehlo.all_gather"(%0) <{all_gather_dim = 0 : i64, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> : (tensor<8xf32>) -> tensor<16xf32>
    %2 = "stablehlo.collective_permute"(%1) <{source_target_pairs = dense<[[0, 1], [1, 2], [2, 3], [3, 0]]> : tensor<4x2xi64>}> : (tensor<16xf32>) -> tensor<16xf32>
    %3 = stablehlo.exponential %2 : tensor<16xf32>
    %4 = "stablehlo.all_reduce"(%3) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<16xf32>) -> tensor<16xf32>
    return %4 : tensor<16xf32>
  }
}

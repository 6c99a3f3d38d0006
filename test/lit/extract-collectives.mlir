// RUN: stablehlo-opt %s --split-input-file --verify-diagnostics --extract-collectives="chakra=false system=dgx-h100" | FileCheck %s

// Options. Every algorithm `--help` lists is accepted (ASTRA-sim implementation in the attribute);
// an unknown one or a misspelt key is a one-line error naming the valid ones.
// RUN: stablehlo-opt %s --split-input-file --verify-diagnostics --extract-collectives="chakra=false algorithm=tree" | FileCheck %s --check-prefix=TREE
// TREE-LABEL: func.func @cross_replica
// TREE: algorithm = "{{[^"]*}}doubleBinaryTree"
// TREE-SAME: kind = "all_reduce"
// RUN: stablehlo-opt %s --split-input-file --verify-diagnostics --extract-collectives="chakra=false algorithm=halving_doubling" | FileCheck %s --check-prefix=HD
// HD-LABEL: func.func @cross_replica
// HD: algorithm = "{{[^"]*}}halvingDoubling"
// RUN: not stablehlo-opt %s --extract-collectives="algorithm=bogus" 2>&1 | FileCheck %s --check-prefix=BADALG
// BADALG: stablehlo-opt: error: pass 'extract-collectives': option 'algorithm' expects one of ring, tree, direct, halving_doubling, {{.*}}, got 'bogus'
// BADALG-NOT: Traceback
// RUN: not stablehlo-opt %s --extract-collectives="algoritm=tree" 2>&1 | FileCheck %s --check-prefix=TYPO
// TYPO: stablehlo-opt: error: pass 'extract-collectives' has no option 'algoritm'; did you mean 'algorithm'? (options: system, algorithm,
// simulate=true needs the trace that chakra=false turns off: a warning, not a silent no-op.
// RUN: stablehlo-opt %data/collectives/shard_map_collectives.mlir --extract-collectives="chakra=false simulate=true" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOSIM
// NOSIM: shard_map_collectives.mlir:{{[0-9]+}}:{{[0-9]+}}: warning: extract-collectives: simulate=true ignored with chakra=false
// NOSIM-NOT: simulate:

// pmap-style: 4 replicas, cross_replica.
// CHECK-LABEL: func.func @cross_replica
// CHECK: stablehlo.all_reduce
// CHECK: costmodel.collective = {algorithm = "{{[^"]+}}", bytes_in = 512 : i64, bytes_out = 512 : i64, comm_bytes = 512 : i64, executions = 1 : i64, group_size = 2 : i64, kind = "all_reduce", mode = "cross_replica", num_groups = 2 : i64, protocol = "LL", replica_groups = "{{\[\[}}0,1],[2,3]]", time_ns = {{.*}} : f64}
module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @cross_replica(%arg0: tensor<128xf32>) -> tensor<128xf32> {
    %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<128xf32>) -> tensor<128xf32>
    return %0 : tensor<128xf32>
  }
}

// -----

// 2 replicas x 4 partitions: every grouping strategy; ids are r * 4 + p.
// CHECK: costmodel.summary = {backend = "roofline", branch = "max", collective_bytes = 64 : i64, collective_count = 4 : i64, collective_ops = 4 : i64
// CHECK-SAME: system = "dgx-h100"
// CHECK-LABEL: func.func @modes
// CHECK: stablehlo.all_gather
// CHECK-SAME: comm_bytes = 16 : i64
// CHECK-SAME: mode = "cross_replica_and_partition"
// CHECK-SAME: replica_groups = "{{\[\[}}0,4,1,5,2,6,3,7]]"
// CHECK: stablehlo.all_to_all
// CHECK-SAME: mode = "cross_partition", num_groups = 4 : i64, protocol = "{{[A-Za-z0-9]+}}", replica_groups = "{{\[\[}}0,1],[4,5],[2,3],[6,7]]"
// CHECK: stablehlo.reduce_scatter
// CHECK: bytes_out = 4 : i64, comm_bytes = 16 : i64
// CHECK-SAME: mode = "flattened_ids", num_groups = 2 : i64, protocol = "{{[A-Za-z0-9]+}}", replica_groups = "{{\[\[}}0,1,2,3],[4,5,6,7]]"
// CHECK: stablehlo.collective_permute
// CHECK-SAME: kind = "collective_permute", mode = "cross_replica", num_groups = 4 : i64, protocol = "{{[A-Za-z0-9]+}}", replica_groups = "{{\[\[}}0,4],[1,5],[2,6],[3,7]]"
module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 4 : i32} {
  func.func @modes(%arg0: tensor<4xf32>) {
    %0 = "stablehlo.all_gather"(%arg0) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<32xf32>
    %1 = "stablehlo.all_to_all"(%arg0) <{split_dimension = 0 : i64, concat_dimension = 0 : i64, split_count = 2 : i64, channel_handle = #stablehlo.channel_handle<handle = 2, type = 1>, replica_groups = dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>}> : (tensor<4xf32>) -> tensor<4xf32>
    %2 = "stablehlo.reduce_scatter"(%arg0) <{scatter_dimension = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 3, type = 1>, replica_groups = dense<[[0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<1xf32>
    %3 = "stablehlo.collective_permute"(%arg0) <{source_target_pairs = dense<[[0, 1]]> : tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<4xf32>
    return
  }
}

// -----

// A collective in a called function inside a loop of 3 iterations, called twice per iteration.
// CHECK: costmodel.summary = {backend = "roofline", branch = "max", collective_bytes = 96 : i64, collective_count = 6 : i64, collective_ops = 1 : i64
// CHECK-LABEL: func.func private @inner
// CHECK: stablehlo.all_reduce
// CHECK: executions = 6 : i64
module attributes {mhlo.num_replicas = 2 : i32} {
  func.func private @inner(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.all_reduce"(%x) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %c3 = stablehlo.constant dense<3> : tensor<i32>
    %r:2 = stablehlo.while(%i = %c0, %v = %arg0) : tensor<i32>, tensor<4xf32>
    cond {
      %p = stablehlo.compare LT, %i, %c3 : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %n = stablehlo.add %i, %c1 : tensor<i32>
      %w = func.call @inner(%v) : (tensor<4xf32>) -> tensor<4xf32>
      %w2 = func.call @inner(%w) : (tensor<4xf32>) -> tensor<4xf32>
      stablehlo.return %n, %w2 : tensor<i32>, tensor<4xf32>
    }
    return %r#1 : tensor<4xf32>
  }
}

// -----

// A replica group naming a device beyond num_replicas x num_partitions.
module attributes {mhlo.num_replicas = 4 : i32, mhlo.num_partitions = 1 : i32} {
  func.func @beyond(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{'stablehlo.all_reduce': replica_groups names replica 4, beyond num_replicas x num_partitions = 4 x 1}}
    %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1, 2, 3, 4]]> : tensor<1x5xi64>}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

// -----

// flattened ids beyond the grid (2 x 2 = 4 devices).
module attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 2 : i32} {
  func.func @beyond_flat(%arg0: tensor<4xf32>) -> tensor<24xf32> {
    // expected-error @+1 {{replica_groups names device 4, beyond num_replicas x num_partitions = 2 x 2 (flattened_ids: ids must be in [0, 4))}}
    %0 = "stablehlo.all_gather"(%arg0) <{all_gather_dim = 0 : i64, channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1, 2, 3, 4, 5]]> : tensor<1x6xi64>, use_global_device_ids}> : (tensor<4xf32>) -> tensor<24xf32>
    return %0 : tensor<24xf32>
  }
}

// -----

// Permute pairs beyond the partitions (cross_partition with channel > 0).
module attributes {mhlo.num_replicas = 1 : i32, mhlo.num_partitions = 2 : i32} {
  func.func @beyond_permute(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    // expected-error @+1 {{source_target_pairs names partition 2, beyond num_replicas x num_partitions = 1 x 2}}
    %0 = "stablehlo.collective_permute"(%arg0) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, source_target_pairs = dense<[[0, 2]]> : tensor<1x2xi64>}> : (tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}

// -----

// A loop whose trip count cannot be inferred: its collectives count once, with a warning.
// CHECK-LABEL: func.func @unknown_trip
// CHECK: executions = 1 : i64
module attributes {mhlo.num_replicas = 2 : i32} {
  func.func @unknown_trip(%arg0: tensor<4xf32>, %n: tensor<i32>) -> tensor<4xf32> {
    %c0 = stablehlo.constant dense<0> : tensor<i32>
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    // expected-warning @+1 {{cannot infer the trip count of this 'stablehlo.while'}}
    %r:2 = stablehlo.while(%i = %c0, %v = %arg0) : tensor<i32>, tensor<4xf32>
    cond {
      %p = stablehlo.compare LT, %i, %n : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %p : tensor<i1>
    } do {
      %k = stablehlo.add %i, %c1 : tensor<i32>
      %w = "stablehlo.all_reduce"(%v) <{replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>}> ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<4xf32>) -> tensor<4xf32>
      stablehlo.return %k, %w : tensor<i32>, tensor<4xf32>
    }
    return %r#1 : tensor<4xf32>
  }
}

// -----

// A device-to-device send without source_target_pairs: peers unknown, not timed.
// CHECK-LABEL: func.func @send_no_pairs
// CHECK: stablehlo.send
// CHECK-SAME: algorithm = "none"
// CHECK-SAME: time_ns = 0.000000e+00 : f64
module attributes {mhlo.num_replicas = 2 : i32} {
  func.func @send_no_pairs(%arg0: tensor<4xf32>) -> !stablehlo.token {
    %t = stablehlo.after_all : !stablehlo.token
    // expected-warning @+1 {{'stablehlo.send' has no source_target_pairs: its peer devices are unknown, so it is not timed}}
    %0 = "stablehlo.send"(%arg0, %t) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, is_host_transfer = false}> : (tensor<4xf32>, !stablehlo.token) -> !stablehlo.token
    return %0 : !stablehlo.token
  }
}

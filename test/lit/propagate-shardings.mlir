// propagate-shardings: Shardy input, GSPMD (mhlo.sharding) input, no shardings, and
// errors. Per-device output by default; per-device=false keeps global shapes.

// RUN: stablehlo-opt %s --split-input-file --propagate-shardings | FileCheck %s
// RUN: stablehlo-opt %s --split-input-file --propagate-shardings=per-device=false | FileCheck %s --check-prefix=GLOBAL
// RUN: not stablehlo-opt %data/sharded/bad_gspmd.mlir --propagate-shardings 2>&1 | FileCheck %s --check-prefix=ERR
// RUN: stablehlo-opt %data/sharded/shard_map_partial_gspmd.mlir --propagate-shardings | FileCheck %s --check-prefix=MANUAL
// RUN: not stablehlo-opt %S/Inputs/propagate-shardings-errors.mlir --split-input-file --propagate-shardings 2>&1 >/dev/null | FileCheck %S/Inputs/propagate-shardings-errors.mlir
// RUN: env COSTMODEL_TEST_ABORT_AT=sdy-convert-global-to-local not stablehlo-opt %data/sharded/tp_mlp.mlir --propagate-shardings 2>&1 | FileCheck %s --check-prefix=CRASH
// RUN: stablehlo-opt %data/sharded/scan_layer_sharded.mlir --propagate-shardings | FileCheck %s --check-prefix=SCAN
// RUN: stablehlo-opt %data/sharded/tp_mlp.mlir --propagate-shardings --propagate-shardings 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: stablehlo-opt %data/sharded/private_calls.mlir --propagate-shardings | FileCheck %s --check-prefix=CALLS

// JAX exports call private functions (@relu, @_where, a nested jit called twice with
// different shardings): they are inlined before Shardy runs, and dropped once unused.
// CALLS: module @jit_private_calls attributes {costmodel.partitioned
// CALLS-NOT: call @
// CALLS: stablehlo.all_reduce
// CALLS-NOT: func.func private
// RUN: not stablehlo-opt %data/sharded/tp_mlp.mlir --extract-collectives="chakra=false system=dgx-h100" 2>&1 | FileCheck %s --check-prefix=FORGOT

// The second run finds the marker and leaves the per-device program alone (shapes are
// divided once, the all-reduce is there once).
// TWICE: warning: propagate-shardings: the module is already partitioned (costmodel.partitioned); left unchanged
// TWICE: module @{{.*}} attributes {costmodel.partitioned
// TWICE-COUNT-1: stablehlo.all_reduce
// TWICE-NOT: stablehlo.all_reduce
// A sharded program that was not partitioned is refused by extract-collectives.
// FORGOT: tp_mlp.mlir:3:3: error: extract-collectives: the module is sharded but not partitioned (%arg1 of @main has sdy.sharding=#sdy.sharding<@mesh, [{}, {"d"}]> and is used by 'stablehlo.dot_general'); every rank would run the global program with no collectives. Run --propagate-shardings first

// A malformed GSPMD string: an error at the function, quoting the string; no traceback.
// ERR: bad_gspmd.mlir:4:3: error: bad sharding '{devices=[8]<=[4]}': iota over 4 devices for tile dimensions [8] (8 devices)
// ERR-NOT: Traceback
// A GSPMD shard_map region (SPMDFullToShardShape/ShardToFullShape, manual over "model"
// only) becomes an sdy.manual_computation: the psum over "model" inside is the only
// collective, on the per-device 16x32 block (the 64-wide contraction split over 4).
// MANUAL: module @jit_shard_map_partial_gspmd attributes {costmodel.partitioned
// MANUAL-NOT: SPMDFullToShardShape
// MANUAL: stablehlo.dot_general {{.*}} : (tensor<8x16xf32>, tensor<16x32xf32>) -> tensor<8x32xf32>
// MANUAL: "stablehlo.all_reduce"({{.*}}replica_groups = dense<{{\[\[}}0, 1, 2, 3], [4, 5, 6, 7]]>
// MANUAL-NOT: stablehlo.all_
// MANUAL-NOT: SPMDShardToFullShape

// Shardy aborts the process on an internal CHECK failure; propagate-shardings runs it in
// a forked child, so the crash is one error naming the pass (here an abort injected by
// the test-only hook where the conversion to per-device shapes starts).
// CRASH: tp_mlp.mlir:1:1: error: propagate-shardings: sdy-convert-global-to-local crashed (SIGABRT)
// CRASH-NOT: Traceback

// lax.scan over parameters stacked and sharded on the layer axis: each device holds one
// layer; XLA all-gathers the stack (1x32x64 per device -> 8x32x64) and slices the layer
// in the loop (Shardy alone would move the axis with an all-to-all and gather the slice).
// SCAN: stablehlo.while
// SCAN-COUNT-2: "stablehlo.all_gather"(%{{.*}}) <{all_gather_dim = 0 : i64
// SCAN-NOT: stablehlo.all_to_all

// Shardy input: DP x TP MLP on a 2x4 mesh; the row-parallel matmul needs an all-reduce
// over "model" (groups of 4 consecutive devices).
// CHECK-LABEL: module @shardy attributes {costmodel.partitioned, mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}
// CHECK: func.func public @main(%arg0: tensor<8x32xf32> {{.*}}, %arg1: tensor<32x16xf32> {{.*}}, %arg2: tensor<16x32xf32> {{.*}}) -> (tensor<8x32xf32>
// CHECK: stablehlo.dot_general {{.*}} -> tensor<8x16xf32>
// CHECK: "stablehlo.all_reduce"(%{{.*}}) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<{{\[\[}}0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}>
// CHECK: stablehlo.add
// CHECK: (tensor<8x32xf32>) -> tensor<8x32xf32>
// CHECK-NOT: sdy.all_reduce
// GLOBAL-LABEL: module @shardy
// GLOBAL: func.func public @main(%arg0: tensor<16x32xf32>
// GLOBAL: sdy.all_reduce {"model"} %{{.*}} out_sharding=<@mesh, [{"data"}, {}]> : tensor<16x32xf32>
module @shardy attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["data"=2, "model"=4]>
  func.func public @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}, %arg1: tensor<32x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}, %arg2: tensor<64x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"model"}, {}]>}) -> (tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
    %1 = stablehlo.tanh %0 : tensor<16x64xf32>
    %2 = stablehlo.dot_general %1, %arg2, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
    return %2 : tensor<16x32xf32>
  }
}

// -----

// Shardy input: rows -> columns reshard is an all-to-all; a constraint to replicated
// is an all-gather.
// CHECK-LABEL: module @reshards
// CHECK: func.func @main(%arg0: tensor<8x64xf32>
// CHECK: "stablehlo.all_to_all"(%{{.*}}) <{channel_handle = #stablehlo.channel_handle<handle = {{[0-9]+}}, type = 1>, concat_dimension = 0 : i64, replica_groups = dense<{{\[\[}}0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>, split_count = 8 : i64, split_dimension = 1 : i64}> : (tensor<8x64xf32>) -> tensor<64x8xf32>
// CHECK: "stablehlo.all_gather"(%{{.*}}) <{all_gather_dim = 0 : i64, {{.*}}use_global_device_ids}> : (tensor<8x64xf32>) -> tensor<64x64xf32>
// GLOBAL-LABEL: module @reshards
// GLOBAL-DAG: sdy.all_to_all
// GLOBAL-DAG: sdy.all_gather
module @reshards attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func @main(%arg0: tensor<64x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"d"}, {}]>}) -> (tensor<64x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"d"}]>}, tensor<64x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.negate %arg0 : tensor<64x64xf32>
    %1 = sdy.sharding_constraint %0 <@mesh, [{}, {"d"}]> : tensor<64x64xf32>
    %2 = stablehlo.abs %arg0 : tensor<64x64xf32>
    return %1, %2 : tensor<64x64xf32>, tensor<64x64xf32>
  }
}

// -----

// GSPMD input (what JAX emits with jax_use_shardy_partitioner=False): the strings become
// one mesh ["axis_0"=2, "axis_1"=4] (iota [8] and [2,4]T(1,0) share it), then the same
// partitioning as the Shardy version above.
// CHECK-LABEL: module @gspmd attributes {costmodel.partitioned, mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32}
// CHECK: sdy.mesh @mesh = <["axis_0"=2, "axis_1"=4]>
// CHECK: func.func public @main(%arg0: tensor<8x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"axis_0"}, {}]>}, %arg1: tensor<32x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"axis_1"}]>}, %arg2: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"axis_1"}, {}]>})
// CHECK-NOT: mhlo.sharding
// CHECK: "stablehlo.all_reduce"(%{{.*}}) <{{.*}}replica_groups = dense<{{\[\[}}0, 1, 2, 3], [4, 5, 6, 7]]> : tensor<2x4xi64>, use_global_device_ids}>
// CHECK-NOT: custom_call
// CHECK: return
// GLOBAL-LABEL: module @gspmd
// GLOBAL: func.func public @main(%arg0: tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"axis_0"}, {}]>}
// GLOBAL: sdy.all_reduce {"axis_1"}
module @gspmd attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<16x32xf32> {mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"}, %arg1: tensor<32x64xf32> {mhlo.sharding = "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}, %arg2: tensor<64x32xf32> {mhlo.sharding = "{devices=[4,1,2]<=[2,4]T(1,0) last_tile_dim_replicate}"}) -> (tensor<16x32xf32> {jax.result_info = "result", mhlo.sharding = "{devices=[2,1,4]<=[8] last_tile_dim_replicate}"}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
    %1 = stablehlo.custom_call @Sharding(%0) {backend_config = "", mhlo.sharding = "{devices=[2,4]<=[8]}"} : (tensor<16x64xf32>) -> tensor<16x64xf32>
    %2 = stablehlo.tanh %1 : tensor<16x64xf32>
    %3 = stablehlo.dot_general %2, %arg2, contracting_dims = [1] x [0] : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
    return %3 : tensor<16x32xf32>
  }
}

// -----

// No shardings: passes through unchanged (no mesh, no attributes, private funcs kept).
// CHECK-LABEL: module @plain {
// CHECK-NEXT: func.func @main(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
// CHECK-NEXT: stablehlo.add %arg0, %arg0 : tensor<4x4xf32>
// CHECK: func.func private @unused
// GLOBAL-LABEL: module @plain {
module @plain {
  func.func @main(%arg0: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %0 = stablehlo.add %arg0, %arg0 : tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
  func.func private @unused(%arg0: tensor<4xf32>) -> tensor<4xf32> {
    return %arg0 : tensor<4xf32>
  }
}

// -----

// One value resharded for two uses is all-gathered once, as XLA's partitioner caches
// its reshards (Shardy alone writes one all_gather per use).
// CHECK-LABEL: module @gathered_once
// CHECK: %[[G:.*]] = "stablehlo.all_gather"(%arg0)
// CHECK-NOT: stablehlo.all_gather
// CHECK: stablehlo.dot_general %arg1, %[[G]], contracting_dims = [1] x [0]
// CHECK-NOT: stablehlo.all_gather
// CHECK: stablehlo.dot_general %arg1, %[[G]], contracting_dims = [1] x [1]
// CHECK-NOT: stablehlo.all_gather
// CHECK: return
module @gathered_once attributes {mhlo.num_partitions = 4 : i32} {
  sdy.mesh @mesh = <["x"=4]>
  func.func @main(%w: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %a: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %0 = stablehlo.dot_general %a, %w, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    %1 = stablehlo.dot_general %a, %w, contracting_dims = [1] x [1] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
  }
}

// -----

// A sharding its dimension does not divide (12 rows over 8 devices): padded to 16 rows
// as XLA does (2 rows per device), instead of Shardy's abort ("non-divisible sharding").
// CHECK-LABEL: module @uneven
// CHECK: stablehlo.pad %arg0, %{{.*}}, low = [0, 0], high = [4, 0]
// CHECK: stablehlo.tanh %{{.*}} : tensor<2x16xf32>
// CHECK: "stablehlo.all_gather"({{.*}} : (tensor<2x16xf32>) -> tensor<16x16xf32>
// CHECK: stablehlo.slice %{{.*}} [0:12, 0:16]
// GLOBAL-LABEL: module @uneven
module @uneven attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["d"=8]>
  func.func @main(%arg0: tensor<12x16xf32>) -> tensor<12x16xf32> {
    %0 = sdy.sharding_constraint %arg0 <@mesh, [{"d"}, {}]> : tensor<12x16xf32>
    %1 = stablehlo.tanh %0 : tensor<12x16xf32>
    return %1 : tensor<12x16xf32>
  }
}


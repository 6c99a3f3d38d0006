// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm" | filecheck %s

// Options: numbers must be finite (inf and 1e400 used to overflow, nan was taken), quantities
// >= 0, and a misspelt key gets the closest option; one line, before the input is read.
// RUN: not stablehlo-opt %s --annotate-cost="overhead_ns=inf" 2>&1 | FileCheck %s --check-prefix=INF
// INF: stablehlo-opt: error: pass 'annotate-cost': option 'overhead_ns' expects a finite number, got 'inf'
// INF-NOT: Traceback
// RUN: not stablehlo-opt %s --annotate-cost="overhead_ns=1e400" 2>&1 | FileCheck %s --check-prefix=HUGE
// HUGE: stablehlo-opt: error: pass 'annotate-cost': option 'overhead_ns' expects a finite number, got '1e400'
// RUN: not stablehlo-opt %s --pass-pipeline="builtin.module(annotate-cost{overhead_ns=nan})" 2>&1 | FileCheck %s --check-prefix=NAN
// NAN: stablehlo-opt: error: pass 'annotate-cost': option 'overhead_ns' expects a finite number, got 'nan'
// RUN: not stablehlo-opt %s --annotate-cost="overhead_ns=-1" 2>&1 | FileCheck %s --check-prefix=NEG
// NEG: stablehlo-opt: error: pass 'annotate-cost': option 'overhead_ns' expects a number >= 0, got '-1'
// RUN: not stablehlo-opt %s --annotate-cost="hardwre=a100-40gb" 2>&1 | FileCheck %s --check-prefix=TYPO
// TYPO: stablehlo-opt: error: pass 'annotate-cost' has no option 'hardwre'; did you mean 'hardware'? (options: backend, hardware, fusion, branch, unknown-trip-count, inline)
// The branch policy of stablehlo.case/if (docs/cost-rules.md, "Conditionals"): one line for a bad value.
// RUN: not stablehlo-opt %s --annotate-cost="branch=largest" 2>&1 | FileCheck %s --check-prefix=BRANCH
// BRANCH: stablehlo-opt: error: pass 'annotate-cost': option 'branch': branch must be max, mean, xla or a branch index (an integer >= 0), got 'largest'
// BRANCH-NOT: Traceback
// A data-dependent while loop: iterations from the option, or from the op's own hint.
// RUN: not stablehlo-opt %s --annotate-cost="unknown-trip-count=many" 2>&1 | FileCheck %s --check-prefix=TRIPS
// TRIPS: stablehlo-opt: error: pass 'annotate-cost': option 'unknown-trip-count': expects a whole number of iterations, got 'many'
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm unknown-trip-count=12" | FileCheck %s --check-prefix=TWELVE
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm branch=mean" | FileCheck %s --check-prefix=MEAN
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm branch=1" | FileCheck %s --check-prefix=SECOND
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm branch=xla" | FileCheck %s --check-prefix=XLA
// Re-costing after extract-collectives on other hardware would mix two machines: a warning.
// RUN: stablehlo-opt %data/collectives/shard_map_collectives.mlir --extract-collectives="chakra=false" --annotate-cost="hardware=a100-40gb" -o /dev/null 2>&1 | FileCheck %s --check-prefix=RECOST
// RECOST: warning: annotate-cost: costing for hardware 'a100-40gb' a module whose collectives extract-collectives timed for system 'dgx-h100' ('h100-sxm' devices)

// CHECK-LABEL: func.func public @dot
func.func public @dot(%a: tensor<8x16xf32>, %b: tensor<16x4xf32>) -> tensor<8x4xf32> {
  // 2 * 8 * 4 * 16 = 1024
  // CHECK: stablehlo.dot_general {{.*}}costmodel.cost = {{{.*}}flops = 1024 : i64
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// CHECK-LABEL: func.func public @elementwise
func.func public @elementwise(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // CHECK: stablehlo.add {{.*}}flops = 32 : i64{{.*}}transcendentals = 0 : i64
  %0 = stablehlo.add %a, %a : tensor<8x4xf32>
  // CHECK: stablehlo.tanh {{.*}}flops = 0 : i64{{.*}}transcendentals = 32 : i64
  %1 = stablehlo.tanh %0 : tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}

// -----

// CHECK-LABEL: func.func public @conv
func.func public @conv(%x: tensor<2x3x5x5xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<2x4x5x5xf32> {
  // 2 * 2 * 4 * 3 * 13 * 13 = 8112
  // CHECK: stablehlo.convolution{{.*}}flops = 8112 : i64
  %0 = stablehlo.convolution(%x, %w) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {stride = [1, 1], pad = [[1, 1], [1, 1]]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<2x3x5x5xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x5x5xf32>
  return %0 : tensor<2x4x5x5xf32>
}

// -----

// CHECK-LABEL: func.func public @reduce
func.func public @reduce(%a: tensor<6x10xf32>) -> tensor<6xf32> {
  %z = stablehlo.constant dense<0.0> : tensor<f32>
  // 60 - 6 = 54 applications of add
  // CHECK: stablehlo.reduce{{.*}}flops = 54 : i64
  %0 = stablehlo.reduce(%a init: %z) applies stablehlo.add across dimensions = [1] : (tensor<6x10xf32>, tensor<f32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// CHECK-LABEL: func.func public @loop
func.func public @loop(%x: tensor<4xf32>) -> tensor<4xf32> {
  %c0 = stablehlo.constant dense<0> : tensor<i32>
  // CHECK: stablehlo.while
  %0:2 = stablehlo.while(%i = %c0, %v = %x) : tensor<i32>, tensor<4xf32>
  cond {
    %c10 = stablehlo.constant dense<10> : tensor<i32>
    %p = stablehlo.compare LT, %i, %c10, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
    stablehlo.return %p : tensor<i1>
  } do {
    %c1 = stablehlo.constant dense<1> : tensor<i32>
    %n = stablehlo.add %i, %c1 : tensor<i32>
    %e = stablehlo.exponential %v : tensor<4xf32>
    stablehlo.return %n, %e : tensor<i32>, tensor<4xf32>
  }
  // (1 compare + 1 add) * 10 flops, 4 * 10 transcendentals
  // CHECK: costmodel.cost = {{{.*}}flops = 20 : i64{{.*}}transcendentals = 40 : i64, trip_count = 10 : i64
  return %0#1 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func public @sort
func.func public @sort(%a: tensor<3x10xf32>) -> tensor<3x10xf32> {
  // CHECK: "stablehlo.sort"
  %0 = "stablehlo.sort"(%a) ({
  ^bb0(%x: tensor<f32>, %y: tensor<f32>):
    %c = stablehlo.compare GT, %x, %y : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  }) {dimension = 1 : i64} : (tensor<3x10xf32>) -> tensor<3x10xf32>
  // 30 * ceil(log2 30) = 150
  // CHECK: flops = 150 : i64
  return %0 : tensor<3x10xf32>
}

// -----

// Kernel formation (fusion=xla-gpu, the default for GPUs): the add -> exp chain is one
// loop kernel; every op carries its id, the root carries the kernel's cost: bytes are
// the kernel's external input (8x4 f32 = 128 B) and output (128 B) only.
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm fusion=xla-gpu" | filecheck %s --check-prefix=KERNEL
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm fusion=none" | filecheck %s --check-prefix=NOKERNEL
// KERNEL: costmodel.summary = {{{.*}}fusion = "xla-gpu"{{.*}}kernel_bytes = 256 : i64, kernel_count = 1 : i64
// KERNEL-LABEL: func.func public @fused_chain
// KERNEL: stablehlo.add {{.*}}costmodel.kernel = [[K:[0-9]+]] : i64
// KERNEL: stablehlo.exponential {{.*}}costmodel.kernel = [[K]] : i64, costmodel.kernel_cost = {backend = "roofline", bound = "memory", bytes_read = 128 : i64, bytes_written = 128 : i64, flops = 32 : i64, id = [[K]] : i64, kind = "loop", launches = 1 : i64, ops = 2 : i64
// NOKERNEL-LABEL: func.func public @fused_chain
// NOKERNEL-NOT: costmodel.kernel
// NOKERNEL: return
func.func public @fused_chain(%a: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %0 = stablehlo.add %a, %a : tensor<8x4xf32>
  %1 = stablehlo.exponential %0 : tensor<8x4xf32>
  return %1 : tensor<8x4xf32>
}

// -----

// The calibrated backend adds the launch overhead and measured efficiencies to each kernel.
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=h100-sxm backend=calibrated" | filecheck %s --check-prefix=CAL
// CAL-LABEL: func.func public @calibrated
// CAL: stablehlo.dot_general {{.*}}costmodel.kernel_cost = {backend = "calibrated", bound = "compute"{{.*}}kind = "gemm"{{.*}}tile_efficiency =
func.func public @calibrated(%a: tensor<4096x4096xbf16>, %b: tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4096x4096xbf16>, tensor<4096x4096xbf16>) -> tensor<4096x4096xbf16>
  return %0 : tensor<4096x4096xbf16>
}

// -----

// fusion=iree: IREE's own dispatch regions (llvm-cpu, end of its dispatch-creation
// phase) are the kernels. Softmax is two dispatches (XLA GPU makes three): the GEMM with
// its bias and exponential, then the row sum with the division; a dispatch's bytes are
// what it loads and stores (GEMM: (4x8 + 8x16 + 16) f32 in, 4x16 f32 out).
// RUN: stablehlo-opt %s --split-input-file --annotate-cost="hardware=a100-40gb fusion=iree" | filecheck %s --check-prefix=IREE
// What IREE rejects (a select_and_scatter with overlapping windows, as in the ResNet
// training steps) is one diagnostic at the op, not IREE's dump of it:
// RUN: not stablehlo-opt %S/Inputs/iree-rejected.mlir --annotate-cost="fusion=iree" 2>&1 | FileCheck %s --check-prefix=IREE-ERR
// IREE-ERR: iree-rejected.mlir:3:8: error: IREE cannot compile 'stablehlo.select_and_scatter': failed to legalize operation 'stablehlo.select_and_scatter' that was explicitly marked illegal
// IREE-ERR-NOT: {{.}}
// IREE: costmodel.summary = {{{.*}}fusion = "iree"{{.*}}iree_dispatch_regions = 2 : i64, iree_placement = {attached = 3 : i64, collective = 0 : i64, cross_block = 0 : i64, dead = 0 : i64, dispatch = 5 : i64, folded = 0 : i64, free = 0 : i64, hoisted = 0 : i64, host = 0 : i64, merged = 0 : i64, transfer = 0 : i64}, iree_regions_without_kernel = 0 : i64, iree_transfers = 0 : i64, kernel_bytes = 1472 : i64, kernel_count = 2 : i64
// IREE-LABEL: func.func public @iree_softmax
// IREE: stablehlo.dot_general {{.*}}costmodel.kernel = [[G:[0-9]+]] : i64
// IREE: stablehlo.broadcast_in_dim {{.*}}costmodel.kernel = [[G]] : i64
// IREE: stablehlo.add {{.*}}costmodel.kernel = [[G]] : i64
// IREE: stablehlo.exponential {{.*}}costmodel.kernel = [[G]] : i64, costmodel.kernel_cost = {{{.*}}bytes_read = 704 : i64, bytes_written = 256 : i64{{.*}}iree_region = "iree_softmax_dispatch_0", kind = "gemm", launches = 1 : i64
// IREE: stablehlo.reduce{{.*}}costmodel.kernel = [[R:[0-9]+]] : i64
// IREE: stablehlo.broadcast_in_dim {{.*}}costmodel.kernel = [[R]] : i64
// IREE: stablehlo.divide {{.*}}costmodel.kernel = [[R]] : i64, costmodel.kernel_cost = {{{.*}}bytes_read = 256 : i64, bytes_written = 256 : i64{{.*}}iree_region = "iree_softmax_dispatch_1", kind = "input", launches = 1 : i64
func.func public @iree_softmax(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<16xf32>) -> tensor<4x16xf32> {
  %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = stablehlo.broadcast_in_dim %c, dims = [1] : (tensor<16xf32>) -> tensor<4x16xf32>
  %2 = stablehlo.add %0, %1 : tensor<4x16xf32>
  %3 = stablehlo.exponential %2 : tensor<4x16xf32>
  %cst = stablehlo.constant dense<0.0> : tensor<f32>
  %4 = stablehlo.reduce(%3 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<4x16xf32>, tensor<f32>) -> tensor<4xf32>
  %5 = stablehlo.broadcast_in_dim %4, dims = [0] : (tensor<4xf32>) -> tensor<4x16xf32>
  %6 = stablehlo.divide %3, %5 : tensor<4x16xf32>
  return %6 : tensor<4x16xf32>
}

// -----

// A concatenate is two flow.tensor.update transfers of IREE's: one `copy` kernel of two
// launches, each copying one 8x32 f32 operand (1024 B) in place.
// IREE-LABEL: func.func public @iree_concatenate
// IREE: stablehlo.concatenate {{.*}}costmodel.kernel_cost = {{{.*}}bytes_read = 2048 : i64, bytes_written = 2048 : i64{{.*}}iree_region = "flow.tensor.update", kind = "copy", launches = 2 : i64
func.func public @iree_concatenate(%x: tensor<8x32xf32>) -> tensor<16x32xf32> {
  %0 = stablehlo.concatenate %x, %x, dim = 0 : (tensor<8x32xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  return %0 : tensor<16x32xf32>
}

// -----

// stablehlo.case: branch 0 exponentiates three times (3 * 64 = 192 transcendentals, three
// kernels), branch 1 multiplies 8x8 matrices (2 * 8 * 8 * 8 = 1024 flops, one kernel). The
// default, branch=max, counts the costliest branch (by predicted time: branch 0 here, three
// memory-bound kernels) as a whole, and writes its choice on the op for the kernel report,
// memory, collectives and the Chakra trace.
// CHECK: module attributes {costmodel.summary = {{{.*}}branch = "max"
// CHECK-LABEL: func.func public @conditional
// CHECK: }) {costmodel.branch_weights = array<f64: 1.000000e+00, 0.000000e+00>, costmodel.cost = {{{.*}}flops = 0 : i64{{.*}}transcendentals = 192 : i64
// mean: each of the 2 branches weighs 1/2: 1024 / 2 = 512 flops, 192 / 2 = 96 transcendentals.
// MEAN-LABEL: func.func public @conditional
// MEAN: }) {costmodel.branch_weights = array<f64: 5.000000e-01, 5.000000e-01>, costmodel.cost = {{{.*}}flops = 512 : i64{{.*}}transcendentals = 96 : i64
// branch=1: the matrix product alone.
// SECOND-LABEL: func.func public @conditional
// SECOND: }) {costmodel.branch_weights = array<f64: 0.000000e+00, 1.000000e+00>, costmodel.cost = {{{.*}}flops = 1024 : i64{{.*}}transcendentals = 0 : i64
// xla: each count its maximum over the branches, as XLA's HandleConditional (flops of branch
// 1, transcendentals of branch 0); the rest follows the costliest branch.
// XLA-LABEL: func.func public @conditional
// XLA: }) {costmodel.branch_weights = array<f64: 1.000000e+00, 0.000000e+00>, costmodel.cost = {{{.*}}flops = 1024 : i64{{.*}}transcendentals = 192 : i64
func.func public @conditional(%i: tensor<i32>, %a: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = "stablehlo.case"(%i) ({
    %1 = stablehlo.exponential %a : tensor<8x8xf32>
    %2 = stablehlo.exponential %1 : tensor<8x8xf32>
    %3 = stablehlo.exponential %2 : tensor<8x8xf32>
    stablehlo.return %3 : tensor<8x8xf32>
  }, {
    %1 = stablehlo.dot_general %a, %a, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
    stablehlo.return %1 : tensor<8x8xf32>
  }) : (tensor<i32>) -> tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A loop until the data says stop: one iteration and a warning (stablehlo-opt), or the
// option's count (TWELVE); a loop with its own costmodel.trip_count keeps it.
// CHECK-LABEL: func.func public @until_converged
// TWELVE-LABEL: func.func public @until_converged
func.func public @until_converged(%x: tensor<64xf32>) -> (tensor<64xf32>, tensor<64xf32>) {
  %limit = stablehlo.constant dense<1.0e+06> : tensor<f32>
  %zero = stablehlo.constant dense<0.0> : tensor<f32>
  // CHECK: stablehlo.while{{.*}}costmodel.cost = {{{.*}}flops = 128 : i64
  // TWELVE: stablehlo.while{{.*}}costmodel.cost = {{{.*}}flops = 1536 : i64{{.*}}trip_count = 12 : i64
  %r = stablehlo.while(%it = %x) : tensor<64xf32>
  cond {
    %s = stablehlo.reduce(%it init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<64xf32>, tensor<f32>) -> tensor<f32>
    %c = stablehlo.compare LT, %s, %limit : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %n = stablehlo.multiply %it, %it : tensor<64xf32>
    stablehlo.return %n : tensor<64xf32>
  }
  // CHECK: stablehlo.while{{.*}}costmodel.cost = {{{.*}}flops = 896 : i64{{.*}}trip_count = 7 : i64
  // TWELVE: stablehlo.while{{.*}}costmodel.cost = {{{.*}}flops = 896 : i64{{.*}}trip_count = 7 : i64
  %h = stablehlo.while(%it = %x) : tensor<64xf32> attributes {costmodel.trip_count = 7 : i64}
  cond {
    %s = stablehlo.reduce(%it init: %zero) applies stablehlo.add across dimensions = [0] : (tensor<64xf32>, tensor<f32>) -> tensor<f32>
    %c = stablehlo.compare LT, %s, %limit : (tensor<f32>, tensor<f32>) -> tensor<i1>
    stablehlo.return %c : tensor<i1>
  } do {
    %n = stablehlo.multiply %it, %it : tensor<64xf32>
    stablehlo.return %n : tensor<64xf32>
  }
  return %r, %h : tensor<64xf32>, tensor<64xf32>
}

// RUN: stablehlo-opt %s --split-input-file --combine-collectives 2>%t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=MSG < %t.err
// MSG: combine-collectives: 2 all-reduces -> 1 (2 combined into 1)
// MSG: combine-collectives: 2 all-reduces -> 2 (0 combined into 0)

// Options are checked: a negative threshold is a one-line error.
// RUN: not stablehlo-opt %s --combine-collectives="threshold-bytes=-1" 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: stablehlo-opt: error: pass 'combine-collectives': option 'threshold-bytes'
// BAD-NOT: Traceback

// Two independent all-reduces of one kind: one variadic all-reduce after the second,
// the multiply that read the first moved after it.
// CHECK-LABEL: func.func @independent
// CHECK-NEXT: %[[R:.*]]:2 = "stablehlo.all_reduce"(%arg0, %arg1)
// CHECK: stablehlo.add
// CHECK: {costmodel.combined = 2 : i64} : (tensor<256xf32>, tensor<128xf32>) -> (tensor<256xf32>, tensor<128xf32>)
// CHECK-NEXT: stablehlo.multiply %[[R]]#0, %[[R]]#0
// CHECK-NEXT: return %{{.*}}, %[[R]]#1
func.func @independent(%arg0: tensor<256xf32>, %arg1: tensor<128xf32>) -> (tensor<256xf32>, tensor<128xf32>) {
  %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<256xf32>) -> tensor<256xf32>
  %1 = stablehlo.multiply %0, %0 : tensor<256xf32>
  %2 = "stablehlo.all_reduce"(%arg1) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<128xf32>) -> tensor<128xf32>
  return %1, %2 : tensor<256xf32>, tensor<128xf32>
}

// -----

// The second reads the first (through the add): they stay apart.
// CHECK-LABEL: func.func @dependent
// CHECK: "stablehlo.all_reduce"(%arg0)
// CHECK-NOT: costmodel.combined
// CHECK: "stablehlo.all_reduce"(%{{.*}})
// CHECK-NOT: costmodel.combined
func.func @dependent(%arg0: tensor<256xf32>) -> tensor<256xf32> {
  %0 = "stablehlo.all_reduce"(%arg0) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<256xf32>) -> tensor<256xf32>
  %1 = stablehlo.add %0, %arg0 : tensor<256xf32>
  %2 = "stablehlo.all_reduce"(%1) <{replica_groups = dense<[[0, 1, 2, 3]]> : tensor<1x4xi64>}> ({
  ^bb0(%a: tensor<f32>, %b: tensor<f32>):
    %s = stablehlo.add %a, %b : tensor<f32>
    stablehlo.return %s : tensor<f32>
  }) : (tensor<256xf32>) -> tensor<256xf32>
  return %2 : tensor<256xf32>
}

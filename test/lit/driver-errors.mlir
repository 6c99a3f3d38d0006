// Every user mistake is one line (file:line:col diagnostics for bad IR), exit 1, or
// exit 2 for a bad command line; never a traceback, never a half-written -o file.

// RUN: not stablehlo-opt %S/Inputs/parse-error.mlir --annotate-cost 2>&1 | FileCheck %s --check-prefix=PARSE
// PARSE: parse-error.mlir:3:27: error: expected '>' in tensor type
// PARSE-NOT: Traceback

// RUN: not stablehlo-opt %S/does-not-exist.mlir 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: stablehlo-opt: error: cannot open input file '{{.*}}does-not-exist.mlir': No such file or directory

// Shardy's passes abort the process on an internal CHECK failure; the driver runs raw
// sdy-* passes in a forked child, so the crash is one error naming the pass and the CHECK.
// RUN: not stablehlo-opt %S/Inputs/non-divisible-sharding.mlir --sdy-propagation-pipeline --sdy-convert-global-to-local 2>&1 | FileCheck %s --check-prefix=CRASH
// CRASH: non-divisible-sharding.mlir:3:1: error: sdy-convert-global-to-local crashed (SIGABRT: Check failed: localType Failed to compute local type due to non-divisible sharding [convert_global_to_local.cc:77])
// CRASH-NOT: Traceback
// CRASH-NOT: LLVM ERROR

// RUN: not stablehlo-opt %s --no-such-pass 2>&1 | FileCheck %s --check-prefix=PASS
// PASS: stablehlo-opt: error: unknown pass 'no-such-pass'

// RUN: not stablehlo-opt %s --pass-pipeline="builtin.module(cse, no-such-pass)" 2>&1 | FileCheck %s --check-prefix=PASS

// RUN: not stablehlo-opt %s --annotate-cost="hardwre=h100-sxm" 2>&1 | FileCheck %s --check-prefix=OPTION
// OPTION: stablehlo-opt: error: {{.*}}'hardwre'

// RUN: not stablehlo-opt %s --canonicalize="no-such-option=1" 2>&1 | FileCheck %s --check-prefix=MLIROPTION
// MLIROPTION: stablehlo-opt: error: pass 'canonicalize': bad options 'no-such-option=1': no such option no-such-option

// RUN: not stablehlo-opt %s --annotate-cost="backend=no-such-backend" 2>&1 | FileCheck %s --check-prefix=BACKEND
// BACKEND: stablehlo-opt: error: unknown backend 'no-such-backend' (known: {{.*}}roofline

// RUN: not stablehlo-opt %s --annotate-cost="hardware=no-such-gpu" 2>&1 | FileCheck %s --check-prefix=HARDWARE
// HARDWARE: stablehlo-opt: error: unknown hardware 'no-such-gpu' (known: {{.*}}h100-sxm

// RUN: not stablehlo-opt %s --annotate-cost="hardware=%S/Inputs/hw-unknown-key.json" 2>&1 | FileCheck %s --check-prefix=HWKEY
// HWKEY: stablehlo-opt: error: {{.*}}hw-unknown-key.json: unknown key 'memory_bandwidth_TBps'

// RUN: not stablehlo-opt %s --annotate-cost="hardware=%S/Inputs/hw-bad-json.json" 2>&1 | FileCheck %s --check-prefix=HWJSON
// HWJSON: stablehlo-opt: error: {{.*}}hw-bad-json.json:1:{{[0-9]+}}: invalid JSON

// RUN: not stablehlo-opt %s --pass-pipeline="canonicalize" 2>&1 | FileCheck %s --check-prefix=ANCHOR
// ANCHOR: stablehlo-opt: error: pass pipeline must be anchored on the module: 'builtin.module(...)'

// RUN: not stablehlo-opt %s --pass-pipeline="builtin.module(func.func(annotate-cost))" 2>&1 | FileCheck %s --check-prefix=NESTED
// NESTED: stablehlo-opt: error: pass 'annotate-cost' runs on the whole module

// Usage errors exit 2 (`not` accepts any non-zero status; the pytest suite checks 2).
// RUN: not stablehlo-opt %s %s 2>&1 | FileCheck %s --check-prefix=USAGE
// RUN: not stablehlo-opt %s -o 2>&1 | FileCheck %s --check-prefix=USAGE
// RUN: not stablehlo-opt %s --mlir-no-such-flag 2>&1 | FileCheck %s --check-prefix=USAGE
// USAGE: stablehlo-opt: error:
// USAGE: stablehlo-opt: try 'stablehlo-opt --help'

// A failing run leaves no -o file behind (and does not touch an existing one).
// RUN: rm -f %t.out && not stablehlo-opt %S/Inputs/parse-error.mlir --annotate-cost -o %t.out
// RUN: not test -e %t.out
// RUN: echo keep > %t.keep && not stablehlo-opt %s --annotate-cost=hardware=no-such-gpu -o %t.keep
// RUN: FileCheck %s --check-prefix=KEEP --input-file %t.keep
// KEEP: keep

func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = stablehlo.exponential %a : tensor<4xf32>
  return %0 : tensor<4xf32>
}

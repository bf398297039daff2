// RUN: kiln-opt %s --kiln-cleanup | FileCheck %s --check-prefix=CLEAN
// RUN: kiln-opt %s --kiln-eliminate-gradients | FileCheck %s --check-prefix=ELIM

// A kiln.guard has no result but is a run-time check: cleanup's dead-code removal keeps it.
// CLEAN-LABEL: func.func @forward
// CLEAN: kiln.guard %{{.*}} {value = 3.000000e+00 : f64, where = "model.cpp:10 (forward)"}
// CLEAN: kiln.guard %{{.*}} {value = 1.500000e+00 : f64, where = "step.cpp:20 (log)"}

// Eliminating gradients keeps the guard that comes before the kept work (the read-back may have
// shaped it) and drops the one after it (logging the loss): the loss and its targets go too.
// ELIM-LABEL: func.func @forward
// ELIM-SAME: (%arg0: tensor<3xf32>) -> tensor<3xf32>
// ELIM: kiln.sum
// ELIM: kiln.guard
// ELIM-SAME: model.cpp:10
// ELIM-NOT: step.cpp
// ELIM-NOT: kiln.mse_loss
// ELIM: return
func.func @forward(%x: tensor<3xf32>, %target: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) attributes {kiln.num_outputs = 1 : i64} {
  %s = kiln.sum %x {dims = array<i64>, keepdim = false} : (tensor<3xf32>) -> tensor<f32>
  kiln.guard %s {value = 3.0 : f64, where = "model.cpp:10 (forward)"} : (tensor<f32>) -> ()
  %y = kiln.relu %x : tensor<3xf32> -> tensor<3xf32>
  %loss = kiln.mse_loss %y, %target {reduction = 1 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<f32>
  kiln.guard %loss {value = 1.5 : f64, where = "step.cpp:20 (log)"} : (tensor<f32>) -> ()
  return %y, %loss : tensor<3xf32>, tensor<f32>
}

// A guard of a constant that holds goes; one that fails stays (it fails at run time, as traced).
// CLEAN-LABEL: func.func @constants
// CLEAN-NOT: a.cpp:1
// CLEAN: kiln.guard %{{.*}} {value = 5.000000e+00 : f64, where = "b.cpp:2"}
// CLEAN-NEXT: return
func.func @constants() {
  %c = kiln.constant dense<2.0> : tensor<f32> : tensor<f32>
  kiln.guard %c {value = 2.0 : f64, where = "a.cpp:1"} : (tensor<f32>) -> ()
  kiln.guard %c {value = 5.0 : f64, where = "b.cpp:2"} : (tensor<f32>) -> ()
  return
}

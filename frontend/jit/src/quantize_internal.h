#pragma once
// Shared by the static (quantize.cpp) and dynamic (quantize_dynamic.cpp) quantization flows.

#include <string>

#include "kiln/tensor.h"
#include "kiln/trace/trace.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace kiln::quant::detail {

// Freezes `fn` (captures become constants), drops gradient bookkeeping and folds batch norm: the
// inference graph whose constant weights the flows quantize. Refuses a training step.
void freeze_for_quantization(jit::TracedFunction& fn, const char* who);

// The inference function of `module`: traced in eval mode without autograd on example_inputs
// (their shapes and dtypes are the function's), the module's own mode restored afterwards.
jit::TracedFunction trace_for_quantization(nn::Module& module, const TensorList& example_inputs);

// kiln.qweight for a float32 weight: int8, symmetric, per output channel (dim 0) or per tensor,
// with the observers' formulas (observer.h).
mlir::DictionaryAttr weight_attr(mlir::Builder& b, const Tensor& w, bool per_channel);

mlir::func::FuncOp forward_of(mlir::ModuleOp module);
std::string location_of(mlir::Operation* op);  // where the tracer recorded it
Dims shape_of(mlir::Value v);

}  // namespace kiln::quant::detail

// kiln::jit::freeze: supplies the captured tensors' bytes to kiln::passes::freeze (which, living
// in passes/, cannot see kiln tensors) and turns its diagnostics into a kiln::Error.

#include "kiln/trace/freeze.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include "kiln/passes/Passes.h"

namespace kiln::jit {

void freeze(TracedFunction& fn) {
  KILN_CHECK(fn.mutated_captures_.empty(), "freeze", "the traced function writes ",
             fn.mutated_captures_.size(),
             " captured tensors (a training step); only an inference function can be frozen");
  passes::WeightMap weights;
  TensorList keep;
  for (size_t i = 0; i < fn.captures_.size(); ++i) {
    // Frozen constants point at contiguous storage; the traced tensor itself when it is so.
    Tensor t = fn.captures_[i].detach().contiguous();
    const std::string& name = fn.arg_names_[fn.num_inputs_ + i];
    weights[name] = {t.data(), static_cast<size_t>(t.numel()) * t.element_size()};
    keep.push_back(t);
  }
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&fn.context(), [&](mlir::Diagnostic& d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  KILN_CHECK(passes::freeze(fn.module(), weights), "freeze", diagnostics);
  fn.frozen_.insert(fn.frozen_.end(), keep.begin(), keep.end());
  fn.captures_.clear();
  fn.host_values_.clear();  // host scalars are constants now, with the values they had
  fn.arg_names_.resize(fn.num_inputs_);
}

}  // namespace kiln::jit

// kiln::jit::eliminate_gradients: the pass rewrites the module; this keeps the TracedFunction's
// inputs, guards and captures in step with the arguments the pass kept (matched by name).

#include "kiln/trace/eliminate_gradients.h"

#include <algorithm>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "kiln/passes/Passes.h"

namespace kiln::jit {

void eliminate_gradients(TracedFunction& fn, bool drop_loss_head) {
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&fn.context(), [&](mlir::Diagnostic& d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  mlir::PassManager pm(&fn.context());
  pm.addPass(passes::create_eliminate_gradients_pass(drop_loss_head, /*eval_mode=*/true));
  pm.addNestedPass<mlir::func::FuncOp>(passes::create_cleanup_pass());
  KILN_CHECK(mlir::succeeded(pm.run(fn.module())), "eliminate_gradients", diagnostics);

  auto forward = fn.module().lookupSymbol<mlir::func::FuncOp>("forward");
  std::vector<std::string> kept;
  for (auto name : forward->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names")
                       .getAsValueRange<mlir::StringAttr>()) {
    kept.push_back(name.str());
  }
  auto is_kept = [&](const std::string& name) {
    return std::find(kept.begin(), kept.end(), name) != kept.end();
  };
  std::vector<Guard> guards;
  for (size_t i = 0; i < fn.num_inputs_; ++i) {
    if (is_kept(fn.arg_names_[i])) guards.push_back(fn.guards_[i]);
  }
  TensorList captures;
  for (size_t i = 0; i < fn.captures_.size(); ++i) {
    if (is_kept(fn.arg_names_[fn.num_inputs_ + i])) captures.push_back(fn.captures_[i]);
  }
  KILN_CHECK(guards.size() + captures.size() == kept.size(), "eliminate_gradients",
             "the pass kept ", kept.size(), " arguments but ", guards.size() + captures.size(),
             " of them match the traced inputs and captures by name");
  fn.num_inputs_ = guards.size();
  fn.guards_ = std::move(guards);
  // Host scalars still read are remapped to their new capture; the rest, and the host guards (the
  // optimizer's update they protect is gone), are dropped.
  std::vector<HostValue> host;
  for (HostValue& v : fn.host_values_) {
    if (!v.capture) continue;
    for (size_t k = 0; k < captures.size(); ++k) {
      if (captures[k].impl() == fn.captures_[*v.capture].impl()) {
        v.capture = k;
        host.push_back(std::move(v));
        break;
      }
    }
  }
  fn.host_values_ = std::move(host);
  fn.captures_ = std::move(captures);
  fn.arg_names_ = std::move(kept);
  fn.mutated_captures_.clear();
  fn.num_outputs_ = forward.getNumResults();
}

}  // namespace kiln::jit

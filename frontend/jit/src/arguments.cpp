// See arguments.h.

#include "arguments.h"

#include <cmath>

#include "kiln/runtime/error.h"
#include "llvm/ADT/BitVector.h"

namespace kiln::jit {

ArgumentOrder host_scalars_as_inputs(const TracedFunction& fn) {
  ArgumentOrder a;
  const size_t num_args = fn.num_inputs() + fn.captures().size();
  for (size_t i = 0; i < fn.num_inputs(); ++i) a.order.push_back(static_cast<unsigned>(i));
  a.host.assign(fn.captures().size(), false);
  for (const HostValue& v : fn.host_values()) {
    if (!v.capture) continue;
    a.host[*v.capture] = true;
    a.order.push_back(static_cast<unsigned>(fn.num_inputs() + *v.capture));
  }
  a.num_inputs = a.order.size();
  for (size_t k = 0; k < a.host.size(); ++k)
    if (!a.host[k]) a.order.push_back(static_cast<unsigned>(fn.num_inputs() + k));
  KILN_CHECK(a.order.size() == num_args, "kiln::jit", "@forward has ", num_args,
             " arguments, the trace describes ", a.order.size());
  a.position.assign(num_args, 0);
  for (size_t i = 0; i < a.order.size(); ++i) a.position[a.order[i]] = static_cast<int64_t>(i);
  return a;
}

void check_host_guards_hold(const TracedFunction& fn, const char* op) {
  for (const HostValue& v : fn.host_values()) {
    if (v.capture) continue;
    const double now = v.read();
    KILN_CHECK(now == v.traced || (std::isnan(now) && std::isnan(v.traced)), op,
               "the trace depends on the host condition '", v.name, "', which was ", v.traced,
               " while tracing and is ", now,
               " now; saved and compiled-ahead code cannot check "
               "it, so it would run the traced form regardless (trace a later step, after the "
               "optimizer's first)");
  }
}

void permute_arguments(mlir::func::FuncOp fn, const std::vector<unsigned>& order) {
  const unsigned n = fn.getNumArguments();
  auto names = fn->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names");
  llvm::SmallVector<mlir::Attribute> new_names;
  for (unsigned old : order) {
    mlir::BlockArgument from = fn.getArgument(old);
    mlir::BlockArgument to = fn.front().addArgument(from.getType(), from.getLoc());
    from.replaceAllUsesWith(to);
    if (names) new_names.push_back(names[old]);
  }
  llvm::BitVector first(fn.front().getNumArguments());
  first.set(0, n);
  fn.front().eraseArguments(first);
  llvm::SmallVector<mlir::Type> types(fn.front().getArgumentTypes());
  fn.setFunctionType(mlir::FunctionType::get(fn.getContext(), types, fn.getResultTypes()));
  if (names) fn->setAttr("kiln.arg_names", mlir::ArrayAttr::get(fn.getContext(), new_names));
}

}  // namespace kiln::jit

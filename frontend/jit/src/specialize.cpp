// jit::compile(fn): trace, compile, and re-trace when a guard fails (compile.h).

#include <cstdio>

#include "kiln/jit/compile.h"

namespace kiln::jit {

namespace {
bool matches(const std::vector<Guard>& guards, const TensorList& inputs) {
  if (guards.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || inputs[i].sizes() != guards[i].sizes ||
        inputs[i].dtype() != guards[i].dtype)
      return false;
  }
  return true;
}
}  // namespace

TensorList SpecializedFunction::operator()(const TensorList& inputs) {
  for (const Specialization& s : specializations_) {
    if (!matches(s.inputs, inputs)) continue;
    try {
      return s.code(inputs);
    } catch (const GuardError&) {
      // A value this specialization read back differs for these inputs: try the next one.
      // (A compiled call that fails leaves in-out state untouched: it is written back only
      // after the whole call succeeded.)
    }
  }
  if (specializations_.size() >= options_.max_specializations) {
    if (eager_calls_++ == 0) {
      std::fprintf(stderr,
                   "kiln jit warning: %zu specializations of this function exist and none fits "
                   "the inputs; running it eagerly from now on for such calls\n",
                   specializations_.size());
    }
    return fn_(inputs);
  }
  TensorList results;
  TracedFunction traced = trace(fn_, inputs, options_.trace, &results);
  specializations_.push_back({traced.guards(), compile(traced, options_.compile)});
  return results;
}

SpecializedFunction compile(std::function<TensorList(const TensorList&)> fn,
                            SpecializeOptions options) {
  KILN_CHECK(fn != nullptr, "jit::compile", "expected a function, got an empty one");
  SpecializedFunction out;
  out.fn_ = std::move(fn);
  out.options_ = std::move(options);
  return out;
}

}  // namespace kiln::jit

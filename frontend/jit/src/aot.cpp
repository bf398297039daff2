// kiln::jit::compile_aot: trace → lower + O3 + object for the target (codegen::lower_to_object)
// → interface object with the frozen weights → system linker (codegen::package_object).

#include "kiln/jit/aot.h"

#include "arguments.h"
#include "pipeline.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "kiln/codegen/aot.h"
#include "kiln/runtime/error.h"
#include "kiln/trace/module.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

namespace kiln::jit {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Where libkiln_runtime.a and libkiln_aot_main.a for the target are: the environment's choice,
// else this build's tree while it exists, else the installed library folder (an installed kiln
// links from there; a relocated one passes AotOptions::runtime_dir, which its CMake package
// provides as kiln_RUNTIME_DIR).
std::string default_runtime_dir(const codegen::Target& target) {
  const bool arm = codegen::is_aarch64(target) && !codegen::is_aarch64(codegen::host_target());
  if (const char* env = std::getenv(arm ? "KILN_AARCH64_RUNTIME_DIR" : "KILN_RUNTIME_DIR");
      env && *env)
    return env;
  if (arm) return KILN_AARCH64_RUNTIME_DIR_DEFAULT;
  const std::filesystem::path build = KILN_HOST_RUNTIME_DIR_DEFAULT;
  std::error_code ec;
  if (std::filesystem::exists(build / "libkiln_runtime.a", ec)) return build.string();
  return KILN_INSTALLED_RUNTIME_DIR;
}

codegen::TensorSpec spec_of(const std::string& name, const codegen::BufferSpec& b) {
  return {name, b.dtype, b.sizes};
}

}  // namespace

AotResult compile_aot(mlir::ModuleOp module, const std::vector<std::string>& input_names,
                      const std::vector<FrozenArg>& frozen, const AotOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_CHECK(!options.output.empty(), "compile_aot", "no output file given");
  codegen::AotOptions o;
  try {
    o.target = codegen::resolve_target(options.target, options.cpu, options.features);
    o.kind = codegen::parse_emit_kind(options.emit);
  } catch (const codegen::AotError& e) {
    fail("compile_aot", e.what());
  }
  o.output = options.output;
  o.prefix = options.name;
  o.opt_level = options.opt_level;
  o.runtime_dir = options.runtime_dir.empty() ? default_runtime_dir(o.target) : options.runtime_dir;
  o.link_args = options.link_args;
  if (options.default_link_args && options.runtime_dir.empty() &&
      !(codegen::is_aarch64(o.target) && !codegen::is_aarch64(codegen::host_target()))) {
    std::istringstream flags(KILN_HOST_LINK_FLAGS);
    for (std::string f; flags >> f;) o.link_args.push_back(f);
  }

  if (options.optimize) optimize_for_codegen(*module.getContext(), module, "compile_aot");
  codegen::LowerOptions lower;
  lower.fuse_elementwise = options.fuse_elementwise;
  // NAME_entry, so that objects of several models (--emit obj, different --name) link together.
  lower.entry_name = (o.kind == codegen::EmitKind::Executable ? "model" : options.name) + "_entry";
  o.entry = lower.entry_name;
  std::string object;
  codegen::EntrySignature sig;
  try {
    object = codegen::lower_to_object(module, o.target, lower, options.opt_level, &sig);
  } catch (const codegen::AotError& e) {
    fail("compile_aot", e.what());
  }
  AotResult r;
  r.lower_and_codegen_s = seconds_since(t0);

  const size_t n_in = input_names.size();
  KILN_CHECK(sig.args.size() == n_in + frozen.size(), "compile_aot", "@forward takes ",
             sig.args.size(), " arguments, but ", n_in, " inputs and ", frozen.size(),
             " frozen weights were given");
  size_t n_state = 0;
  for (const FrozenArg& f : frozen) n_state += f.state >= 0;
  KILN_CHECK(n_state <= sig.results.size(), "compile_aot", n_state,
             " state weights, but @forward returns only ", sig.results.size(), " values");
  const size_t n_out = sig.results.size() - n_state;
  codegen::ModelSignature model;
  model.state.resize(n_state);
  for (size_t i = 0; i < n_in; ++i) model.inputs.push_back(spec_of(input_names[i], sig.args[i]));
  for (size_t i = 0; i < frozen.size(); ++i) {
    const codegen::BufferSpec& want = sig.args[n_in + i];
    KILN_CHECK(static_cast<int64_t>(frozen[i].nbytes) == want.nbytes, "compile_aot", "weight '",
               frozen[i].name, "' holds ", frozen[i].nbytes, " bytes, @forward argument ", n_in + i,
               " needs ", want.nbytes);
    if (const int32_t k = frozen[i].state; k >= 0) {
      KILN_CHECK(static_cast<size_t>(k) < n_state && model.state[k].name.empty(), "compile_aot",
                 "weight '", frozen[i].name, "': state index ", k, " is out of range or taken");
      const codegen::BufferSpec& result = sig.results[n_out + k];
      KILN_CHECK(result.nbytes == want.nbytes && result.dtype == want.dtype, "compile_aot",
                 "state '", frozen[i].name, "': @forward result ", n_out + k,
                 " is not of its dtype and size");
      model.state[k] = spec_of(frozen[i].name, want);
    }
    o.constants.push_back({frozen[i].name, frozen[i].data, frozen[i].nbytes, frozen[i].state});
  }
  for (size_t i = 0; i < n_out; ++i)
    model.outputs.push_back(spec_of("output" + std::to_string(i), sig.results[i]));

  codegen::AotTimings timings;
  try {
    r.files = codegen::package_object(object, model, o, &timings);
  } catch (const codegen::AotError& e) {
    fail("compile_aot", e.what());
  }
  r.package_s = timings.optimize_and_emit_s;
  r.link_s = timings.link_s;
  r.total_s = seconds_since(t0);
  return r;
}

AotResult compile_aot(const TracedFunction& traced, const AotOptions& options) {
  // A training step's captures written in place are its state: writable in the code, updated by
  // each run. Host scalars (an optimizer's learning rate, ...) are inputs, as in saved steps.
  check_host_guards_hold(traced, "compile_aot");
  const ArgumentOrder args = host_scalars_as_inputs(traced);
  std::vector<std::string> input_names;
  for (size_t i = 0; i < args.num_inputs; ++i)
    input_names.push_back(traced.arg_names()[args.order[i]]);
  std::vector<int32_t> state_of(traced.captures().size(), -1);
  for (size_t k = 0; k < traced.mutated_captures().size(); ++k)
    state_of[traced.mutated_captures()[k]] = static_cast<int32_t>(k);
  std::vector<Tensor> keep;  // contiguous copies where needed, alive until the object is emitted
  std::vector<FrozenArg> frozen;
  const TensorList& captures = traced.captures();
  for (size_t i = 0; i < captures.size(); ++i) {
    if (args.host[i]) continue;
    keep.push_back(captures[i].detach().contiguous());
    const std::string& name = traced.arg_names()[traced.num_inputs() + i];
    frozen.push_back(
        {name, keep.back().data(), keep.back().numel() * keep.back().element_size(), state_of[i]});
  }
  // A private context: the trace's own module stays untouched.
  std::unique_ptr<mlir::MLIRContext> ctx = make_context();
  mlir::ModuleOp module = parse_module(*ctx, traced.bytecode());
  try {
    if (args.num_inputs != traced.num_inputs()) {
      auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
      KILN_CHECK(forward, "compile_aot", "the traced module has no @forward");
      permute_arguments(forward, args.order);
    }
    AotResult r = compile_aot(module, input_names, frozen, options);
    module->erase();
    return r;
  } catch (...) {
    module->erase();
    throw;
  }
}

}  // namespace kiln::jit

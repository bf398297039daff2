// kiln::jit::compile_aot: trace → lower + O3 + object for the target (codegen::lower_to_object)
// → interface object with the frozen weights → system linker (codegen::package_object).

#include "kiln/jit/aot.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "kiln/codegen/aot.h"
#include "kiln/runtime/error.h"
#include "kiln/trace/module.h"
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
  codegen::ModelSignature model;
  for (size_t i = 0; i < n_in; ++i) model.inputs.push_back(spec_of(input_names[i], sig.args[i]));
  for (size_t i = 0; i < frozen.size(); ++i) {
    const codegen::BufferSpec& want = sig.args[n_in + i];
    KILN_CHECK(static_cast<int64_t>(frozen[i].nbytes) == want.nbytes, "compile_aot", "weight '",
               frozen[i].name, "' holds ", frozen[i].nbytes, " bytes, @forward argument ", n_in + i,
               " needs ", want.nbytes);
    o.constants.push_back({frozen[i].name, frozen[i].data, frozen[i].nbytes});
  }
  for (size_t i = 0; i < sig.results.size(); ++i)
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
  KILN_CHECK(traced.mutated_captures().empty(), "compile_aot", "the traced function writes ",
             traced.mutated_captures().size(),
             " captured tensor(s) in place (a training step); AOT compiles inference functions, "
             "whose weights are frozen into the code");
  std::vector<std::string> input_names(traced.arg_names().begin(),
                                       traced.arg_names().begin() + traced.num_inputs());
  std::vector<Tensor> keep;  // contiguous copies where needed, alive until the object is emitted
  std::vector<FrozenArg> frozen;
  const TensorList& captures = traced.captures();
  for (size_t i = 0; i < captures.size(); ++i) {
    keep.push_back(captures[i].contiguous());
    const std::string& name = traced.arg_names()[traced.num_inputs() + i];
    frozen.push_back({name, keep.back().data(), keep.back().numel() * keep.back().element_size()});
  }
  // A private context: the trace's own module stays untouched.
  std::unique_ptr<mlir::MLIRContext> ctx = make_context();
  mlir::ModuleOp module = parse_module(*ctx, traced.bytecode());
  try {
    AotResult r = compile_aot(module, input_names, frozen, options);
    module->erase();
    return r;
  } catch (...) {
    module->erase();
    throw;
  }
}

}  // namespace kiln::jit

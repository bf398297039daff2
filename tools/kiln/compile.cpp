// `kiln compile MODEL.kiln|MODEL.mlir --emit exe|so|obj [--target T] [--weights W] -o OUT`:
// ahead-of-time native code for an exported artifact or a traced model (DESIGN.md §7). See
// `kiln compile --help`.

#include "compile.h"

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/jit/aot.h"
#include "kiln/kiln.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

namespace kiln::cli {
namespace {

int usage(FILE* out) {
  std::fprintf(
      out,
      "usage: kiln compile MODEL.kiln|MODEL.mlir --emit exe|so|obj -o OUT [options]\n\n"
      "Compiles ahead of time an artifact (`kiln export`, jit::save: it carries its module and\n"
      "weights) or a traced model (kiln dialect, func.func @forward; weights from --weights):\n"
      "  exe  a standalone executable: OUT IN.npy... [-o OUT.npy]... [--repeat N] [--info]\n"
      "  so   a shared object and OUT's stem + .h: int NAME_run(inputs, outputs), NAME_info()\n"
      "  obj  a relocatable object defining NAME_run and NAME_info\n\n"
      "options:\n"
      "  --target T        host (default), aarch64-linux-gnu, x86_64-linux-gnu\n"
      "  --cpu C           CPU to tune for (default: the host's; generic for other targets)\n"
      "  --features F      LLVM feature string, e.g. +avx2,+fma\n"
      "  --weights W       (.mlir) .safetensors whose tensors are frozen into the code: the\n"
      "                    @forward arguments named like them (kiln.arg_names); the others are\n"
      "                    inputs\n"
      "  --name NAME       symbol prefix for so/obj (default: model)\n"
      "  --runtime-dir D   folder with libkiln_runtime.a + libkiln_aot_main.a for the target\n"
      "  -O N              LLVM optimization level 0-3 (default 3)\n"
      "  --quiet           no timing summary\n");
  return out == stdout ? 0 : 2;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "", "cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// @forward's argument names (the tracer's kiln.arg_names), or arg<i>.
std::vector<std::string> arg_names(mlir::ModuleOp module) {
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  KILN_CHECK(forward, "", "the module has no func.func @forward");
  std::vector<std::string> names;
  auto attr = forward->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names");
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    std::string name = "arg" + std::to_string(i);
    if (attr && i < attr.size())
      if (auto s = mlir::dyn_cast<mlir::StringAttr>(attr[i])) name = s.str();
    names.push_back(name);
  }
  return names;
}

using Clock = std::chrono::steady_clock;

int run_compile(int argc, char** argv);
int finish(mlir::ModuleOp module, const std::vector<std::string>& inputs,
           const std::vector<jit::FrozenArg>& frozen, const jit::AotOptions& o, bool quiet,
           Clock::time_point t0, const std::string& input);
void report(const std::string& input, const jit::AotOptions& o, const jit::AotResult& r,
            double parse_s, int64_t inputs, size_t frozen);

}  // namespace

// Every failure reaches main() as a kiln::Error (a bad number, a filesystem error included).
int compile(int argc, char** argv) {
  try {
    return run_compile(argc, argv);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail("", e.what());
  }
}

namespace {

int run_compile(int argc, char** argv) {
  std::string input;
  std::string weights;
  bool quiet = false;
  jit::AotOptions o;
  o.emit = "";
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      KILN_CHECK(i + 1 < argc, "", a, " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") return usage(stdout);
    if (a == "--emit")
      o.emit = value();
    else if (a == "-o" || a == "--output")
      o.output = value();
    else if (a == "--target")
      o.target = value();
    else if (a == "--cpu")
      o.cpu = value();
    else if (a == "--features")
      o.features = value();
    else if (a == "--weights")
      weights = value();
    else if (a == "--name")
      o.name = value();
    else if (a == "--runtime-dir")
      o.runtime_dir = value();
    else if (a == "-O") {
      const std::string v = value();
      KILN_CHECK(v.size() == 1 && v[0] >= '0' && v[0] <= '3', "", "-O expects 0-3, got '", v, "'");
      o.opt_level = v[0] - '0';
    } else if (a.size() == 3 && a[0] == '-' && a[1] == 'O' && a[2] >= '0' && a[2] <= '3')
      o.opt_level = a[2] - '0';
    else if (a == "--quiet")
      quiet = true;
    else if (!a.empty() && a[0] == '-')
      fail("", "unknown option '", a, "' (see kiln compile --help)");
    else {
      KILN_CHECK(input.empty(), "", "one model at a time: got '", input, "' and '", a, "'");
      input = a;
    }
  }
  if (input.empty()) return usage(stderr);
  KILN_CHECK(!o.emit.empty(), "", "--emit exe|so|obj is required");
  KILN_CHECK(!o.output.empty(), "", "-o OUT is required");
  const bool artifact = std::filesystem::path(input).extension() == ".kiln";
  KILN_CHECK(!artifact || weights.empty(), "", "'", input,
             "' carries its weights: --weights is for .mlir modules");

  const auto t0 = Clock::now();
  if (artifact) {
    const jit::AotResult r = jit::compile_artifact(input, o);
    if (!quiet) report(input, o, r, 0.0, -1, 0);
    return 0;
  }
  std::unique_ptr<mlir::MLIRContext> ctx = jit::make_context();
  mlir::ModuleOp module = jit::parse_module(*ctx, read_text(input));
  const std::vector<std::string> names = arg_names(module);

  // Frozen weights: the trailing arguments found in --weights (the tracer puts captures last).
  NamedTensors tensors;
  if (!weights.empty()) tensors = read_safetensors(weights);
  std::unordered_map<std::string, Tensor> by_name;
  for (auto& [name, t] : tensors) by_name.emplace(name, t.contiguous());
  size_t num_inputs = names.size();
  while (num_inputs > 0 && by_name.count(names[num_inputs - 1])) --num_inputs;
  for (size_t i = 0; i < num_inputs; ++i)
    KILN_CHECK(!by_name.count(names[i]), "", "argument '", names[i],
               "' is in --weights but comes before the input '", names[num_inputs - 1],
               "': weights must be @forward's last arguments");
  std::vector<std::string> inputs(names.begin(), names.begin() + num_inputs);
  std::vector<jit::FrozenArg> frozen;
  for (size_t i = num_inputs; i < names.size(); ++i) {
    const Tensor& t = by_name.at(names[i]);
    frozen.push_back({names[i], t.data(), static_cast<size_t>(t.numel()) * t.element_size()});
  }
  return finish(module, inputs, frozen, o, quiet, t0, input);
}

int finish(mlir::ModuleOp module, const std::vector<std::string>& inputs,
           const std::vector<jit::FrozenArg>& frozen, const jit::AotOptions& o, bool quiet,
           Clock::time_point t0, const std::string& input) {
  const double parse_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const jit::AotResult r = jit::compile_aot(module, inputs, frozen, o);
  module->erase();
  if (!quiet) report(input, o, r, parse_s, static_cast<int64_t>(inputs.size()), frozen.size());
  return 0;
}

// inputs < 0: not counted (an artifact's).
void report(const std::string& input, const jit::AotOptions& o, const jit::AotResult& r,
            double parse_s, int64_t inputs, size_t frozen) {
  std::printf("kiln compile: %s -> %s (%s", input.c_str(), o.output.c_str(), o.target.c_str());
  if (inputs >= 0) std::printf(", %lld input(s)", static_cast<long long>(inputs));
  if (frozen) std::printf(", %zu frozen weight(s)", frozen);
  std::printf(")\n");
  for (size_t i = 1; i < r.files.size(); ++i) std::printf("  also wrote %s\n", r.files[i].c_str());
  std::printf(
      "  lower+codegen %.2f s, weights+interface %.2f s, link %.2f s, total %.2f s; %ju bytes\n",
      r.lower_and_codegen_s, r.package_s, r.link_s, parse_s + r.total_s,
      static_cast<uintmax_t>(std::filesystem::file_size(o.output)));
}

}  // namespace
}  // namespace kiln::cli

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

#include "kiln/codegen/artifact.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/jit/aot.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
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

std::string mlir_type_str(mlir::Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return os.str();
}

int run_compile(int argc, char** argv);
void attach_weight_constants(mlir::ModuleOp module, const rt::Model& model,
                             const std::string& input);
int compile_artifact(mlir::ModuleOp module, const rt::Model& model, const std::string& input,
                     const jit::AotOptions& o, bool quiet, Clock::time_point t0);
int finish(mlir::ModuleOp module, const std::vector<std::string>& inputs,
           const std::vector<jit::FrozenArg>& frozen, const jit::AotOptions& o, bool quiet,
           Clock::time_point t0, const std::string& input);

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
  std::unique_ptr<mlir::MLIRContext> ctx = jit::make_context();
  if (artifact) {
    const auto model = rt::Model::load(input);  // verified like any artifact
    const std::span<const uint8_t> bytecode = model->mlir_bytecode();
    KILN_CHECK(!bytecode.empty(), "", "'", input,
               "' holds no module to compile: it was written without one (kiln export "
               "--no-embed-ir, or jit::save without SaveOptions::embed_mlir_bytecode)");
    mlir::ModuleOp module = jit::parse_module(
        *ctx, std::string(reinterpret_cast<const char*>(bytecode.data()), bytecode.size()));
    attach_weight_constants(module, *model, input);
    return compile_artifact(module, *model, input, o, quiet, t0);
  }
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

// The embedded module's weight constants refer to the artifact's blobs by name (see
// codegen::kArtifactBlobResourcePrefix): give them the blobs' bytes, where the model maps them.
void attach_weight_constants(mlir::ModuleOp module, const rt::Model& model,
                             const std::string& input) {
  const llvm::StringRef prefix = codegen::kArtifactBlobResourcePrefix;
  module.walk([&](ir::ConstantOp c) {
    auto res = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(c.getValue());
    if (!res || res.getRawHandle().getBlob()) return;
    llvm::StringRef key = res.getRawHandle().getKey();
    KILN_CHECK(key.starts_with(prefix), "", "'", input, "': constant '", key.str(),
               "' of its module has no data");
    const std::string name = key.drop_front(prefix.size()).str();
    const std::optional<std::span<const uint8_t>> bytes = model.blob(name);
    KILN_CHECK(bytes, "", "'", input, "': its module refers to blob '", name,
               "', which it does not hold");
    auto type = mlir::cast<mlir::ShapedType>(c.getType());
    const size_t want =
        static_cast<size_t>(type.getNumElements()) * ((type.getElementTypeBitWidth() + 7) / 8);
    KILN_CHECK(bytes->size() == want, "", "'", input, "': blob '", name, "' holds ", bytes->size(),
               " bytes, its constant ", mlir_type_str(type), " needs ", want);
    res.getRawHandle().getResource()->setBlob(mlir::UnmanagedAsmResourceBlob::allocateInferAlign(
        llvm::ArrayRef<char>(reinterpret_cast<const char*>(bytes->data()), bytes->size())));
  });
}

// The module embedded in an artifact: its first arguments are the artifact's inputs (named as
// the artifact names them), the others weights the artifact stores under their names.
int compile_artifact(mlir::ModuleOp module, const rt::Model& model, const std::string& input,
                     const jit::AotOptions& o, bool quiet, Clock::time_point t0) {
  const std::vector<std::string> names = arg_names(module);
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  const size_t num_inputs = model.inputs().size();
  KILN_CHECK(names.size() >= num_inputs, "", "'", input, "': its module takes ", names.size(),
             " arguments, fewer than its ", num_inputs, " inputs");
  std::vector<std::string> inputs;
  for (size_t i = 0; i < num_inputs; ++i) {
    const rt::TensorSpec& spec = model.inputs()[i];
    auto type = mlir::cast<mlir::RankedTensorType>(forward.getArgument(i).getType());
    KILN_CHECK(type.getShape() == llvm::ArrayRef<int64_t>(spec.shape.data(), spec.shape.size()), "",
               "'", input, "': input '", spec.name, "' has ", spec.shape.size(),
               " dims, its module's argument ", i, " is ", mlir_type_str(type),
               ": not a module kiln wrote");
    inputs.push_back(spec.name);
  }
  std::vector<jit::FrozenArg> frozen;
  for (size_t i = num_inputs; i < names.size(); ++i) {
    const std::optional<std::span<const uint8_t>> bytes = model.blob(names[i]);
    KILN_CHECK(bytes, "", "'", input, "': its module's argument '", names[i],
               "' is neither an input nor a weight of the artifact");
    auto type = mlir::cast<mlir::RankedTensorType>(forward.getArgument(i).getType());
    const size_t want =
        static_cast<size_t>(type.getNumElements()) * ((type.getElementTypeBitWidth() + 7) / 8);
    KILN_CHECK(bytes->size() == want, "", "'", input, "': weight '", names[i], "' holds ",
               bytes->size(), " bytes, its type ", mlir_type_str(type), " needs ", want);
    frozen.push_back({names[i], bytes->data(), bytes->size()});
  }
  return finish(module, inputs, frozen, o, quiet, t0, input);
}

int finish(mlir::ModuleOp module, const std::vector<std::string>& inputs,
           const std::vector<jit::FrozenArg>& frozen, const jit::AotOptions& o, bool quiet,
           Clock::time_point t0, const std::string& input) {
  const double parse_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const jit::AotResult r = jit::compile_aot(module, inputs, frozen, o);
  module->erase();
  if (!quiet) {
    std::printf("kiln compile: %s -> %s (%s, %zu input(s), %zu frozen weight(s))\n", input.c_str(),
                o.output.c_str(), o.target.c_str(), inputs.size(), frozen.size());
    for (size_t i = 1; i < r.files.size(); ++i)
      std::printf("  also wrote %s\n", r.files[i].c_str());
    std::printf(
        "  parse %.2f s, lower+codegen %.2f s, weights+interface %.2f s, link %.2f s, "
        "total %.2f s; %ju bytes\n",
        parse_s, r.lower_and_codegen_s, r.package_s, r.link_s, parse_s + r.total_s,
        static_cast<uintmax_t>(std::filesystem::file_size(o.output)));
  }
  return 0;
}

}  // namespace
}  // namespace kiln::cli

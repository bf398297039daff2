// kiln::jit::compile_artifact: a .kiln artifact compiled ahead of time from what it carries, the
// module (MLIR bytecode) and the weights it stores: the module's weight constants refer to the
// artifact's blobs by name (codegen::kArtifactBlobResourcePrefix) and its trailing @forward
// arguments are weights stored under their argument names. A saved training step compiles to
// a training step (its state writable, as compile_aot of the trace makes it).

#include <chrono>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/codegen/artifact.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/jit/aot.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/module.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/MLIRContext.h"

namespace kiln::jit {
namespace {

constexpr const char* kOp = "compile_artifact";

std::string type_str(mlir::Type t) {
  std::string s;
  llvm::raw_string_ostream os(s);
  t.print(os);
  return os.str();
}

size_t nbytes(mlir::ShapedType type) {
  return static_cast<size_t>(type.getNumElements()) * ((type.getElementTypeBitWidth() + 7) / 8);
}

// Gives the module's dataless weight constants the bytes of the blobs they name.
void attach_weight_constants(mlir::ModuleOp module, const rt::Model& model,
                             const std::string& path) {
  const llvm::StringRef prefix = codegen::kArtifactBlobResourcePrefix;
  module.walk([&](ir::ConstantOp c) {
    auto res = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(c.getValue());
    if (!res || res.getRawHandle().getBlob()) return;
    const llvm::StringRef key = res.getRawHandle().getKey();
    KILN_CHECK(key.starts_with(prefix), kOp, "'", path, "': constant '", key.str(),
               "' of its module has no data");
    const std::string name = key.drop_front(prefix.size()).str();
    const std::optional<std::span<const uint8_t>> bytes = model.blob(name);
    KILN_CHECK(bytes, kOp, "'", path, "': its module refers to blob '", name,
               "', which it does not hold");
    auto type = mlir::cast<mlir::ShapedType>(c.getType());
    KILN_CHECK(bytes->size() == nbytes(type), kOp, "'", path, "': blob '", name, "' holds ",
               bytes->size(), " bytes, its constant ", type_str(type), " needs ", nbytes(type));
    res.getRawHandle().getResource()->setBlob(mlir::UnmanagedAsmResourceBlob::allocateInferAlign(
        llvm::ArrayRef<char>(reinterpret_cast<const char*>(bytes->data()), bytes->size())));
  });
}

}  // namespace

AotResult compile_artifact(const std::string& path, const AotOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto model = rt::Model::load(path);  // verified like any artifact
  const std::span<const uint8_t> bytecode = model->mlir_bytecode();
  KILN_CHECK(!bytecode.empty(), kOp, "'", path,
             "' holds no module to compile: it was written without one (kiln export "
             "--no-embed-ir, or jit::save without SaveOptions::embed_mlir_bytecode)");
  std::unique_ptr<mlir::MLIRContext> ctx = make_context();
  mlir::ModuleOp module = parse_module(
      *ctx, std::string(reinterpret_cast<const char*>(bytecode.data()), bytecode.size()));
  mlir::OwningOpRef<mlir::ModuleOp> owned(module);
  attach_weight_constants(module, *model, path);

  // @forward's first arguments are the artifact's inputs (named as the artifact names them).
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  KILN_CHECK(forward, kOp, "'", path, "': its module has no func.func @forward");
  std::vector<std::string> names;
  auto attr = forward->getAttrOfType<mlir::ArrayAttr>("kiln.arg_names");
  for (unsigned i = 0; i < forward.getNumArguments(); ++i) {
    auto s = attr && i < attr.size() ? mlir::dyn_cast<mlir::StringAttr>(attr[i]) : nullptr;
    names.push_back(s ? s.str() : "arg" + std::to_string(i));
  }
  const size_t num_inputs = model->inputs().size();
  KILN_CHECK(names.size() >= num_inputs, kOp, "'", path, "': its module takes ", names.size(),
             " arguments, fewer than its ", num_inputs, " inputs");
  std::vector<std::string> inputs;
  for (size_t i = 0; i < num_inputs; ++i) {
    const rt::TensorSpec& spec = model->inputs()[i];
    auto type = mlir::cast<mlir::RankedTensorType>(forward.getArgument(i).getType());
    KILN_CHECK(type.getShape() == llvm::ArrayRef<int64_t>(spec.shape.data(), spec.shape.size()),
               kOp, "'", path, "': input '", spec.name, "' has ", spec.shape.size(),
               " dims, its module's argument ", i, " is ", type_str(type),
               ": not a module kiln wrote");
    inputs.push_back(spec.name);
  }
  // The others: weights stored under their argument names; a training step's state (updated
  // by each run: @forward returns state k's new value after the outputs) stays state.
  const std::vector<std::string> state = model->state_names();
  std::vector<FrozenArg> frozen;
  for (size_t i = num_inputs; i < names.size(); ++i) {
    const std::optional<std::span<const uint8_t>> bytes = model->blob(names[i]);
    KILN_CHECK(bytes, kOp, "'", path, "': its module's argument '", names[i],
               "' is neither an input nor a weight of the artifact");
    auto type = mlir::cast<mlir::RankedTensorType>(forward.getArgument(i).getType());
    KILN_CHECK(bytes->size() == nbytes(type), kOp, "'", path, "': weight '", names[i], "' holds ",
               bytes->size(), " bytes, its type ", type_str(type), " needs ", nbytes(type));
    int32_t k = -1;
    for (size_t j = 0; j < state.size(); ++j)
      if (state[j] == names[i]) k = static_cast<int32_t>(j);
    frozen.push_back({names[i], bytes->data(), bytes->size(), k});
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  AotResult r = compile_aot(module, inputs, frozen, options);
  r.total_s += load_s;
  return r;
}

}  // namespace kiln::jit

// The C interface of an AOT-compiled model (kiln/runtime/aot_model.h), generated as its own small
// LLVM module so the model's object (from the lowering, or from any LLVM module) stays untouched:
//
//   int32 PREFIX_run(ptr inputs, ptr outputs)
//     buffers = alloca [N + C + M + S x ptr]: inputs[i], then the C weights (private constants
//     in this module; a training step's state is writable data instead), then outputs[j], then
//     S buffers for the state's new values
//     ENTRY(buffers)
//     if kiln_abi_take_error() is a message: put it back (kiln_abi_set_error) and return 1
//     copy each new state value over the state
//     return 0
//   ptr PREFIX_info()  →  a constant kiln_model_info
//   ptr PREFIX_take_error() / PREFIX_free_error(ptr): the message of the last failed run on this
//     thread, from the runtime linked into the model (a shared object holds its own copy)

#include <string>

#include "kiln/codegen/aot.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/DerivedTypes.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

namespace kiln::codegen {
namespace {

constexpr int kAbiVersion = 3;  // KILN_AOT_ABI_VERSION in kiln/runtime/aot_model.h

struct InfoBuilder {
  llvm::Module& m;
  llvm::LLVMContext& ctx;
  llvm::StructType* tensor_info;  // { ptr name, i32 dtype, i32 rank, ptr shape }
  // { i32 abi, i32 n_in, i32 n_out, ptr in, ptr out, ptr target, i32 n_state, ptr state,
  //   ptr state_data, ptr cpu, ptr cpu_features }
  llvm::StructType* model_info;
  std::string prefix;

  llvm::Constant* private_global(llvm::Constant* init, const std::string& name) {
    auto* g =
        new llvm::GlobalVariable(m, init->getType(), /*isConstant=*/true,
                                 llvm::GlobalValue::PrivateLinkage, init, prefix + "." + name);
    g->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    return g;
  }

  llvm::Constant* string(const std::string& s, const std::string& name) {
    return private_global(llvm::ConstantDataArray::getString(ctx, s), name);
  }

  // A frozen weight: raw bytes, read-only, 64-byte aligned like every runtime buffer; a state
  // tensor's initial value is the same but writable.
  llvm::Constant* constant_data(const ConstantBuffer& c, size_t index) {
    llvm::StringRef bytes(static_cast<const char*>(c.data), c.nbytes);
    auto* init = llvm::ConstantDataArray::getRaw(bytes, c.nbytes, llvm::Type::getInt8Ty(ctx));
    const bool state = c.state >= 0;
    auto* g = new llvm::GlobalVariable(
        m, init->getType(), /*isConstant=*/!state, llvm::GlobalValue::PrivateLinkage, init,
        prefix + (state ? ".state" + std::to_string(c.state) : ".weight" + std::to_string(index)));
    g->setAlignment(llvm::Align(64));
    return g;
  }

  // Writable zeroed bytes (.bss): where the entry point writes a state tensor's new value.
  llvm::Constant* scratch_data(size_t nbytes, const std::string& name) {
    auto* type = llvm::ArrayType::get(llvm::Type::getInt8Ty(ctx), nbytes);
    auto* g =
        new llvm::GlobalVariable(m, type, /*isConstant=*/false, llvm::GlobalValue::PrivateLinkage,
                                 llvm::ConstantAggregateZero::get(type), prefix + "." + name);
    g->setAlignment(llvm::Align(64));
    return g;
  }

  llvm::Constant* tensors(const std::vector<TensorSpec>& specs, const std::string& kind) {
    auto* ptr = llvm::PointerType::get(ctx, 0);
    if (specs.empty()) return llvm::ConstantPointerNull::get(ptr);
    std::vector<llvm::Constant*> entries;
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorSpec& t = specs[i];
      const std::string tag = kind + std::to_string(i);
      std::vector<uint64_t> dims(t.shape.begin(), t.shape.end());
      llvm::Constant* shape =
          dims.empty() ? static_cast<llvm::Constant*>(llvm::ConstantPointerNull::get(ptr))
                       : private_global(llvm::ConstantDataArray::get(ctx, dims), tag + ".shape");
      entries.push_back(llvm::ConstantStruct::get(
          tensor_info,
          {string(t.name, tag + ".name"),
           llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), t.dtype),
           llvm::ConstantInt::get(llvm::Type::getInt32Ty(ctx), t.shape.size()), shape}));
    }
    return private_global(
        llvm::ConstantArray::get(llvm::ArrayType::get(tensor_info, entries.size()), entries), kind);
  }
};

}  // namespace

std::unique_ptr<llvm::Module> build_interface_module(llvm::LLVMContext& ctx,
                                                     const ModelSignature& signature,
                                                     const std::vector<ConstantBuffer>& constants,
                                                     const std::string& prefix,
                                                     const std::string& entry, const Target& target,
                                                     const std::string& cpu_features,
                                                     bool uses_runtime_errors) {
  auto m = std::make_unique<llvm::Module>(prefix + "_interface", ctx);
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* i32 = llvm::Type::getInt32Ty(ctx);

  InfoBuilder b{
      *m, ctx, llvm::StructType::create(ctx, {ptr, i32, i32, ptr}, "kiln_tensor_info"),
      llvm::StructType::create(ctx, {i32, i32, i32, ptr, ptr, ptr, i32, ptr, ptr, ptr, ptr},
                               "kiln_model_info"),
      prefix};

  // Weights; a training step's state k (writable) and the buffer its new value goes to.
  const size_t n_state = signature.state.size();
  std::vector<llvm::Constant*> weights;
  std::vector<llvm::Constant*> state(n_state, nullptr), next(n_state, nullptr);
  std::vector<size_t> state_bytes(n_state, 0);
  for (size_t i = 0; i < constants.size(); ++i) {
    const ConstantBuffer& c = constants[i];
    weights.push_back(b.constant_data(c, i));
    if (c.state < 0) continue;
    if (static_cast<size_t>(c.state) >= n_state || state[c.state])
      throw AotError("weight '" + c.name + "' claims state " + std::to_string(c.state) + " of " +
                     std::to_string(n_state) + ", or one another weight holds");
    state[c.state] = weights.back();
    next[c.state] = b.scratch_data(c.nbytes, "state" + std::to_string(c.state) + ".next");
    state_bytes[c.state] = c.nbytes;
  }
  for (size_t k = 0; k < n_state; ++k)
    if (!state[k]) throw AotError("no weight holds state " + std::to_string(k));

  // PREFIX_info
  llvm::Constant* state_data =
      n_state == 0
          ? static_cast<llvm::Constant*>(llvm::ConstantPointerNull::get(ptr))
          : b.private_global(llvm::ConstantArray::get(llvm::ArrayType::get(ptr, n_state), state),
                             "state_data");
  llvm::Constant* info = b.private_global(
      llvm::ConstantStruct::get(
          b.model_info, {llvm::ConstantInt::get(i32, kAbiVersion),
                         llvm::ConstantInt::get(i32, signature.inputs.size()),
                         llvm::ConstantInt::get(i32, signature.outputs.size()),
                         b.tensors(signature.inputs, "input"),
                         b.tensors(signature.outputs, "output"), b.string(target.triple, "target"),
                         llvm::ConstantInt::get(i32, n_state), b.tensors(signature.state, "state"),
                         state_data, b.string(target.cpu.empty() ? "generic" : target.cpu, "cpu"),
                         b.string(cpu_features, "cpu_features")}),
      "info");
  auto* info_fn = llvm::Function::Create(llvm::FunctionType::get(ptr, false),
                                         llvm::GlobalValue::ExternalLinkage, prefix + "_info", *m);
  llvm::IRBuilder<> ib(llvm::BasicBlock::Create(ctx, "entry", info_fn));
  ib.CreateRet(info);

  // PREFIX_run
  auto* run = llvm::Function::Create(llvm::FunctionType::get(i32, {ptr, ptr}, false),
                                     llvm::GlobalValue::ExternalLinkage, prefix + "_run", *m);
  llvm::Value* inputs = run->getArg(0);
  llvm::Value* outputs = run->getArg(1);
  inputs->setName("inputs");
  outputs->setName("outputs");
  auto* body = llvm::BasicBlock::Create(ctx, "entry", run);
  ib.SetInsertPoint(body);
  const size_t n_in = signature.inputs.size(), n_const = constants.size(),
               n_out = signature.outputs.size();
  const size_t n_buffers = n_in + n_const + n_out + n_state;
  auto* buffers_ty = llvm::ArrayType::get(ptr, std::max<size_t>(n_buffers, 1));
  llvm::Value* buffers = ib.CreateAlloca(buffers_ty, nullptr, "buffers");
  for (size_t i = 0; i < n_buffers; ++i) {
    llvm::Value* p;
    if (i < n_in) {
      p = ib.CreateLoad(ptr, ib.CreateConstInBoundsGEP1_64(ptr, inputs, i));
    } else if (i < n_in + n_const) {
      p = weights[i - n_in];
    } else if (i < n_in + n_const + n_out) {
      p = ib.CreateLoad(ptr, ib.CreateConstInBoundsGEP1_64(ptr, outputs, i - n_in - n_const));
    } else {
      p = next[i - n_in - n_const - n_out];
    }
    ib.CreateStore(p, ib.CreateConstInBoundsGEP2_64(buffers_ty, buffers, 0, i));
  }
  llvm::FunctionCallee entry_fn = m->getOrInsertFunction(
      entry, llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false));
  ib.CreateCall(entry_fn, {buffers});
  // The step succeeded: its new state replaces the old.
  auto commit_state = [&] {
    for (size_t k = 0; k < n_state; ++k)
      ib.CreateMemCpy(state[k], llvm::MaybeAlign(64), next[k], llvm::MaybeAlign(64),
                      state_bytes[k]);
  };
  auto* void_ty = llvm::Type::getVoidTy(ctx);
  llvm::FunctionCallee take =
      m->getOrInsertFunction("kiln_abi_take_error", llvm::FunctionType::get(ptr, false));
  llvm::FunctionCallee free_error =
      m->getOrInsertFunction("kiln_abi_free_error", llvm::FunctionType::get(void_ty, {ptr}, false));
  if (!uses_runtime_errors) {
    commit_state();
    ib.CreateRet(llvm::ConstantInt::get(i32, 0));
  } else {
    llvm::FunctionCallee set = m->getOrInsertFunction(
        "kiln_abi_set_error", llvm::FunctionType::get(void_ty, {ptr}, false));
    llvm::Value* error = ib.CreateCall(take, {}, "error");
    auto* ok = llvm::BasicBlock::Create(ctx, "ok", run);
    auto* failed = llvm::BasicBlock::Create(ctx, "failed", run);
    ib.CreateCondBr(ib.CreateIsNull(error), ok, failed);
    ib.SetInsertPoint(ok);
    commit_state();
    ib.CreateRet(llvm::ConstantInt::get(i32, 0));
    // Leave the message recorded for the caller (kiln_abi_take_error) and report failure.
    ib.SetInsertPoint(failed);
    ib.CreateCall(set, {error});
    ib.CreateCall(free_error, {error});
    ib.CreateRet(llvm::ConstantInt::get(i32, 1));
  }

  // PREFIX_take_error / PREFIX_free_error: forwarders into the model's own runtime (only where
  // the model records errors there; aot_link exports them likewise).
  if (!uses_runtime_errors) return m;
  auto* take_fn =
      llvm::Function::Create(llvm::FunctionType::get(ptr, false),
                             llvm::GlobalValue::ExternalLinkage, prefix + "_take_error", *m);
  ib.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", take_fn));
  ib.CreateRet(ib.CreateCall(take, {}));
  auto* free_fn =
      llvm::Function::Create(llvm::FunctionType::get(void_ty, {ptr}, false),
                             llvm::GlobalValue::ExternalLinkage, prefix + "_free_error", *m);
  ib.SetInsertPoint(llvm::BasicBlock::Create(ctx, "entry", free_fn));
  ib.CreateCall(free_error, {free_fn->getArg(0)});
  ib.CreateRetVoid();
  return m;
}

}  // namespace kiln::codegen

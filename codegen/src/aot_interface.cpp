// The C interface of an AOT-compiled model (kiln/runtime/aot_model.h), generated as its own small
// LLVM module so the model's object (from the lowering, or from any LLVM module) stays untouched:
//
//   int32 PREFIX_run(ptr inputs, ptr outputs)
//     buffers = alloca [N + C + M x ptr]: inputs[i], then the C frozen weights (private
//     constants in this module), then outputs[j]
//     ENTRY(buffers)
//     if kiln_abi_take_error() is a message: put it back (kiln_abi_set_error) and return 1
//     return 0
//   ptr PREFIX_info()  →  a constant kiln_model_info

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

constexpr int kAbiVersion = 1;  // KILN_AOT_ABI_VERSION in kiln/runtime/aot_model.h

struct InfoBuilder {
  llvm::Module& m;
  llvm::LLVMContext& ctx;
  llvm::StructType* tensor_info;  // { ptr name, i32 dtype, i32 rank, ptr shape }
  llvm::StructType* model_info;   // { i32 abi, i32 n_in, i32 n_out, ptr in, ptr out, ptr target }
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

  // A frozen weight: raw bytes, read-only, 64-byte aligned like every runtime buffer.
  llvm::Constant* constant_data(const ConstantBuffer& c, size_t index) {
    llvm::StringRef bytes(static_cast<const char*>(c.data), c.nbytes);
    auto* init = llvm::ConstantDataArray::getRaw(bytes, c.nbytes, llvm::Type::getInt8Ty(ctx));
    auto* g = new llvm::GlobalVariable(m, init->getType(), /*isConstant=*/true,
                                       llvm::GlobalValue::PrivateLinkage, init,
                                       prefix + ".weight" + std::to_string(index));
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

std::unique_ptr<llvm::Module> build_interface_module(
    llvm::LLVMContext& ctx, const ModelSignature& signature,
    const std::vector<ConstantBuffer>& constants, const std::string& prefix,
    const std::string& entry, const std::string& triple, bool uses_runtime_errors) {
  auto m = std::make_unique<llvm::Module>(prefix + "_interface", ctx);
  auto* ptr = llvm::PointerType::get(ctx, 0);
  auto* i32 = llvm::Type::getInt32Ty(ctx);

  // PREFIX_info
  InfoBuilder b{*m, ctx, llvm::StructType::create(ctx, {ptr, i32, i32, ptr}, "kiln_tensor_info"),
                llvm::StructType::create(ctx, {i32, i32, i32, ptr, ptr, ptr}, "kiln_model_info"),
                prefix};
  llvm::Constant* info = b.private_global(
      llvm::ConstantStruct::get(
          b.model_info, {llvm::ConstantInt::get(i32, kAbiVersion),
                         llvm::ConstantInt::get(i32, signature.inputs.size()),
                         llvm::ConstantInt::get(i32, signature.outputs.size()),
                         b.tensors(signature.inputs, "input"),
                         b.tensors(signature.outputs, "output"), b.string(triple, "target")}),
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
  auto* buffers_ty = llvm::ArrayType::get(ptr, std::max<size_t>(n_in + n_const + n_out, 1));
  llvm::Value* buffers = ib.CreateAlloca(buffers_ty, nullptr, "buffers");
  for (size_t i = 0; i < n_in + n_const + n_out; ++i) {
    llvm::Value* p;
    if (i < n_in) {
      p = ib.CreateLoad(ptr, ib.CreateConstInBoundsGEP1_64(ptr, inputs, i));
    } else if (i < n_in + n_const) {
      p = b.constant_data(constants[i - n_in], i - n_in);
    } else {
      p = ib.CreateLoad(ptr, ib.CreateConstInBoundsGEP1_64(ptr, outputs, i - n_in - n_const));
    }
    ib.CreateStore(p, ib.CreateConstInBoundsGEP2_64(buffers_ty, buffers, 0, i));
  }
  llvm::FunctionCallee entry_fn = m->getOrInsertFunction(
      entry, llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false));
  ib.CreateCall(entry_fn, {buffers});
  if (!uses_runtime_errors) {
    ib.CreateRet(llvm::ConstantInt::get(i32, 0));
  } else {
    auto* void_ty = llvm::Type::getVoidTy(ctx);
    llvm::FunctionCallee take =
        m->getOrInsertFunction("kiln_abi_take_error", llvm::FunctionType::get(ptr, false));
    llvm::FunctionCallee set = m->getOrInsertFunction(
        "kiln_abi_set_error", llvm::FunctionType::get(void_ty, {ptr}, false));
    llvm::FunctionCallee free_error = m->getOrInsertFunction(
        "kiln_abi_free_error", llvm::FunctionType::get(void_ty, {ptr}, false));
    llvm::Value* error = ib.CreateCall(take, {}, "error");
    auto* ok = llvm::BasicBlock::Create(ctx, "ok", run);
    auto* failed = llvm::BasicBlock::Create(ctx, "failed", run);
    ib.CreateCondBr(ib.CreateIsNull(error), ok, failed);
    ib.SetInsertPoint(ok);
    ib.CreateRet(llvm::ConstantInt::get(i32, 0));
    // Leave the message recorded for the caller (kiln_abi_take_error) and report failure.
    ib.SetInsertPoint(failed);
    ib.CreateCall(set, {error});
    ib.CreateCall(free_error, {error});
    ib.CreateRet(llvm::ConstantInt::get(i32, 1));
  }
  return m;
}

}  // namespace kiln::codegen

// Generated code for artifacts (kiln/codegen/native_code.h): groups marked on the module, each
// lowered on its own and optimized like the JIT's code, linked per target into one LLVM module
// whose runtime calls go through pointers bound at load, then one shared object per target.

#include "kiln/codegen/native_code.h"

#include <algorithm>
#include <set>

#include "kiln/codegen/aot.h"
#include "kiln/codegen/lower.h"
#include "kiln/ir/KilnDialect.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Linker/Linker.h"
#include "llvm/Target/TargetMachine.h"
#include "lower/lowering.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"

namespace kiln::codegen {
namespace {

constexpr char kSymbolAttr[] = "kiln.symbol";
// On a group that is also compiled as its product's block epilogue: that entry point's name
// (the memory plan then computes the group's output in the product's buffer).
constexpr char kBlockSymbolAttr[] = "kiln.block_symbol";
// Likewise its form as the block prologue of the product after it (the memory plan then keeps
// the group's inputs live through that product, which runs it).
constexpr char kPrologueSymbolAttr[] = "kiln.prologue_symbol";

// The C ABI's core, which the builtin registry offers any code object (register_abi_core,
// runtime/src/abi/memory.cpp). A group whose code calls anything else (a runtime kernel) stays
// portable.
bool is_core_import(llvm::StringRef name) {
  static const std::set<std::string> core = {"kiln_abi_alloc",        "kiln_abi_free",
                                             "kiln_abi_lease_begin",  "kiln_abi_lease_end",
                                             "kiln_abi_parallel_for", "kiln_abi_set_error"};
  return core.count(name.str()) != 0;
}

bool is_static_tensor(mlir::Type t) {
  auto r = mlir::dyn_cast<mlir::RankedTensorType>(t);
  return r && r.hasStaticShape();
}

// A view op the portable plan runs as a copy (its values are dense; only reshapes alias): a
// generated copy instead, tiled in registers where it transposes (view and reshape stay free).
bool copies_view(mlir::Operation* op) {
  return mlir::isa<ir::PermuteOp, ir::TransposeOp, ir::SliceOp, ir::SelectOp, ir::ExpandOp>(op);
}

// An absent optional operand (kiln.none: a layer norm without weight or bias).
bool is_none(mlir::Value v) {
  return mlir::isa<mlir::NoneType>(v.getType());
}

// A row kernel, or a column kernel (a reduction over leading dims; one whose operands do not
// coalesce calls the runtime, and compile_group then leaves it portable).
bool is_row_kernel(mlir::Operation* op) {
  return detail::Lowering::has_row_kernel(op) || detail::Lowering::has_column_kernel(op);
}
bool is_elementwise(mlir::Operation* op) {
  return detail::Lowering::is_elementwise(op);
}

// An op that can start or join a group: computed in generated loops (or a copying view op),
// and out, and (a kiln.fused) yielding only values its body computes from its arguments, so that
// every output of the group is a value its portable form writes.
bool candidate(mlir::Operation* op) {
  if (!is_elementwise(op) && !is_row_kernel(op) && !copies_view(op)) return false;
  if (op->getNumResults() == 0) return false;
  for (mlir::Type t : op->getResultTypes())
    if (!is_static_tensor(t)) return false;
  for (mlir::Value v : op->getOperands())
    if (!is_none(v) && !is_static_tensor(v.getType())) return false;
  if (auto fused = mlir::dyn_cast<ir::FusedOp>(op)) {
    mlir::Block& body = fused->getRegion(0).front();
    for (mlir::Value v : body.getTerminator()->getOperands())
      if (mlir::isa<mlir::BlockArgument>(v) || v.getParentBlock() != &body) return false;
    bool captures = false;
    fused->getRegion(0).walk([&](mlir::Operation* inner) {
      for (mlir::Value v : inner->getOperands())
        captures |= !fused->isAncestor(v.getParentBlock()->getParentOp());
    });
    if (captures) return false;
  }
  return true;
}

bool only_used_by(mlir::Operation* op, mlir::Operation* user) {
  for (mlir::Value r : op->getResults())
    for (mlir::Operation* u : r.getUsers())
      if (u != user) return false;
  return true;
}

// Groups of one block, in order: each candidate alone, and a row kernel joined by the
// elementwise op right before it when that op feeds only the row kernel's input (the lowering
// computes it inside the rows). Loop and branch bodies are grouped the same way; a kiln.fused
// body belongs to its op.
void collect_groups(mlir::Block& block, std::vector<std::vector<mlir::Operation*>>& groups) {
  for (mlir::Operation& op : block) {
    if (!mlir::isa<ir::FusedOp>(op))
      for (mlir::Region& r : op.getRegions())
        for (mlir::Block& b : r) collect_groups(b, groups);
    if (!candidate(&op)) continue;
    mlir::Operation* prev = op.getPrevNode();
    if (is_row_kernel(&op) && prev && !groups.empty() && groups.back().size() == 1 &&
        groups.back()[0] == prev && is_elementwise(prev) &&
        op.getOperand(0).getDefiningOp() == prev && only_used_by(prev, &op)) {
      groups.back().push_back(&op);
      continue;
    }
    groups.push_back({&op});
  }
}

// The group as a module of its own: @forward(inputs) -> outputs over copies of its ops.
mlir::OwningOpRef<mlir::ModuleOp> outline(const GeneratedGroup& g) {
  mlir::Operation* first = g.ops.front();
  mlir::OpBuilder b(first->getContext());
  const mlir::Location loc = first->getLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  b.setInsertionPointToEnd(module->getBody());
  llvm::SmallVector<mlir::Type> ins, outs;
  for (mlir::Value v : g.inputs) ins.push_back(v.getType());
  for (mlir::Value v : g.outputs) outs.push_back(v.getType());
  auto fn = b.create<mlir::func::FuncOp>(loc, "forward", b.getFunctionType(ins, outs));
  mlir::Block* entry = fn.addEntryBlock();
  mlir::IRMapping map;
  for (size_t i = 0; i < g.inputs.size(); ++i) map.map(g.inputs[i], entry->getArgument(i));
  b.setInsertionPointToEnd(entry);
  for (mlir::Operation* op : g.ops)
    for (mlir::Value v : op->getOperands())
      if (is_none(v) && !map.contains(v)) map.map(v, b.clone(*v.getDefiningOp())->getResult(0));
  for (mlir::Operation* op : g.ops) {
    mlir::Operation* copy = b.clone(*op, map);
    copy->removeAttr(kSymbolAttr);
    copy->removeAttr("kiln.arena_offsets");
  }
  llvm::SmallVector<mlir::Value> results;
  for (mlir::Value v : g.outputs) results.push_back(map.lookup(v));
  b.create<mlir::func::ReturnOp>(loc, results);
  return module;
}

// A group's second entry point, where the product next to it can run it block by block (an
// elementwise chain alone in its group, its one float32 value of the product's shape):
// - the block epilogue of a conv2d / linear / matmul right before it (marked by
//   --kiln-fuse-block-epilogues; the product's value read by the chain alone, so mapped in
//   place): `epilogue_input` is that value's position among the group's inputs;
// - the block prologue of a linear / linear_fused / matmul by a [K, N] matrix right after it
//   (marked by --kiln-fuse-block-prologues; its value that product's input 0 and nothing else).
struct BlockForm {
  const char* attr = nullptr;  // kBlockSymbolAttr or kPrologueSymbolAttr; null: none
  const char* suffix = "";
  int epilogue_input = -1;
};

BlockForm block_form(const GeneratedGroup& g) {
  if (g.ops.size() != 1 || g.outputs.size() != 1) return {};
  mlir::Operation* chain = g.ops[0];
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(g.outputs[0].getType());
  if (!mlir::isa<ir::FusedOp>(chain) || !type || !type.getElementType().isF32()) return {};
  if (chain->hasAttr(ir::kBlockPrologueAttr)) {
    mlir::Value x = g.outputs[0];
    mlir::Operation* product = chain->getNextNode();
    if (!x.hasOneUse() || !product || *x.getUsers().begin() != product ||
        product->getOperand(0) != x)
      return {};
    bool takes = mlir::isa<ir::LinearOp, ir::LinearFusedOp>(product);
    if (mlir::isa<ir::MatmulOp>(product)) {
      auto rhs = mlir::dyn_cast<mlir::RankedTensorType>(product->getOperand(1).getType());
      takes = rhs && rhs.getRank() == 2;
    }
    return takes ? BlockForm{kPrologueSymbolAttr, "_prologue"} : BlockForm{};
  }
  mlir::Operation* product = chain->getPrevNode();
  if (!chain->hasAttr(ir::kBlockEpilogueAttr) || !product ||
      !mlir::isa<ir::Conv2dOp, ir::Conv2dFusedOp, ir::LinearOp, ir::LinearFusedOp, ir::MatmulOp>(
          product))
    return {};
  mlir::Value y = product->getResult(0);
  if (y.getType() != type) return {};
  for (mlir::Operation* user : y.getUsers())
    if (user != chain) return {};
  auto at = std::find(g.inputs.begin(), g.inputs.end(), y);
  if (at == g.inputs.end()) return {};
  return {kBlockSymbolAttr, "_block", static_cast<int>(at - g.inputs.begin())};
}

// The group's code as optimized LLVM IR in `ctx` (only its entry point global), or null when it
// cannot be lowered or calls a runtime kernel (`why` says which). With `form`, its block form
// (LowerOptions::block_epilogue_input / block_prologue), named SYMBOL + form->suffix.
std::unique_ptr<llvm::Module> compile_group(const GeneratedGroup& g, llvm::LLVMContext& ctx,
                                            llvm::TargetMachine& tm, std::string* why,
                                            const BlockForm* form = nullptr) {
  mlir::OwningOpRef<mlir::ModuleOp> module = outline(g);
  LowerOptions options;
  options.entry_name = g.symbol + (form ? form->suffix : "");
  options.vector_bits = vector_register_bits(tm);
  if (form) {
    options.block_epilogue_input = form->epilogue_input;
    options.block_prologue = form->epilogue_input < 0;
  }
  if (!lower_to_llvm_dialect(*module, options, why)) return nullptr;
  std::unique_ptr<llvm::Module> ir = translate_to_llvm_ir(*module, ctx, why);
  if (!ir) return nullptr;
  for (llvm::Function& f : *ir) {
    if (f.isDeclaration() && f.getName().starts_with("kiln_abi_") && !is_core_import(f.getName())) {
      *why = "calls the runtime kernel " + f.getName().str();
      return nullptr;
    }
    // A block form runs on the product's worker threads, where a failure it reported (or
    // anything it asked of the runtime) would go unseen: it calls nothing.
    if (form && f.isDeclaration() && f.getName().starts_with("kiln_abi_")) {
      *why = "its block form calls " + f.getName().str();
      return nullptr;
    }
  }
  optimize_llvm_module(*ir, tm, 3);
  for (llvm::Function& f : *ir)
    if (!f.isDeclaration() && f.getName() != options.entry_name)
      f.setLinkage(llvm::GlobalValue::InternalLinkage);
  for (llvm::GlobalVariable& v : ir->globals())
    if (!v.isDeclaration()) v.setLinkage(llvm::GlobalValue::InternalLinkage);
  return ir;
}

// Calls of the runtime's functions go through internal pointers that the exported
// `void kiln_code_bind(void* const* functions)` fills at load; returns their names in that order.
std::vector<std::string> bind_runtime_calls(llvm::Module& m) {
  llvm::LLVMContext& ctx = m.getContext();
  llvm::PointerType* ptr = llvm::PointerType::get(ctx, 0);
  std::vector<llvm::Function*> imported;
  for (llvm::Function& f : m)
    if (f.isDeclaration() && f.getName().starts_with("kiln_abi_")) imported.push_back(&f);
  std::vector<std::string> names;
  std::vector<llvm::GlobalVariable*> slots;
  for (llvm::Function* f : imported) {
    auto* slot =
        new llvm::GlobalVariable(m, ptr, /*isConstant=*/false, llvm::GlobalValue::InternalLinkage,
                                 llvm::ConstantPointerNull::get(ptr), "kiln.import");
    std::vector<llvm::Use*> uses;
    for (llvm::Use& u : f->uses()) uses.push_back(&u);
    for (llvm::Use* u : uses) {
      auto* call = llvm::dyn_cast<llvm::CallBase>(u->getUser());
      if (!call || !call->isCallee(u))
        throw AotError("generated code takes the address of " + f->getName().str() +
                       " (only calls can be bound)");
      llvm::IRBuilder<> b(call);
      call->setCalledOperand(b.CreateLoad(ptr, slot));
    }
    names.push_back(f->getName().str());
    slots.push_back(slot);
    f->eraseFromParent();
  }
  auto* bind =
      llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false),
                             llvm::GlobalValue::ExternalLinkage, "kiln_code_bind", m);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", bind));
  for (size_t i = 0; i < slots.size(); ++i) {
    llvm::Value* at = b.CreateConstInBoundsGEP1_64(ptr, bind->getArg(0), i);
    b.CreateStore(b.CreateLoad(ptr, at), slots[i]);
  }
  b.CreateRetVoid();
  return names;
}

std::vector<std::string> split_features(const std::string& list) {
  std::vector<std::string> out;
  for (size_t i = 0; i < list.size();) {
    const size_t j = std::min(list.find(',', i), list.size());
    if (j > i) out.push_back(list.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

Target native_code_target(const std::string& spec) {
  if (spec.empty() || spec == "host") return resolve_target("host");
  if (spec.rfind("x86-64", 0) == 0) return resolve_target("x86_64-linux-gnu", spec);
  if (spec == "aarch64") return resolve_target("aarch64-linux-gnu");
  const size_t colon = spec.find(':');
  if (colon != std::string::npos)
    return resolve_target(spec.substr(0, colon), spec.substr(colon + 1));
  return resolve_target(spec);
}

GeneratedGroup generated_group(mlir::Operation* first) {
  GeneratedGroup g;
  auto symbol = first->getAttrOfType<mlir::StringAttr>(kSymbolAttr);
  if (!symbol) return g;
  g.symbol = symbol.str();
  for (mlir::Operation* op = first;
       op && op->getAttrOfType<mlir::StringAttr>(kSymbolAttr) == symbol; op = op->getNextNode())
    g.ops.push_back(op);
  const std::set<mlir::Operation*> in_group(g.ops.begin(), g.ops.end());
  mlir::Block* block = first->getBlock();
  for (mlir::Operation* op : g.ops) {
    for (mlir::Value v : op->getOperands()) {
      if (in_group.count(v.getDefiningOp()) || is_none(v)) continue;  // none: made in the code
      if (std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end()) g.inputs.push_back(v);
    }
    for (mlir::Value r : op->getResults()) {
      bool used_after = false;
      for (mlir::Operation* user : r.getUsers())
        used_after |= !in_group.count(block->findAncestorOpInBlock(*user));
      if (used_after) g.outputs.push_back(r);
    }
  }
  return g;
}

std::vector<CodeBlob> compile_native_code(mlir::ModuleOp module,
                                          const std::vector<Target>& targets) {
  auto forward = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!forward) throw AotError("generated code: the module has no func.func @forward");
  forward.walk([](mlir::Operation* op) {
    op->removeAttr(kSymbolAttr);
    op->removeAttr(kBlockSymbolAttr);
    op->removeAttr(kPrologueSymbolAttr);
  });
  if (targets.empty()) return {};
  std::vector<std::vector<mlir::Operation*>> groups;
  collect_groups(forward.getBody().front(), groups);
  std::vector<mlir::Operation*> firsts;
  mlir::Builder b(module.getContext());
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto symbol = b.getStringAttr("kiln_gen_" + std::to_string(i));
    for (mlir::Operation* op : groups[i]) op->setAttr(kSymbolAttr, symbol);
    firsts.push_back(groups[i].front());
  }

  std::vector<CodeBlob> blobs;
  for (size_t t = 0; t < targets.size(); ++t) {
    llvm::LLVMContext ctx;
    std::unique_ptr<llvm::TargetMachine> tm = create_target_machine(targets[t], 3);
    auto code = std::make_unique<llvm::Module>("kiln_generated_code", ctx);
    code->setTargetTriple(tm->getTargetTriple().str());
    code->setDataLayout(tm->createDataLayout());
    CodeBlob blob;
    blob.target_triple = targets[t].triple;
    for (mlir::Operation* first : firsts) {
      const GeneratedGroup g = generated_group(first);
      if (g.ops.empty()) continue;  // left portable for the first target
      std::string why;
      std::unique_ptr<llvm::Module> ir = compile_group(g, ctx, *tm, &why);
      if (!ir && t == 0) {  // the group stays portable
        for (mlir::Operation* op : g.ops) op->removeAttr(kSymbolAttr);
        continue;
      }
      if (!ir)
        throw AotError("generated code: " + g.symbol + " compiled for " + targets[0].triple +
                       " but not for " + targets[t].triple + ": " + why);
      if (llvm::Linker::linkModules(*code, std::move(ir)))
        throw AotError("generated code: linking " + g.symbol + " failed");
      blob.symbols.push_back(g.symbol);
      // Its block form beside it, where the product next to it can run it (else the group
      // runs as its own instruction).
      const BlockForm form = block_form(g);
      if (!form.attr || (t > 0 && !first->hasAttr(form.attr))) continue;
      const std::string name = g.symbol + form.suffix;
      std::unique_ptr<llvm::Module> block = compile_group(g, ctx, *tm, &why, &form);
      if (!block && t == 0) continue;
      if (!block)
        throw AotError("generated code: " + name + " compiled for " + targets[0].triple +
                       " but not for " + targets[t].triple + ": " + why);
      if (llvm::Linker::linkModules(*code, std::move(block)))
        throw AotError("generated code: linking " + name + " failed");
      blob.symbols.push_back(name);
      first->setAttr(form.attr, mlir::StringAttr::get(module.getContext(), name));
    }
    if (blob.symbols.empty()) return {};  // nothing the compiler generates
    blob.imports = bind_runtime_calls(*code);
    std::vector<std::string> exports = blob.symbols;
    exports.push_back("kiln_code_bind");
    const std::string object = emit_object(*code, *tm, /*opt_level=*/0);  // optimized per group
    const std::string elf = link_code_object(object, targets[t], exports);
    blob.elf.assign(elf.begin(), elf.end());
    blob.cpu_features = split_features(checked_cpu_features(*tm));
    blobs.push_back(std::move(blob));
  }
  return blobs;
}

}  // namespace kiln::codegen

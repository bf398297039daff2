// Object emission for a target and the in-process ORC loader.

#include "kiln/codegen/jit_engine.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "lower/lowering.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace kiln::codegen {
namespace {
void init_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

std::unique_ptr<llvm::TargetMachine> make_target_machine(Target target, std::string* error) {
  init_llvm();
  const Target host = host_target();
  if (target.triple.empty()) target = host;
  std::string err;
  const llvm::Target* t = llvm::TargetRegistry::lookupTarget(target.triple, err);
  if (!t) {
    if (error) *error = "no LLVM target for " + target.triple + ": " + err;
    return nullptr;
  }
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(t->createTargetMachine(
      target.triple, target.cpu.empty() ? "generic" : target.cpu, target.features, options,
      llvm::Reloc::PIC_, std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  if (!tm && error) *error = "could not create a target machine for " + target.triple;
  return tm;
}
}  // namespace

bool entry_signature(mlir::ModuleOp module, EntrySignature* signature, std::string* error) {
  auto fn = module.lookupSymbol<mlir::func::FuncOp>("forward");
  if (!fn) {
    if (error) *error = "the module has no func.func @forward";
    return false;
  }
  auto spec = [&](mlir::Type t, BufferSpec* s) {
    auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(t);
    if (!tensor || !tensor.hasStaticShape() || detail::dtype_code(tensor.getElementType()) < 0) {
      return false;
    }
    s->dtype = detail::dtype_code(tensor.getElementType());
    s->sizes.assign(tensor.getShape().begin(), tensor.getShape().end());
    s->nbytes = detail::numel(s->sizes) * detail::element_bytes(tensor.getElementType());
    return true;
  };
  EntrySignature sig;
  for (mlir::Type t : fn.getFunctionType().getInputs()) {
    if (!spec(t, &sig.args.emplace_back())) {
      if (error) *error = "@forward has an argument that is not a static tensor";
      return false;
    }
  }
  for (mlir::Type t : fn.getFunctionType().getResults()) {
    if (!spec(t, &sig.results.emplace_back())) {
      if (error) *error = "@forward has a result that is not a static tensor";
      return false;
    }
  }
  *signature = std::move(sig);
  return true;
}

bool compile_to_object(mlir::ModuleOp module, const Target& target, const LowerOptions& options,
                       int opt_level, std::string* object, EntrySignature* signature,
                       std::string* error) {
  // KILN_CODEGEN_TIMING=1 prints the time of each phase to stderr.
  const bool timing = std::getenv("KILN_CODEGEN_TIMING") != nullptr;
  auto last = std::chrono::steady_clock::now();
  auto phase = [&](const char* name) {
    if (!timing) return;
    const auto now = std::chrono::steady_clock::now();
    std::fprintf(stderr, "kiln codegen: %-10s %7.1f ms\n", name,
                 std::chrono::duration<double, std::milli>(now - last).count());
    last = now;
  };
  std::unique_ptr<llvm::TargetMachine> tm = make_target_machine(target, error);
  if (!tm) return false;
  LowerOptions lower = options;
  if (lower.vector_bits == 0) lower.vector_bits = vector_register_bits(*tm);
  if (!lower_to_llvm_dialect(module, lower, error, signature)) return false;
  phase("lower");
  llvm::LLVMContext ctx;
  std::unique_ptr<llvm::Module> ir = translate_to_llvm_ir(module, ctx, error);
  if (!ir) return false;
  phase("translate");
  optimize_llvm_module(*ir, *tm, opt_level);
  phase("optimize");
  // KILN_CODEGEN_DUMP=file writes the optimized LLVM IR there (inspecting vectorization).
  if (const char* dump = std::getenv("KILN_CODEGEN_DUMP"); dump && *dump) {
    std::error_code ec;
    llvm::raw_fd_ostream out(dump, ec);
    if (!ec) ir->print(out, nullptr);
  }
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    if (error) *error = "the target cannot emit object files";
    return false;
  }
  pm.run(*ir);
  object->assign(buffer.begin(), buffer.end());
  phase("emit");
  return true;
}

std::string cache_key(const std::string& module_bytes, const Target& target,
                      const LowerOptions& options, int opt_level) {
  const Target t = target.triple.empty() ? host_target() : target;
  std::string salt = t.triple + "|" + t.cpu + "|" + t.features + "|" + options.entry_name + "|" +
                     std::to_string(options.parallel_min_elements) + "|" +
                     std::to_string(options.fuse_elementwise) + "|" +
                     std::to_string(options.vector_bits) + "|" + std::to_string(opt_level) +
                     "|kiln-codegen-abi-" + std::to_string(kAbiVersion) + "|kiln-codegen-rev-" +
                     std::to_string(kCodegenRevision);
  const uint64_t a = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t*>(module_bytes.data()), module_bytes.size()));
  const uint64_t b = llvm::xxh3_64bits(
      llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t*>(salt.data()), salt.size()));
  char text[40];
  std::snprintf(text, sizeof text, "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  return text;
}

struct JitEngine::Impl {
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::mutex mutex;
  int counter = 0;
};

JitEngine::JitEngine() : impl_(std::make_unique<Impl>()) {
  init_llvm();
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) {
    llvm::consumeError(jtmb.takeError());
    return;
  }
  auto jit = llvm::orc::LLJITBuilder().setJITTargetMachineBuilder(std::move(*jtmb)).create();
  if (!jit) {
    llvm::consumeError(jit.takeError());
    return;
  }
  impl_->jit = std::move(*jit);
}

JitEngine& JitEngine::instance() {
  static JitEngine* engine = new JitEngine();  // never destroyed: code may outlive static dtors
  return *engine;
}

JitEngine::Loaded JitEngine::load(const std::string& object, const std::string& entry,
                                  const std::vector<std::pair<std::string, void*>>& symbols,
                                  std::string* error) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  llvm::orc::JITDylib* dylib = nullptr;
  auto fail = [&](llvm::Error e) -> Loaded {
    if (error) *error = llvm::toString(std::move(e));
    if (dylib) llvm::consumeError(impl_->jit->getExecutionSession().removeJITDylib(*dylib));
    return {};
  };
  if (!impl_->jit) return fail(llvm::createStringError("the ORC JIT could not start"));
  llvm::orc::LLJIT& jit = *impl_->jit;
  auto jd = jit.createJITDylib("kiln_" + std::to_string(impl_->counter++));
  if (!jd) return fail(jd.takeError());
  dylib = &*jd;
  auto process = llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
      jit.getDataLayout().getGlobalPrefix());
  if (!process) return fail(process.takeError());
  jd->addGenerator(std::move(*process));
  llvm::orc::SymbolMap map;
  for (const auto& [name, address] : symbols) {
    map[jit.mangleAndIntern(name)] = llvm::orc::ExecutorSymbolDef(
        llvm::orc::ExecutorAddr::fromPtr(address), llvm::JITSymbolFlags::Exported);
  }
  if (auto e = jd->define(llvm::orc::absoluteSymbols(std::move(map)))) return fail(std::move(e));
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(object, "kiln_object");
  if (auto e = jit.addObjectFile(*jd, std::move(buffer))) return fail(std::move(e));
  auto sym = jit.lookup(*jd, entry);
  if (!sym) return fail(sym.takeError());
  Loaded out;
  out.entry = sym->toPtr<void*>();
  out.dylib = dylib;
  if (auto rel = jit.lookup(*jd, entry + "_release"))
    out.release = rel->toPtr<void*>();
  else
    llvm::consumeError(rel.takeError());  // objects without prepared call sites may lack it
  return out;
}

void JitEngine::unload(const Loaded& code) {
  if (!code.dylib) return;
  if (code.release) reinterpret_cast<void (*)()>(code.release)();
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto* jd = static_cast<llvm::orc::JITDylib*>(code.dylib);
  llvm::consumeError(impl_->jit->getExecutionSession().removeJITDylib(*jd));
}

}  // namespace kiln::codegen

// The lowering pipeline: kiln → loops + runtime calls (lower/), then scf → cf, f32 math →
// the runtime's vector math (lower/f32_math.h: vectorizable, no libm calls but sinf / cosf),
// everything → LLVM dialect → LLVM IR, and LLVM's O3 pipeline for the host (or a given) target.

#include "kiln/codegen/lower.h"

#include "llvm/IR/Module.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Target/TargetMachine.h"
#include "lower/f32_math.h"
#include "lower/lowering.h"
#include "lower/vectorize.h"
#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Conversion/VectorToSCF/VectorToSCF.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kiln::codegen {

void register_lowering_dialects(mlir::DialectRegistry& registry) {
  registry.insert<mlir::LLVM::LLVMDialect, mlir::scf::SCFDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::func::FuncDialect, mlir::cf::ControlFlowDialect>();
  detail::register_vector_dialects(registry);
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
}

bool lowers_op(std::string_view op_name) {
  llvm::StringRef name(op_name.data(), op_name.size());
  if (name == "kiln.none" || name == "kiln.constant" || name == "kiln.yield") return true;
  if (detail::elementwise_ops().contains(name) || detail::view_ops().contains(name)) return true;
  return name.consume_front("kiln.") && detail::has_abi_kernel(name);
}

bool lower_to_loops(mlir::ModuleOp module, const LowerOptions& options, std::string* error,
                    EntrySignature* signature) {
  mlir::DialectRegistry registry;
  register_lowering_dialects(registry);
  module.getContext()->appendDialectRegistry(registry);
  detail::Lowering lowering(module, options);
  return lowering.run(error, signature);
}

namespace {
std::string diagnostics_of(mlir::MLIRContext* ctx, const std::function<bool()>& fn, bool* ok) {
  std::string text;
  mlir::ScopedDiagnosticHandler handler(ctx, [&](mlir::Diagnostic& d) {
    text += d.str() + "\n";
    return mlir::success();
  });
  *ok = fn();
  return text;
}

bool loops_to_llvm(mlir::ModuleOp module) {
  mlir::MLIRContext* ctx = module.getContext();
  {
    // The vector kernels' transfers (to 1-D loads, masked or strided ones to loops), their
    // tiles' affine index arithmetic, then every loop to branches.
    mlir::PassManager pm(ctx);
    pm.addPass(mlir::createConvertVectorToSCFPass());
    pm.addPass(mlir::createLowerAffinePass());
    pm.addPass(mlir::createConvertSCFToCFPass());
    if (mlir::failed(pm.run(module))) return false;
  }
  {
    // f32 exp, log, log1p, tanh, erf as the runtime computes them (vectorizable, no libm call);
    // not MLIR's polynomial approximations (lower/f32_math.h says why). sin and cos stay calls of
    // sinf / cosf.
    mlir::RewritePatternSet patterns(ctx);
    detail::populate_f32_math_patterns(patterns);
    if (mlir::failed(mlir::applyPatternsAndFoldGreedily(module, std::move(patterns)))) {
      return false;
    }
  }
  {
    // Vector and memref ops (the vector kernels) to the LLVM dialect first: the memref
    // descriptors the kernels built from raw pointers fold back into them.
    mlir::PassManager pm(ctx);
    pm.addPass(mlir::memref::createExpandStridedMetadataPass());
    pm.addPass(mlir::createLowerAffinePass());
    // Reductions reassociate (the row kernels' sums are declared reassociable).
    mlir::ConvertVectorToLLVMPassOptions vector_options;
    vector_options.reassociateFPReductions = true;
    pm.addPass(mlir::createConvertVectorToLLVMPass(vector_options));
    pm.addPass(mlir::createFinalizeMemRefToLLVMConversionPass());
    if (mlir::failed(pm.run(module))) return false;
  }
  mlir::LLVMTypeConverter converter(ctx);
  mlir::RewritePatternSet patterns(ctx);
  mlir::arith::populateArithToLLVMConversionPatterns(converter, patterns);
  mlir::populateMathToLLVMConversionPatterns(converter, patterns);
  mlir::cf::populateControlFlowToLLVMConversionPatterns(converter, patterns);
  mlir::populateFuncToLLVMConversionPatterns(converter, patterns);
  mlir::LLVMConversionTarget target(*ctx);
  target.addLegalOp<mlir::ModuleOp>();
  if (mlir::failed(mlir::applyFullConversion(module, target, std::move(patterns)))) return false;
  mlir::PassManager pm(ctx);
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  return mlir::succeeded(pm.run(module));
}
}  // namespace

bool lower_to_llvm_dialect(mlir::ModuleOp module, const LowerOptions& options, std::string* error,
                           EntrySignature* signature) {
  if (!lower_to_loops(module, options, error, signature)) return false;
  if (!detail::vectorize_kernels(module, error)) return false;
  bool ok = false;
  std::string diags = diagnostics_of(
      module.getContext(), [&] { return loops_to_llvm(module); }, &ok);
  if (!ok && error) *error = "lowering to the LLVM dialect failed (internal error):\n" + diags;
  return ok;
}

std::unique_ptr<llvm::Module> translate_to_llvm_ir(mlir::ModuleOp module, llvm::LLVMContext& ctx,
                                                   std::string* error) {
  mlir::DialectRegistry registry;
  register_lowering_dialects(registry);
  module.getContext()->appendDialectRegistry(registry);
  std::unique_ptr<llvm::Module> out;
  bool ok = false;
  std::string diags = diagnostics_of(
      module.getContext(),
      [&] {
        out = mlir::translateModuleToLLVMIR(module, ctx, "kiln");
        return out != nullptr;
      },
      &ok);
  if (!ok && error) *error = "translation to LLVM IR failed:\n" + diags;
  return out;
}

void optimize_llvm_module(llvm::Module& module, llvm::TargetMachine& tm, int opt_level) {
  module.setDataLayout(tm.createDataLayout());
  module.setTargetTriple(tm.getTargetTriple().str());
  // Every function is compiled for the target's CPU and features (vector width, FMA).
  for (llvm::Function& f : module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", tm.getTargetCPU());
    if (!tm.getTargetFeatureString().empty()) {
      f.addFnAttr("target-features", tm.getTargetFeatureString());
    }
  }
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions tuning;
  tuning.LoopVectorization = opt_level >= 2;
  tuning.SLPVectorization = opt_level >= 2;
  llvm::PassBuilder pb(&tm, tuning);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  const llvm::OptimizationLevel level = opt_level >= 3   ? llvm::OptimizationLevel::O3
                                        : opt_level == 2 ? llvm::OptimizationLevel::O2
                                        : opt_level == 1 ? llvm::OptimizationLevel::O1
                                                         : llvm::OptimizationLevel::O0;
  llvm::ModulePassManager mpm = level == llvm::OptimizationLevel::O0
                                    ? pb.buildO0DefaultPipeline(level)
                                    : pb.buildPerModuleDefaultPipeline(level);
  mpm.run(module, mam);
}

namespace {
// kiln-opt passes: the same lowering as the JIT, stopping at loops (the vector kernels as linalg
// on tensors), at vectors (tiled, vectorized, bufferized) or at the LLVM dialect. The vector
// width is an option (0: scalar loops for LLVM's vectorizer), never the host's.
enum class Stage { Loops, Vectors, LLVM };
template <Stage S>
struct LowerPass : public mlir::PassWrapper<LowerPass<S>, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LowerPass)
  LowerPass() = default;
  LowerPass(const LowerPass& other)
      : mlir::PassWrapper<LowerPass<S>, mlir::OperationPass<mlir::ModuleOp>>(other) {}
  llvm::StringRef getArgument() const override {
    return S == Stage::LLVM      ? "kiln-lower-to-llvm"
           : S == Stage::Vectors ? "kiln-lower-to-vectors"
                                 : "kiln-lower-to-loops";
  }
  llvm::StringRef getDescription() const override {
    return S == Stage::LLVM ? "Lower @forward to an LLVM-dialect entry point (kiln_entry)"
           : S == Stage::Vectors
               ? "Lower @forward to loops, runtime calls and bufferized vector kernels"
               : "Lower @forward to loops and runtime calls (kiln_entry), before LLVM";
  }
  void getDependentDialects(mlir::DialectRegistry& registry) const override {
    register_lowering_dialects(registry);
  }
  void runOnOperation() override {
    std::string error;
    LowerOptions options;
    options.vector_bits = vector_bits;
    bool ok = false;
    if (S == Stage::LLVM) {
      ok = lower_to_llvm_dialect(this->getOperation(), options, &error);
    } else {
      ok = lower_to_loops(this->getOperation(), options, &error);
      if (ok && S == Stage::Vectors) ok = detail::vectorize_kernels(this->getOperation(), &error);
    }
    if (!ok) {
      this->getOperation().emitError(error);
      this->signalPassFailure();
    }
  }
  mlir::Pass::Option<int> vector_bits{
      *this, "vector-bits",
      llvm::cl::desc("Vector register width the elementwise kernels are tiled for (0: scalar "
                     "loops)"),
      llvm::cl::init(0)};
};
}  // namespace

void register_lowering_passes() {
  mlir::PassRegistration<LowerPass<Stage::Loops>>();
  mlir::PassRegistration<LowerPass<Stage::Vectors>>();
  mlir::PassRegistration<LowerPass<Stage::LLVM>>();
}

}  // namespace kiln::codegen

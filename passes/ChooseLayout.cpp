// --kiln-choose-layout: picks the activation layout for convolutions by what the runtime's conv
// kernels run fastest, and would insert layout conversions only at the graph's boundaries.
//
// Today the decision is NCHW everywhere, and the pass inserts nothing: the runtime's conv2d
// (runtime/include/kiln/runtime/kernels/conv.h) implements NCHW input / OIHW weight only (1x1 as a
// direct GEMM, kxk via a column-tiled im2col into the GEMM, depthwise as a direct kernel), so
// there is no NHWC or blocked kernel to be faster. The pass records the decision as the func
// attribute `kiln.conv_layout = "nchw"` so the compiler and `kiln inspect` can report it; when the
// runtime gains an NHWC/blocked kernel that bench/bench_conv shows faster, this pass is where the
// choice and the boundary transposes go. (Between consecutive channels-last kiln.mbconv blocks
// --kiln-mbconv-channels-last already hands activations over NHWC, flagged on the blocks; every
// other conv still reads and writes NCHW.)

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

struct ChooseLayoutPass
    : mlir::PassWrapper<ChooseLayoutPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ChooseLayoutPass)
  llvm::StringRef getArgument() const override { return "kiln-choose-layout"; }
  llvm::StringRef getDescription() const override {
    return "Choose the conv activation layout (NCHW: the only layout the runtime's kernels run)";
  }
  void runOnOperation() override {
    bool has_conv = false;
    getOperation().walk([&](mlir::Operation* op) {
      has_conv |= mlir::isa<ir::Conv2dOp, ir::Conv2dFusedOp, ir::Conv2dAvgpoolOp, ir::MbconvOp,
                            ir::Conv1dOp>(op);
    });
    if (has_conv) {
      getOperation()->setAttr("kiln.conv_layout", mlir::StringAttr::get(&getContext(), "nchw"));
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_choose_layout_pass() {
  return std::make_unique<ChooseLayoutPass>();
}

}  // namespace kiln::passes

// --kiln-mbconv-channels-last: consecutive kiln.mbconv blocks whose recorded strategy is
// channels_last (--kiln-fuse-mbconv's choice for small maps: MobileNetV2's 28x28, 14x14 and 7x7
// blocks) pass their activations channels-last: the producer gets `channels_last_out`, each
// consumer `channels_last_in`. The producer's projection then writes [N, Ho, Wo, P] directly
// instead of transposing it back into NCHW, and the consumer's expansion reads it as the GEMM's
// row-major left operand (without an expansion, as the depthwise input itself). The tensor keeps
// its [N, C, H, W] type: only these blocks ever read it, which is what this pass checks.
//
// A block's result goes channels-last when every use is the input of such a block, or the
// residual of a block whose input is the same value and whose own result goes channels-last (a
// residual is added in the output's layout). A block with a residual outputs channels-last only
// when that residual is its input and arrives channels-last. Iterated to a fixed point.

#include "llvm/ADT/DenseSet.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

constexpr unsigned kInput = 0, kResidual = 7;

bool is_mbconv(mlir::Operation* op) {
  return mlir::isa_and_nonnull<ir::MbconvOp>(op);
}

// The strategy --kiln-fuse-mbconv recorded.
bool runs_channels_last(mlir::Operation* op) {
  return mlir::cast<ir::MbconvOp>(op).getStrategy() == ir::MBConvStrategy::ChannelsLast;
}

mlir::Value residual_of(mlir::Operation* op) {
  mlir::Value r = op->getOperand(kResidual);
  return mlir::isa<mlir::NoneType>(r.getType()) ? mlir::Value() : r;
}

struct MBConvChannelsLastPass
    : mlir::PassWrapper<MBConvChannelsLastPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MBConvChannelsLastPass)
  llvm::StringRef getArgument() const override { return "kiln-mbconv-channels-last"; }
  llvm::StringRef getDescription() const override {
    return "Pass activations channels-last between consecutive channels-last kiln.mbconv blocks";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> blocks;
    getOperation().walk([&](mlir::Operation* op) {
      if (is_mbconv(op) && runs_channels_last(op)) blocks.push_back(op);
    });
    llvm::DenseSet<mlir::Operation*> candidate(blocks.begin(), blocks.end());
    llvm::DenseSet<mlir::Operation*> out_cl(blocks.begin(), blocks.end());  // shrinks
    auto arrives_cl = [&](mlir::Value v) { return out_cl.contains(v.getDefiningOp()); };
    for (bool changed = true; changed;) {
      changed = false;
      for (mlir::Operation* a : blocks) {
        if (!out_cl.contains(a)) continue;
        mlir::Value r = a->getResult(0);
        bool ok = !r.use_empty();
        // Its own residual must be its input, arriving channels-last.
        if (mlir::Value res = residual_of(a)) ok = res == a->getOperand(kInput) && arrives_cl(res);
        for (mlir::OpOperand& use : r.getUses()) {
          mlir::Operation* u = use.getOwner();
          if (!ok) break;
          if (!candidate.contains(u) || u->getBlock() != a->getBlock()) {
            ok = false;
          } else if (use.getOperandNumber() == kInput) {
            // A consumer with a residual adds it in its output's layout: it must go channels-last.
            if (residual_of(u)) ok = residual_of(u) == r && out_cl.contains(u);
          } else if (use.getOperandNumber() == kResidual) {
            ok = u->getOperand(kInput) == r && out_cl.contains(u);
          } else {
            ok = false;  // a weight
          }
        }
        if (!ok) {
          out_cl.erase(a);
          changed = true;
        }
      }
    }
    mlir::OpBuilder b(&getContext());
    for (mlir::Operation* op : blocks) {
      if (out_cl.contains(op)) op->setAttr("channels_last_out", b.getBoolAttr(true));
      if (arrives_cl(op->getOperand(kInput))) op->setAttr("channels_last_in", b.getBoolAttr(true));
    }
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_mbconv_channels_last_pass() {
  return std::make_unique<MBConvChannelsLastPass>();
}

}  // namespace kiln::passes

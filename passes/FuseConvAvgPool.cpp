// --kiln-fuse-conv-avgpool: a classifier head's
//   y = kiln.conv2d(_fused)(x, w, bias)            no residual, y used by the pool only
//   p = kiln.adaptive_avg_pool2d(y) {output_size = [1, 1]}
// becomes p = kiln.conv2d_avgpool(x, w, bias): the runtime averages each image's product as it
// leaves the GEMM (kernels/conv.h conv2d_avgpool_out), so y is never stored as a map, nor
// transposed back into NCHW when the GEMM runs with the channels across its lanes, nor read a
// second time by the pool. MobileNetV2's head (320 -> 1280 at 7x7, then the pool), bench_conv's
// HeadAvgPool rows on Zen 3, 2 threads: 0.93x the two kernels at batch 1 and at batch 8.
//
// A conv with a residual stays as it is (the residual would have to be added at every position
// before the activation); so do non-float32 ones.

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

bool is_static_f32_4d(mlir::Value v) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t && t.getElementType().isF32() && t.hasStaticShape() && t.getRank() == 4;
}

bool fuse(mlir::Operation* pool) {
  auto size = pool->getAttrOfType<mlir::DenseI64ArrayAttr>("output_size");
  if (!size || size.asArrayRef() != llvm::ArrayRef<int64_t>{1, 1}) return false;
  mlir::Value y = pool->getOperand(0);
  mlir::Operation* conv = y.getDefiningOp();
  if (!conv || !y.hasOneUse() || conv->getBlock() != pool->getBlock()) return false;
  const bool fused = mlir::isa<ir::Conv2dFusedOp>(conv);
  if (!fused && !mlir::isa<ir::Conv2dOp>(conv)) return false;
  if (fused && !mlir::isa<mlir::NoneType>(conv->getOperand(3).getType())) return false;
  if (!is_static_f32_4d(conv->getOperand(0)) || !is_static_f32_4d(conv->getOperand(1)) ||
      !is_static_f32_4d(y) || !is_static_f32_4d(pool->getResult(0)))
    return false;
  auto map = mlir::cast<mlir::RankedTensorType>(y.getType()).getShape();
  if (map[2] == 0 || map[3] == 0) return false;  // the mean of an empty plane: the pool's error

  mlir::OpBuilder b(pool);
  mlir::OperationState state(conv->getLoc(), "kiln.conv2d_avgpool");
  state.addOperands({conv->getOperand(0), conv->getOperand(1), conv->getOperand(2)});
  for (const char* a : {"stride", "padding", "dilation", "groups"})
    state.addAttribute(a, conv->getAttr(a));
  state.addAttribute("activation", fused ? conv->getAttr("activation") : b.getI64IntegerAttr(0));
  state.addAttribute("clamp_min", fused ? conv->getAttr("clamp_min") : b.getF64FloatAttr(0));
  state.addAttribute("clamp_max", fused ? conv->getAttr("clamp_max") : b.getF64FloatAttr(0));
  state.addTypes(pool->getResult(0).getType());
  mlir::Operation* head = b.create(state);
  pool->getResult(0).replaceAllUsesWith(head->getResult(0));
  pool->erase();
  conv->erase();
  return true;
}

struct FuseConvAvgPoolPass
    : mlir::PassWrapper<FuseConvAvgPoolPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseConvAvgPoolPass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-conv-avgpool"; }
  llvm::StringRef getDescription() const override {
    return "Fuse a conv without residual and its global average pool into kiln.conv2d_avgpool";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> pools;
    getOperation().walk([&](mlir::Operation* op) {
      if (mlir::isa<ir::AdaptiveAvgPool2dOp>(op)) pools.push_back(op);
    });
    for (mlir::Operation* op : pools) fuse(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_conv_avgpool_pass() {
  return std::make_unique<FuseConvAvgPoolPass>();
}

}  // namespace kiln::passes

// --kiln-fuse-qconv-add: a residual block's int8 convolution and add,
//   c = kiln.qconv2d(x, xs, xz, w, ws, wz, bias, cs, cz) {conv2d's, dtype = D, relu = r}
//   y = kiln.qadd(c, cs, cz, other, os, oz, ys, yz) {dtype = E, relu = s}      c used only here
// (c as either operand: the float add of the two dequantized values is commutative, so the
// bytes are the same) becomes
//   y = kiln.qconv2d_add(x, xs, xz, w, ws, wz, bias, cs, cz, other, os, oz, ys, yz)
//       {conv2d's, conv_dtype = D, relu = r, dtype = E, add_relu = s}
// whose kernel adds each image's output as soon as the convolution has written it (ResNet's and
// MobileNetV2's int8 residual adds: one pass over the bytes and one buffer fewer). The add must
// read c at the convolution's own scale and zero point (the same values, as --kiln-fold-qdq
// makes them); anything else stays as it is.

#include "ConstantData.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/Pass/Pass.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

bool same_values(mlir::Value a, mlir::Value b) {
  if (a == b) return true;
  auto va = constant_values(a), vb = constant_values(b);
  return va && vb && *va == *vb;
}

// Whether `user` is v's only user but for dead ones (--kiln-fold-qdq leaves a dequantize of a
// layer's bytes without users when it folds the ops that read it), which it erases.
bool only_live_user(mlir::Value v, mlir::Operation* user) {
  llvm::SmallVector<mlir::Operation*> dead;
  for (mlir::Operation* u : v.getUsers()) {
    if (u == user) continue;
    if (!mlir::isOpTriviallyDead(u)) return false;
    dead.push_back(u);
  }
  for (mlir::Operation* u : dead) u->erase();
  return true;
}

bool fuse(ir::QaddOp add) {
  // Operands of kiln.qadd: input 0-2, other 3-5, output 6-7.
  for (unsigned side : {0u, 3u}) {
    mlir::Value c = add->getOperand(side);
    auto conv = c.getDefiningOp<ir::Qconv2dOp>();
    if (!conv || conv->getBlock() != add->getBlock() || !only_live_user(c, add)) continue;
    // kiln.qconv2d's output scale and zero point: operands 7 and 8.
    if (!same_values(add->getOperand(side + 1), conv->getOperand(7)) ||
        !same_values(add->getOperand(side + 2), conv->getOperand(8)))
      continue;
    const unsigned other = side == 0 ? 3 : 0;
    mlir::OpBuilder b(add);
    mlir::OperationState state(add->getLoc(), ir::Qconv2dAddOp::getOperationName());
    state.addOperands(conv->getOperands());
    state.addOperands({add->getOperand(other), add->getOperand(other + 1),
                       add->getOperand(other + 2), add->getOperand(6), add->getOperand(7)});
    for (const char* a : {"stride", "padding", "dilation", "groups", "relu"})
      state.addAttribute(a, conv->getAttr(a));
    state.addAttribute("conv_dtype", conv->getAttr("dtype"));
    state.addAttribute("dtype", add->getAttr("dtype"));
    state.addAttribute("add_relu", add->getAttr("relu"));
    state.addTypes(add.getResult().getType());
    mlir::Operation* fused = b.create(state);
    add.getResult().replaceAllUsesWith(fused->getResult(0));
    add->erase();
    conv->erase();
    return true;
  }
  return false;
}

struct FuseQConvAddPass
    : mlir::PassWrapper<FuseQConvAddPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseQConvAddPass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-qconv-add"; }
  llvm::StringRef getDescription() const override {
    return "Fuse an int8 convolution and the residual add of its result into kiln.qconv2d_add";
  }
  void runOnOperation() override {
    llvm::SmallVector<ir::QaddOp> adds;
    getOperation().walk([&](ir::QaddOp op) { adds.push_back(op); });
    for (ir::QaddOp op : adds) fuse(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_qconv_add_pass() {
  return std::make_unique<FuseQConvAddPass>();
}

}  // namespace kiln::passes

// --kiln-recognize-gelu: GELU written out in elementwise ops, as ONNX exports before opset 20
// give it (x * 0.5 * (1 + erf(x / sqrt(2))), the factors in any order and grouping, the inner
// scale as a division by sqrt(2) or a product by 1/sqrt(2)), becomes one kiln.gelu: then
// --kiln-fuse-epilogues folds it into the linear before it, where five separate kernels each
// passed over the tensor.
//
// Every intermediate must be used only by the chain, all of one type (no broadcast of x), and
// the constants single values within 1e-6 of 0.5, 1 and sqrt(2).

#include <cmath>

#include "ConstantData.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"
#include "llvm/ADT/DenseSet.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

namespace kiln::passes {
namespace {

bool scalar_near(mlir::Value v, double want) {
  auto values = constant_values(v);
  return values && values->size() == 1 && std::abs(values->front() - want) <= 1e-6 * want;
}

// The factors of a product tree rooted at `v`: mul operands, descending through muls used only
// by the tree.
void factors(mlir::Value v, bool root, llvm::SmallVectorImpl<mlir::Value>& out,
             llvm::SmallVectorImpl<mlir::Operation*>& chain) {
  auto mul = v.getDefiningOp<ir::MulOp>();
  if (mul && (root || v.hasOneUse()) && out.size() < 4) {
    chain.push_back(mul);
    factors(mul.getLhs(), false, out, chain);
    factors(mul.getRhs(), false, out, chain);
    return;
  }
  out.push_back(v);
}

// 1 + erf(x / sqrt(2)) (or x * 1/sqrt(2), either order of the add): x, else null.
mlir::Value erf_term(mlir::Value v, llvm::SmallVectorImpl<mlir::Operation*>& chain) {
  auto add = v.getDefiningOp<ir::AddOp>();
  if (!add || !v.hasOneUse()) return {};
  if (auto alpha = add->getAttrOfType<mlir::FloatAttr>("alpha");
      alpha && alpha.getValueAsDouble() != 1.0)
    return {};
  for (unsigned i = 0; i < 2; ++i) {
    mlir::Value e = add->getOperand(i);
    auto erf = e.getDefiningOp<ir::ErfOp>();
    if (!erf || !e.hasOneUse() || !scalar_near(add->getOperand(1 - i), 1.0)) continue;
    mlir::Value s = erf.getInput();
    mlir::Operation* scale = s.getDefiningOp();
    if (!scale || !s.hasOneUse() || scale->getNumOperands() != 2) continue;
    mlir::Value x;
    if (mlir::isa<ir::DivOp>(scale) && scalar_near(scale->getOperand(1), std::sqrt(2.0)))
      x = scale->getOperand(0);
    if (mlir::isa<ir::MulOp>(scale))
      for (unsigned j = 0; j < 2 && !x; ++j)
        if (scalar_near(scale->getOperand(1 - j), 1.0 / std::sqrt(2.0))) x = scale->getOperand(j);
    if (!x || x.getType() != v.getType()) continue;
    chain.append({add, erf, scale});
    return x;
  }
  return {};
}

bool recognize(ir::MulOp root, llvm::DenseSet<mlir::Operation*>& erased) {
  mlir::Value y = root.getResult();
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(y.getType());
  if (!type || !type.getElementType().isF32()) return false;
  llvm::SmallVector<mlir::Value, 4> terms;
  llvm::SmallVector<mlir::Operation*, 8> chain;
  factors(y, true, terms, chain);
  if (terms.size() != 3) return false;
  mlir::Value x, half, erf_x;
  for (mlir::Value t : terms) {
    if (!half && scalar_near(t, 0.5)) {
      half = t;
    } else if (mlir::Value inner; !erf_x && (inner = erf_term(t, chain))) {
      erf_x = inner;
    } else if (!x) {
      x = t;
    } else {
      return false;
    }
  }
  if (!half || !erf_x || x != erf_x || x.getType() != y.getType()) return false;

  mlir::OpBuilder b(root);
  mlir::OperationState state(root.getLoc(), "kiln.gelu");
  state.addOperands({x});
  state.addAttribute("approximate", b.getBoolAttr(false));
  state.addTypes(y.getType());
  mlir::Operation* gelu = b.create(state);
  erased.insert(chain.begin(), chain.end());
  y.replaceAllUsesWith(gelu->getResult(0));
  // The chain from the root down: each op is used only by ops erased before it.
  for (mlir::Operation* op : chain) op->erase();
  return true;
}

struct RecognizeGeluPass
    : mlir::PassWrapper<RecognizeGeluPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(RecognizeGeluPass)
  llvm::StringRef getArgument() const override { return "kiln-recognize-gelu"; }
  llvm::StringRef getDescription() const override {
    return "x * 0.5 * (1 + erf(x / sqrt(2))) written out in elementwise ops becomes kiln.gelu";
  }
  void runOnOperation() override {
    // Roots from the end, so that a product inside a larger one is not taken as a root first.
    llvm::SmallVector<ir::MulOp> muls;
    getOperation().walk([&](ir::MulOp op) { muls.push_back(op); });
    llvm::DenseSet<mlir::Operation*> erased;
    for (auto it = muls.rbegin(); it != muls.rend(); ++it)
      if (!erased.contains(it->getOperation())) recognize(*it, erased);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_recognize_gelu_pass() {
  return std::make_unique<RecognizeGeluPass>();
}

}  // namespace kiln::passes

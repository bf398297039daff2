// --kiln-fuse-epilogues: conv2d and linear absorb what follows them into the runtime's fused
// epilogue, out = act(op(x, W) + bias + residual), as kiln.conv2d_fused / kiln.linear_fused.
// Walking down from the op while the current value has exactly one use, in this order:
//   1. add of a constant per-channel vector (a bias add written as an op) -> merged into bias;
//   2. add(cur, r) / add(r, cur) with alpha 1 and r of exactly cur's type -> residual r (the
//      ResNet pattern relu(bn(conv(x)) + identity) once bn is folded);
//   3. one activation: relu, clamp(0, 6) = relu6 (MobileNet's ReLU6), any other clamp, gelu
//      (erf or tanh form), silu, sigmoid, tanh.
// The fused op replaces the last absorbed op, where every operand it reads is already defined.
// A conv/linear that absorbs nothing stays as it is. Activation numbers are the runtime's
// kernels::Activation enum.

#include <cmath>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

#include "ConstantData.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

namespace kiln::passes {
namespace {

enum Activation : int64_t {
  kNone,
  kRelu,
  kRelu6,
  kClamp,
  kGelu,
  kGeluTanh,
  kSilu,
  kSigmoid,
  kTanh
};

struct Epilogue {
  mlir::Value bias, residual;
  std::vector<double> bias_add;  // accumulated constant bias adds (empty: none)
  int64_t activation = kNone;
  double clamp_min = 0, clamp_max = 0;
};

// The single user of `v`, or null.
mlir::Operation* only_user(mlir::Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

// Per-channel values of a constant that broadcasts along the channel dim only: [C], [C,1,1] or
// [1,C,1,1] for conv (rank-4 output), [C] or [1,C] for linear.
std::optional<std::vector<double>> channel_vector(mlir::Value v, int64_t channels, bool conv) {
  auto type = mlir::cast<mlir::RankedTensorType>(v.getType());
  llvm::ArrayRef<int64_t> s = type.getShape();
  const bool ok =
      conv ? (s == llvm::ArrayRef<int64_t>{channels, 1, 1} ||
              s == llvm::ArrayRef<int64_t>{1, channels, 1, 1})
           : (s == llvm::ArrayRef<int64_t>{channels} || s == llvm::ArrayRef<int64_t>{1, channels});
  if (!ok) return std::nullopt;
  return constant_values(v);
}

std::optional<std::pair<int64_t, std::pair<double, double>>> activation_of(mlir::Operation* op) {
  using R = std::pair<int64_t, std::pair<double, double>>;
  if (mlir::isa<ir::ReluOp>(op)) return R{kRelu, {0, 0}};
  if (mlir::isa<ir::SiluOp>(op)) return R{kSilu, {0, 0}};
  if (mlir::isa<ir::SigmoidOp>(op)) return R{kSigmoid, {0, 0}};
  if (mlir::isa<ir::TanhOp>(op)) return R{kTanh, {0, 0}};
  if (auto g = mlir::dyn_cast<ir::GeluOp>(op))
    return R{g.getApproximate() ? kGeluTanh : kGelu, {0, 0}};
  if (auto c = mlir::dyn_cast<ir::ClampOp>(op)) {
    const double lo = c.getMin().convertToDouble(), hi = c.getMax().convertToDouble();
    if (lo == 0.0 && hi == 6.0) return R{kRelu6, {0, 6}};
    if (lo == 0.0 && hi == INFINITY) return R{kRelu, {0, 0}};
    return R{kClamp, {lo, hi}};
  }
  return std::nullopt;
}

bool fuse(mlir::Operation* root) {
  const bool conv = mlir::isa<ir::Conv2dOp>(root);
  auto type = mlir::cast<mlir::RankedTensorType>(root->getResult(0).getType());
  const int64_t channels = conv ? type.getDimSize(1) : type.getShape().back();
  if (!mlir::isa<mlir::FloatType>(type.getElementType())) return false;
  Epilogue e;
  e.bias = root->getOperand(2);
  mlir::Value cur = root->getResult(0);
  llvm::SmallVector<mlir::Operation*> absorbed;
  while (mlir::Operation* user = only_user(cur)) {
    if (user->getNumResults() != 1 || user->getResult(0).getType() != cur.getType()) break;
    if (auto add = mlir::dyn_cast<ir::AddOp>(user)) {
      if (e.activation != kNone || add.getAlpha().convertToDouble() != 1.0) break;
      mlir::Value other = add.getLhs() == cur ? add.getRhs() : add.getLhs();
      if (other == cur) break;
      if (!e.residual && e.bias_add.empty()) {
        if (auto vec = channel_vector(other, channels, conv)) {
          e.bias_add = *vec;
          absorbed.push_back(user);
          cur = user->getResult(0);
          continue;
        }
      }
      if (e.residual || other.getType() != cur.getType()) break;
      e.residual = other;
    } else if (auto act = activation_of(user)) {
      if (e.activation != kNone) break;
      e.activation = act->first;
      e.clamp_min = act->second.first;
      e.clamp_max = act->second.second;
    } else {
      break;
    }
    absorbed.push_back(user);
    cur = user->getResult(0);
    if (e.activation != kNone) break;
  }
  if (absorbed.empty()) return false;
  mlir::Operation* last = absorbed.back();
  mlir::OpBuilder b(last);
  mlir::Location loc = root->getLoc();
  mlir::Value bias = e.bias;
  if (!e.bias_add.empty()) {
    std::vector<double> sum = e.bias_add;
    if (!mlir::isa<mlir::NoneType>(bias.getType())) {
      auto old = constant_values(bias);
      if (!old || old->size() != sum.size()) return false;
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += (*old)[i];
    }
    bias = make_constant(b, loc, mlir::RankedTensorType::get({channels}, type.getElementType()),
                         sum, "fused_bias");
  }
  mlir::OperationState state(loc, conv ? "kiln.conv2d_fused" : "kiln.linear_fused");
  state.addOperands({root->getOperand(0), root->getOperand(1), bias,
                     e.residual ? e.residual : make_none(b, loc)});
  if (conv) {
    for (const char* name : {"stride", "padding", "dilation", "groups"})
      state.addAttribute(name, root->getAttr(name));
  }
  state.addAttribute("activation", b.getI64IntegerAttr(e.activation));
  state.addAttribute("clamp_min", b.getF64FloatAttr(e.clamp_min));
  state.addAttribute("clamp_max", b.getF64FloatAttr(e.clamp_max));
  state.addTypes(type);
  mlir::Operation* fused = b.create(state);
  last->getResult(0).replaceAllUsesWith(fused->getResult(0));
  for (auto it = absorbed.rbegin(); it != absorbed.rend(); ++it) (*it)->erase();
  root->erase();
  return true;
}

struct FuseEpiloguesPass
    : mlir::PassWrapper<FuseEpiloguesPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseEpiloguesPass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-epilogues"; }
  llvm::StringRef getDescription() const override {
    return "Fuse bias add, residual add and activation into conv2d/linear (kiln.*_fused)";
  }
  void runOnOperation() override {
    llvm::SmallVector<mlir::Operation*> roots;
    getOperation().walk([&](mlir::Operation* op) {
      if (mlir::isa<ir::Conv2dOp, ir::LinearOp>(op)) roots.push_back(op);
    });
    for (mlir::Operation* op : roots) fuse(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_epilogues_pass() {
  return std::make_unique<FuseEpiloguesPass>();
}

}  // namespace kiln::passes

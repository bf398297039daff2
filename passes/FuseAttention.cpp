// --kiln-fuse-attention: scaled dot-product attention written as separate ops
//   s = kiln.matmul(q', kᵀ)            kᵀ = kiln.transpose / kiln.permute of k's last two dims
//   s = kiln.div(s, c) | kiln.mul(s, c)    optional; or on the query: q' = q / c, q * c
//   s = kiln.add(s, mask)                  optional, float32, broadcasting to s
//   p = kiln.softmax(s) {dim = -1}
//   o = kiln.matmul(p, v)
// becomes o = kiln.attention(q, k, v, mask) {scale}: the runtime computes each block of query
// rows' scores, softmax and product while the tile is in cache (kernels/attention.h) instead of
// writing and re-reading the [B, L, S] scores twice. When q, k and v each come from a transpose
// of their first two dims and o's one use transposes it back (torch.nn.MultiheadAttention's
// (L, N * H, head_dim) layout), the op takes the untransposed values with seq_first and those
// copies disappear too.
//
// Every intermediate must have the chain as its only user (attention weights that something else
// reads stay separate ops); float32 and static shapes only (the kernel's).

#include <array>
#include <optional>

#include "ConstantData.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/Pass.h"

namespace kiln::passes {
namespace {

mlir::RankedTensorType f32_static(mlir::Value v) {
  auto t = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
  return t && t.getElementType().isF32() && t.hasStaticShape() ? t : mlir::RankedTensorType();
}

bool rank3(mlir::Value v) {
  auto t = f32_static(v);
  return t && t.getRank() == 3;
}

// The rank-3 value `v` is a transpose or permute of with dims `perm` (v's dim i is the input's
// dim perm[i]), else null.
mlir::Value permuted_from(mlir::Value v, std::array<int64_t, 3> perm) {
  mlir::Operation* def = v.getDefiningOp();
  if (!def || !rank3(v)) return {};
  auto norm = [](int64_t d) { return d < 0 ? d + 3 : d; };
  if (auto t = mlir::dyn_cast<ir::TransposeOp>(def)) {
    std::array<int64_t, 3> dims{0, 1, 2};  // the accessors return uint64_t
    std::swap(dims[norm(static_cast<int64_t>(t.getDim0()))],
              dims[norm(static_cast<int64_t>(t.getDim1()))]);
    return dims == perm ? t.getInput() : mlir::Value();
  }
  if (auto p = mlir::dyn_cast<ir::PermuteOp>(def)) {
    llvm::ArrayRef<int64_t> dims = p.getDims();
    if (dims.size() != 3) return {};
    for (size_t i = 0; i < 3; ++i)
      if (norm(dims[i]) != perm[i]) return {};
    return p.getInput();
  }
  return {};
}

// `v` is its input with dims a and b swapped.
mlir::Value transposed_from(mlir::Value v, int64_t a, int64_t b) {
  std::array<int64_t, 3> perm{0, 1, 2};
  std::swap(perm[a], perm[b]);
  return permuted_from(v, perm);
}

// A one-element constant (the scale of q or of the scores).
std::optional<double> scalar(mlir::Value v) {
  auto values = constant_values(v);
  if (!values || values->size() != 1) return std::nullopt;
  return values->front();
}

// v = x * c or x / c (c a scalar constant) with v used only by the chain: x, and scale updated.
mlir::Value strip_scale(mlir::Value v, double& scale) {
  mlir::Operation* def = v.getDefiningOp();
  if (!def || !v.hasOneUse() || def->getNumOperands() != 2) return v;
  const bool div = mlir::isa<ir::DivOp>(def), mul = mlir::isa<ir::MulOp>(def);
  if (!div && !mul) return v;
  for (unsigned i = 0; i < 2; ++i) {
    if (div && i == 0) continue;  // c / x is not a scale of x
    std::optional<double> c = scalar(def->getOperand(i));
    mlir::Value x = def->getOperand(1 - i);
    if (!c || x.getType() != v.getType()) continue;  // c must not broadcast x
    if (div && *c == 0.0) return v;
    scale = div ? scale / *c : scale * *c;
    return x;
  }
  return v;
}

// The mask may stand in the kernel's [B, L, S] broadcast: float32, rank <= 3, dims 1 or equal.
bool mask_fits(mlir::Value mask, mlir::RankedTensorType scores) {
  auto m = f32_static(mask);
  if (!m || m.getRank() > 3) return false;
  for (int64_t i = 0; i < m.getRank(); ++i) {
    const int64_t d = m.getDimSize(i), want = scores.getDimSize(3 - m.getRank() + i);
    if (d != 1 && d != want) return false;
  }
  return true;
}

bool fuse(ir::SoftmaxOp softmax) {
  mlir::Value probs = softmax.getResult();
  if (!rank3(probs) || (softmax.getDim() != -1 && softmax.getDim() != 2)) return false;
  if (!probs.hasOneUse()) return false;
  auto out_mm = mlir::dyn_cast<ir::MatmulOp>(*probs.getUsers().begin());
  if (!out_mm || out_mm.getLhs() != probs || !rank3(out_mm.getRhs())) return false;
  auto scores_type = mlir::cast<mlir::RankedTensorType>(probs.getType());

  // Back from the softmax's input: the mask, a scale, the product.
  double scale = 1.0;
  mlir::Value s = softmax.getInput(), mask;
  if (auto add = s.getDefiningOp<ir::AddOp>(); add && s.hasOneUse()) {
    auto alpha = add->getAttrOfType<mlir::FloatAttr>("alpha");
    if (alpha && alpha.getValueAsDouble() != 1.0) return false;
    for (unsigned i = 0; i < 2 && !mask; ++i) {
      mlir::Value x = add->getOperand(i), m = add->getOperand(1 - i);
      if (x.getType() == s.getType() && mask_fits(m, scores_type)) {
        double unused = 1.0;
        mlir::Value inner = strip_scale(x, unused);
        if (inner.getDefiningOp<ir::MatmulOp>() && inner.hasOneUse()) {
          mask = m;
          s = x;
        }
      }
    }
    if (!mask) return false;
  }
  s = strip_scale(s, scale);
  auto scores_mm = s.getDefiningOp<ir::MatmulOp>();
  if (!scores_mm || !s.hasOneUse() || !rank3(scores_mm.getLhs())) return false;
  // kᵀ from the batch-major key, or straight from a sequence-first one ([S, B, D] permuted to
  // [B, D, S]: ONNX exports of MultiheadAttention).
  mlir::Value key = transposed_from(scores_mm.getRhs(), 1, 2);
  mlir::Value key_seq_first =
      key ? transposed_from(key, 0, 1) : permuted_from(scores_mm.getRhs(), {1, 2, 0});
  if ((!key && !key_seq_first) || !scores_mm.getRhs().hasOneUse()) return false;
  mlir::Value query = strip_scale(scores_mm.getLhs(), scale);
  mlir::Value value = out_mm.getRhs();
  if (!rank3(query) || !rank3(key ? key : key_seq_first) || !rank3(value)) return false;

  // The sequence-first layout: every operand a transpose of its first two dims, the result
  // transposed back by its only user.
  mlir::Operation* result_op = out_mm;
  mlir::Value q0 = transposed_from(query, 0, 1), k0 = key_seq_first;
  mlir::Value v0 = transposed_from(value, 0, 1);
  mlir::Value out = out_mm.getResult();
  mlir::Operation* out_user = out.hasOneUse() ? *out.getUsers().begin() : nullptr;
  mlir::Value out0 = out_user && out_user->getNumResults() == 1 ? out_user->getResult(0) : nullptr;
  const bool seq_first =
      q0 && k0 && v0 && out0 && transposed_from(out0, 0, 1) == out && rank3(out0);
  if (seq_first) {
    query = q0;
    key = k0;
    value = v0;
    result_op = out0.getDefiningOp();
  }

  mlir::OpBuilder b(result_op);
  if (!key) {  // a sequence-first key among batch-major operands: transposed as before
    key = b.create<ir::TransposeOp>(softmax.getLoc(), key_seq_first, b.getI64IntegerAttr(0),
                                    b.getI64IntegerAttr(1))
              .getResult();
  }
  mlir::OperationState state(softmax.getLoc(), "kiln.attention");
  state.addOperands({query, key, value, mask ? mask : make_none(b, softmax.getLoc())});
  state.addAttribute("scale", b.getF64FloatAttr(scale));
  state.addAttribute("seq_first", b.getBoolAttr(seq_first));
  state.addTypes(result_op->getResult(0).getType());
  mlir::Operation* fused = b.create(state);
  result_op->getResult(0).replaceAllUsesWith(fused->getResult(0));

  // The chain, from its end: each of its ops erased once nothing reads it (a transpose or scale
  // shared with other users stays).
  llvm::SmallVector<mlir::Operation*> worklist{result_op};
  while (!worklist.empty()) {
    mlir::Operation* op = worklist.pop_back_val();
    if (!op->use_empty()) continue;
    llvm::SmallVector<mlir::Operation*> defs;
    for (mlir::Value v : op->getOperands())
      if (mlir::Operation* d = v.getDefiningOp();
          mlir::isa_and_nonnull<ir::TransposeOp, ir::PermuteOp, ir::MatmulOp, ir::SoftmaxOp,
                                ir::AddOp, ir::MulOp, ir::DivOp>(d))
        defs.push_back(d);
    op->erase();
    for (mlir::Operation* d : defs)
      if (d != fused && !llvm::is_contained(worklist, d)) worklist.push_back(d);
  }
  return true;
}

struct FuseAttentionPass
    : mlir::PassWrapper<FuseAttentionPass, mlir::OperationPass<mlir::func::FuncOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(FuseAttentionPass)
  llvm::StringRef getArgument() const override { return "kiln-fuse-attention"; }
  llvm::StringRef getDescription() const override {
    return "Fuse matmul -> scale -> mask add -> softmax -> matmul chains into kiln.attention";
  }
  void runOnOperation() override {
    llvm::SmallVector<ir::SoftmaxOp> softmaxes;
    getOperation().walk([&](ir::SoftmaxOp op) { softmaxes.push_back(op); });
    for (ir::SoftmaxOp op : softmaxes) fuse(op);
  }
};

}  // namespace

std::unique_ptr<mlir::Pass> create_fuse_attention_pass() {
  return std::make_unique<FuseAttentionPass>();
}

}  // namespace kiln::passes

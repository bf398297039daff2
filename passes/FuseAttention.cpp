// --kiln-fuse-attention: scaled dot-product attention written as separate ops
//   s = kiln.matmul(q', kᵀ)            kᵀ = kiln.transpose / kiln.permute of k's last two dims
//   s = kiln.div(s, c) | kiln.mul(s, c)    optional; or on the query: q' = q / c, q * c
//   s = kiln.add(s, mask)                  optional, float32, broadcasting to s
//   p = kiln.softmax(s) {dim = -1}
//   o = kiln.matmul(p, v)
// over [B, L, D] or [B, H, L, D] operands becomes o = kiln.attention(q, k, v, mask) {scale}: the
// runtime computes each block of query rows' scores, softmax and product while the tile is in
// cache (kernels/attention.h) instead of writing and re-reading the scores twice. When q, k and v
// each come from a transpose of their sequence and (inner) batch dims and o's one use transposes
// it back (torch.nn.MultiheadAttention's (L, N * H, head_dim) layout; [B, L, H, D] reshaped
// projections in 4-D exports), the op takes the untransposed values with seq_first and those
// copies disappear too.
//
// Every intermediate must have the chain as its only user (attention weights that something else
// reads stay separate ops); float32 and static shapes only (the kernel's).

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

// The rank of a static float32 value of rank 3 or 4 (the kernel's operands), else 0.
int64_t attention_rank(mlir::Value v) {
  auto t = f32_static(v);
  return t && (t.getRank() == 3 || t.getRank() == 4) ? t.getRank() : 0;
}

llvm::SmallVector<int64_t, 4> identity(int64_t n) {
  llvm::SmallVector<int64_t, 4> dims;
  for (int64_t i = 0; i < n; ++i) dims.push_back(i);
  return dims;
}

// The value `v` is a transpose or permute of with dims `perm` (v's dim i is the input's dim
// perm[i]), else null.
mlir::Value permuted_from(mlir::Value v, llvm::ArrayRef<int64_t> perm) {
  mlir::Operation* def = v.getDefiningOp();
  const int64_t n = static_cast<int64_t>(perm.size());
  if (!def || attention_rank(v) != n) return {};
  auto norm = [n](int64_t d) { return d < 0 ? d + n : d; };
  if (auto t = mlir::dyn_cast<ir::TransposeOp>(def)) {
    llvm::SmallVector<int64_t, 4> dims = identity(n);  // the accessors return uint64_t
    std::swap(dims[norm(static_cast<int64_t>(t.getDim0()))],
              dims[norm(static_cast<int64_t>(t.getDim1()))]);
    return llvm::ArrayRef<int64_t>(dims) == perm ? t.getInput() : mlir::Value();
  }
  if (auto p = mlir::dyn_cast<ir::PermuteOp>(def)) {
    llvm::ArrayRef<int64_t> dims = p.getDims();
    if (static_cast<int64_t>(dims.size()) != n) return {};
    for (int64_t i = 0; i < n; ++i)
      if (norm(dims[i]) != perm[i]) return {};
    return p.getInput();
  }
  // A permute that moves only size-1 dims is a reshape after --kiln-cleanup (one head at batch 1:
  // [T, 1, D] -> [1, T, D]): the same layout when its shapes are the permuted ones and the
  // non-unit dims keep their order.
  if (mlir::isa<ir::ReshapeOp, ir::ViewOp>(def)) {
    auto in = mlir::dyn_cast<mlir::RankedTensorType>(def->getOperand(0).getType());
    auto out = mlir::dyn_cast<mlir::RankedTensorType>(v.getType());
    if (!in || !out || in.getRank() != n || !in.hasStaticShape() || !out.hasStaticShape())
      return {};
    int64_t last = -1;
    for (int64_t i = 0; i < n; ++i) {
      if (out.getDimSize(i) != in.getDimSize(perm[i])) return {};
      if (in.getDimSize(perm[i]) == 1) continue;
      if (perm[i] < last) return {};
      last = perm[i];
    }
    return def->getOperand(0);
  }
  return {};
}

// `v` (of rank n) is its input with dims a and b swapped.
mlir::Value transposed_from(mlir::Value v, int64_t n, int64_t a, int64_t b) {
  llvm::SmallVector<int64_t, 4> perm = identity(n);
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

// The mask may stand in the kernel's broadcast to the scores: float32, rank <= theirs, dims 1 or
// equal.
bool mask_fits(mlir::Value mask, mlir::RankedTensorType scores) {
  auto m = f32_static(mask);
  if (!m || m.getRank() > scores.getRank()) return false;
  for (int64_t i = 0; i < m.getRank(); ++i) {
    const int64_t d = m.getDimSize(i);
    const int64_t want = scores.getDimSize(scores.getRank() - m.getRank() + i);
    if (d != 1 && d != want) return false;
  }
  return true;
}

bool fuse(ir::SoftmaxOp softmax) {
  mlir::Value probs = softmax.getResult();
  const int64_t n = attention_rank(probs);
  if (!n || (softmax.getDim() != -1 && softmax.getDim() != n - 1)) return false;
  if (!probs.hasOneUse()) return false;
  auto out_mm = mlir::dyn_cast<ir::MatmulOp>(*probs.getUsers().begin());
  if (!out_mm || out_mm.getLhs() != probs || attention_rank(out_mm.getRhs()) != n) return false;
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
  if (!scores_mm || !s.hasOneUse() || attention_rank(scores_mm.getLhs()) != n) return false;
  // The sequence dim swaps with the (inner) batch dim in the sequence-first layout: dims 0 and 1
  // of [L, B, D], 1 and 2 of [B, L, H, D].
  const int64_t sd = n - 3, bd = n - 2;
  // kᵀ from the batch-major key, or straight from a sequence-first one (ONNX exports: [S, B, D]
  // permuted [1, 2, 0] to [B, D, S]; [B, S, H, D] permuted [0, 2, 3, 1]).
  mlir::Value key = transposed_from(scores_mm.getRhs(), n, n - 2, n - 1);
  llvm::SmallVector<int64_t, 4> key_perm =
      n == 3 ? llvm::SmallVector<int64_t, 4>{1, 2, 0} : llvm::SmallVector<int64_t, 4>{0, 2, 3, 1};
  mlir::Value key_seq_first =
      key ? transposed_from(key, n, sd, bd) : permuted_from(scores_mm.getRhs(), key_perm);
  if ((!key && !key_seq_first) || !scores_mm.getRhs().hasOneUse()) return false;
  mlir::Value query = strip_scale(scores_mm.getLhs(), scale);
  mlir::Value value = out_mm.getRhs();
  if (attention_rank(query) != n || attention_rank(key ? key : key_seq_first) != n ||
      attention_rank(value) != n)
    return false;

  // The sequence-first layout: every operand a transpose of its sequence and batch dims, the
  // result transposed back by its only user.
  mlir::Operation* result_op = out_mm;
  mlir::Value q0 = transposed_from(query, n, sd, bd), k0 = key_seq_first;
  mlir::Value v0 = transposed_from(value, n, sd, bd);
  mlir::Value out = out_mm.getResult();
  mlir::Operation* out_user = out.hasOneUse() ? *out.getUsers().begin() : nullptr;
  mlir::Value out0 = out_user && out_user->getNumResults() == 1 ? out_user->getResult(0) : nullptr;
  const bool seq_first = q0 && k0 && v0 && out0 && transposed_from(out0, n, sd, bd) == out;
  if (seq_first) {
    query = q0;
    key = k0;
    value = v0;
    result_op = out0.getDefiningOp();
  }

  mlir::OpBuilder b(result_op);
  if (!key) {  // a sequence-first key among batch-major operands: transposed as before
    key = b.create<ir::TransposeOp>(softmax.getLoc(), key_seq_first, b.getI64IntegerAttr(sd),
                                    b.getI64IntegerAttr(bd))
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
          mlir::isa_and_nonnull<ir::TransposeOp, ir::PermuteOp, ir::ReshapeOp, ir::ViewOp,
                                ir::MatmulOp, ir::SoftmaxOp, ir::AddOp, ir::MulOp, ir::DivOp>(d))
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

// Comparisons (eq, ne, lt, le, gt, ge) and logical ops (and, or, xor, not): Bool results.
#include "elementwise_engine.h"

namespace kiln::kernels {

namespace ew {

void run_compare(BinaryOp op, DType compute, TensorImpl& out, const BinOperand& a,
                 const BinOperand& b, std::span<const int64_t> shape, std::string_view name) {
  visit_compute(compute, [&](auto tag) {
    using T = decltype(tag);
    auto go = [&](auto f) { run_binary<T, bool>(out, a, b, shape, name, f); };
    switch (op) {
      case BinaryOp::Eq:
        return go([](T x, T y) -> bool { return x == y; });
      case BinaryOp::Ne:
        return go([](T x, T y) -> bool { return x != y; });
      case BinaryOp::Lt:
        return go([](T x, T y) -> bool { return x < y; });
      case BinaryOp::Le:
        return go([](T x, T y) -> bool { return x <= y; });
      case BinaryOp::Gt:
        return go([](T x, T y) -> bool { return x > y; });
      case BinaryOp::Ge:
        return go([](T x, T y) -> bool { return x >= y; });
      default:
        break;
    }
    if constexpr (std::is_same_v<T, bool>) {
      switch (op) {
        case BinaryOp::LogicalAnd:
          return go([](bool x, bool y) -> bool { return x && y; });
        case BinaryOp::LogicalOr:
          return go([](bool x, bool y) -> bool { return x || y; });
        case BinaryOp::LogicalXor:
          return go([](bool x, bool y) -> bool { return x != y; });
        default:
          break;
      }
    }
    fail(name, "internal: op not supported for compute type ", dtype_of<T>);
  });
}

}  // namespace ew

void eq_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Eq, a, b, out);
}
void ne_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Ne, a, b, out);
}
void lt_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Lt, a, b, out);
}
void le_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Le, a, b, out);
}
void gt_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Gt, a, b, out);
}
void ge_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::Ge, a, b, out);
}
void logical_and_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::LogicalAnd, a, b, out);
}
void logical_or_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::LogicalOr, a, b, out);
}
void logical_xor_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  binary_out(BinaryOp::LogicalXor, a, b, out);
}

void logical_not_out(const TensorImpl& x, TensorImpl& out) {
  constexpr std::string_view name = "logical_not";
  const TensorImpl* inputs[] = {&x};
  ew::check_out(name, out, x.sizes(), DType::Bool, inputs);
  if (out.numel() == 0) return;
  const std::array<ew::In, 1> ins{ew::make_in(x, out.sizes(), name)};
  ew::run<1, bool, bool, false>(out, ins,
                                [](bool* o, const bool* const* in, const bool*, int64_t n) {
                                  const bool* v = in[0];
                                  for (int64_t i = 0; i < n; ++i) o[i] = !v[i];
                                });
}

}  // namespace kiln::kernels

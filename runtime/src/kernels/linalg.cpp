// The matmul family: shape rules, operand layout (direct / transposed / copied), batching, dtype
// handling. The arithmetic is sgemm (float32) or a blocked float64 loop.
#include "kiln/runtime/kernels/linalg.h"

#include <algorithm>
#include <vector>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/matmul.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/elementwise.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"

namespace kiln::kernels {
namespace {

// A strided matrix view (strides in elements).
struct Mat {
  char* data;
  int64_t rows, cols, rs, cs;
};

Mat mat_of(const TensorImpl& t) {  // t is 2-D
  return {static_cast<char*>(t.data()), t.size(0), t.size(1), t.stride(0), t.stride(1)};
}

bool is_half(DType t) {
  return t == DType::Float16 || t == DType::BFloat16;
}

void check_dtypes(std::string_view op, const TensorImpl& a, const TensorImpl& b,
                  const TensorImpl& out) {
  KILN_CHECK(a.dtype() == b.dtype(), op, "expected both operands of the same dtype, got ",
             describe(a), " and ", describe(b));
  KILN_CHECK(out.dtype() == a.dtype(), op, "expected out of dtype ", dtype_short_name(a.dtype()),
             ", got ", describe(out));
  KILN_CHECK(is_floating(a.dtype()), op, "expected a floating dtype (f32, f64, f16, bf16), got ",
             describe(a));
}

void check_out_shape(std::string_view op, const TensorImpl& out, std::span<const int64_t> shape) {
  KILN_CHECK(out.sizes() == Dims(shape), op, "expected out of shape ", Dims(shape), ", got ",
             describe(out));
}

TensorImplPtr to_f32(const TensorImpl& t) {
  auto r = empty(t.sizes(), DType::Float32);
  copy_(*r, t);
  return r;
}

// Can sgemm read this matrix as is? Sets trans and the leading dimension.
bool gemm_layout(const Mat& m, bool& trans, int64_t& ld) {
  if ((m.cols <= 1 || m.cs == 1) && (m.rows <= 1 || m.rs >= std::max<int64_t>(m.cols, 1))) {
    trans = false;
    ld = m.rows <= 1 ? std::max<int64_t>(m.cols, 1) : m.rs;
    return true;
  }
  if ((m.rows <= 1 || m.rs == 1) && (m.cols <= 1 || m.cs >= std::max<int64_t>(m.rows, 1))) {
    trans = true;
    ld = m.cols <= 1 ? std::max<int64_t>(m.rows, 1) : m.cs;
    return true;
  }
  return false;
}

template <typename T>
void gather(const Mat& m, std::vector<T>& buf) {
  buf.resize(static_cast<size_t>(m.rows * m.cols));
  const T* src = reinterpret_cast<const T*>(m.data);
  for (int64_t i = 0; i < m.rows; ++i)
    for (int64_t j = 0; j < m.cols; ++j) buf[i * m.cols + j] = src[i * m.rs + j * m.cs];
}

// out = alpha * a b + beta * out, then the epilogue (float32).
void gemm_f32(const Mat& a, const Mat& b, const Mat& out, float alpha, float beta,
              const Epilogue& e = {}) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  if (M == 0 || N == 0) return;
  std::vector<float> abuf, bbuf, cbuf;
  bool ta = false, tb = false;
  int64_t lda = 0, ldb = 0;
  const float* ap = reinterpret_cast<const float*>(a.data);
  const float* bp = reinterpret_cast<const float*>(b.data);
  if (!gemm_layout(a, ta, lda)) {
    gather(a, abuf);
    ap = abuf.data();
    ta = false;
    lda = std::max<int64_t>(K, 1);
  }
  if (!gemm_layout(b, tb, ldb)) {
    gather(b, bbuf);
    bp = bbuf.data();
    tb = false;
    ldb = std::max<int64_t>(N, 1);
  }
  bool tc = false;
  int64_t ldc = 0;
  if (gemm_layout(out, tc, ldc) && !tc) {
    sgemm(ta, tb, M, N, K, alpha, ap, lda, bp, ldb, beta, reinterpret_cast<float*>(out.data), ldc,
          e);
    return;
  }
  // Output with another layout: compute contiguous, then scatter. (A block epilogue's offsets
  // are the output's: matmul_epilogue_out only takes a dense output, which the branch above takes.)
  KILN_CHECK(!e.block, "matmul", "expected a dense output for a block epilogue");
  float* o = reinterpret_cast<float*>(out.data);
  if (beta != 0.0f)
    gather(out, cbuf);
  else
    cbuf.resize(static_cast<size_t>(M * N));
  sgemm(ta, tb, M, N, K, alpha, ap, lda, bp, ldb, beta, cbuf.data(), N, e);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) o[i * out.rs + j * out.cs] = cbuf[i * N + j];
}

// out = alpha * a b + beta * out (float64): rows of out in parallel, column blocks of B reused
// from cache across the rows of a thread's share.
void gemm_f64(const Mat& a, const Mat& b, const Mat& out, double alpha, double beta) {
  const int64_t M = a.rows, K = a.cols, N = b.cols;
  if (M == 0 || N == 0) return;
  std::vector<double> bbuf;
  const double* bp;
  if (b.cs == 1 && (b.rows <= 1 || b.rs >= N)) {
    bp = reinterpret_cast<const double*>(b.data);
  } else {
    gather(b, bbuf);
    bp = bbuf.data();
  }
  const int64_t ldb = (b.cs == 1 && (b.rows <= 1 || b.rs >= N)) ? b.rs : N;
  const double* ap = reinterpret_cast<const double*>(a.data);
  double* op = reinterpret_cast<double*>(out.data);
  constexpr int64_t kJB = 256;
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(1, K * N));
  parallel_for(0, M, grain, [&](int64_t i0, int64_t i1) {
    double acc[kJB];
    for (int64_t j0 = 0; j0 < N; j0 += kJB) {
      const int64_t nj = std::min(kJB, N - j0);
      for (int64_t i = i0; i < i1; ++i) {
        std::fill(acc, acc + nj, 0.0);
        for (int64_t k = 0; k < K; ++k) {
          const double av = ap[i * a.rs + k * a.cs];
          const double* brow = bp + k * ldb + j0;
          for (int64_t j = 0; j < nj; ++j) acc[j] += av * brow[j];
        }
        double* orow = op + i * out.rs + j0 * out.cs;
        for (int64_t j = 0; j < nj; ++j) {
          const double prev = beta == 0.0 ? 0.0 : beta * orow[j * out.cs];
          orow[j * out.cs] = alpha * acc[j] + prev;
        }
      }
    }
  });
}

// One 2-D product for f32/f64 (half types were converted by the caller); `e` for float32 only.
void gemm_2d(DType dt, const Mat& a, const Mat& b, const Mat& out, double alpha, double beta,
             const Epilogue& e = {}) {
  if (dt == DType::Float32)
    gemm_f32(a, b, out, float(alpha), float(beta), e);
  else
    gemm_f64(a, b, out, alpha, beta);
}

// Batched product over the leading dims of same-rank a [..., n, k], b [..., k, m] (broadcast
// strides allowed) into out [..., n, m].
void gemm_batched(DType dt, const TensorImpl& a, const TensorImpl& b, TensorImpl& out,
                  const Epilogue& e = {}) {
  const int64_t r = out.dim();
  const int64_t nb_dims = r - 2;
  int64_t batch = 1;
  for (int64_t d = 0; d < nb_dims; ++d) batch *= out.size(d);
  if (batch == 0 || out.numel() == 0) return;
  const int64_t n = out.size(-2), m = out.size(-1), k = a.size(-1);
  const int64_t item = static_cast<int64_t>(a.itemsize());
  auto mat_at = [&](const TensorImpl& t, int64_t bi, int64_t rows, int64_t cols) {
    int64_t off = 0;
    for (int64_t d = nb_dims - 1; d >= 0; --d) {
      const int64_t sz = out.size(d);
      off += (bi % sz) * t.stride(d);
      bi /= sz;
    }
    return Mat{static_cast<char*>(t.data()) + off * item, rows, cols, t.stride(-2), t.stride(-1)};
  };
  auto one = [&](int64_t bi) {
    gemm_2d(dt, mat_at(a, bi, n, k), mat_at(b, bi, k, m), mat_at(out, bi, n, m), 1.0, 0.0, e);
  };
  // Many small products: one per thread (sgemm runs serially inside). Large ones: each product
  // uses all threads.
  if (batch > 1 && n * m * std::max<int64_t>(k, 1) < (int64_t(1) << 21)) {
    parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi) one(bi);
    });
  } else {
    for (int64_t bi = 0; bi < batch; ++bi) one(bi);
  }
}

void check_2d(std::string_view op, const TensorImpl& t, const char* what) {
  KILN_CHECK(t.dim() == 2, op, "expected ", what, " to be 2-D, got ", describe(t));
}

}  // namespace

Dims matmul_shape(const TensorImpl& a, const TensorImpl& b) {
  const int64_t da = a.dim(), db = b.dim();
  KILN_CHECK(da >= 1 && db >= 1, "matmul", "expected both arguments to have at least 1 dim, got ",
             describe(a), " and ", describe(b));
  const int64_t ka = a.size(-1);
  const int64_t kb = db == 1 ? b.size(0) : b.size(-2);
  KILN_CHECK(ka == kb, "matmul", "expected inner dims to match (a.size(-1) == b.size(",
             db == 1 ? "0" : "-2", ")), got ", describe(a), " and ", describe(b));
  if (da == 1 && db == 1) return Dims{};
  if (da == 2 && db == 1) return Dims{a.size(0)};
  if (da == 1 && db == 2) return Dims{b.size(1)};
  if (da == 2 && db == 2) return Dims{a.size(0), b.size(1)};
  const Dims& as = a.sizes();
  const Dims& bs = b.sizes();
  const std::span<const int64_t> abatch(as.data(), da >= 2 ? size_t(da - 2) : 0);
  const std::span<const int64_t> bbatch(bs.data(), db >= 2 ? size_t(db - 2) : 0);
  Dims out = broadcast_shapes(abatch, bbatch, "matmul");
  if (da >= 2) out.push_back(a.size(-2));
  if (db >= 2) out.push_back(b.size(-1));
  return out;
}

void mm_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  check_2d("mm", a, "self");
  check_2d("mm", b, "mat2");
  check_dtypes("mm", a, b, out);
  KILN_CHECK(a.size(1) == b.size(0), "mm", "expected mat1 [n, k] and mat2 [k, m], got ",
             describe(a), " and ", describe(b));
  check_out_shape("mm", out, Dims{a.size(0), b.size(1)});
  if (out.numel() == 0) return;
  if (is_half(a.dtype())) {
    auto o = empty(out.sizes(), DType::Float32);
    mm_out(*to_f32(a), *to_f32(b), *o);
    copy_(out, *o);
    return;
  }
  gemm_2d(a.dtype(), mat_of(a), mat_of(b), mat_of(out), 1.0, 0.0);
}

void bmm_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm", "expected 3-D operands, got ", describe(a),
             " and ", describe(b));
  check_dtypes("bmm", a, b, out);
  KILN_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm",
             "expected [B, n, k] and [B, k, m], got ", describe(a), " and ", describe(b));
  check_out_shape("bmm", out, Dims{a.size(0), a.size(1), b.size(2)});
  if (out.numel() == 0) return;
  if (is_half(a.dtype())) {
    auto o = empty(out.sizes(), DType::Float32);
    bmm_out(*to_f32(a), *to_f32(b), *o);
    copy_(out, *o);
    return;
  }
  gemm_batched(a.dtype(), a, b, out);
}

void mv_out(const TensorImpl& a, const TensorImpl& v, TensorImpl& out) {
  KILN_CHECK(a.dim() == 2 && v.dim() == 1, "mv", "expected a 2-D matrix and a 1-D vector, got ",
             describe(a), " and ", describe(v));
  check_dtypes("mv", a, v, out);
  KILN_CHECK(a.size(1) == v.size(0), "mv", "expected [n, k] and [k], got ", describe(a), " and ",
             describe(v));
  check_out_shape("mv", out, Dims{a.size(0)});
  if (out.numel() == 0) return;
  if (is_half(a.dtype())) {
    auto o = empty(out.sizes(), DType::Float32);
    mv_out(*to_f32(a), *to_f32(v), *o);
    copy_(out, *o);
    return;
  }
  const Mat vm{static_cast<char*>(v.data()), v.size(0), 1, v.stride(0), 1};
  const Mat om{static_cast<char*>(out.data()), out.size(0), 1, out.stride(0), 1};
  gemm_2d(a.dtype(), mat_of(a), vm, om, 1.0, 0.0);
}

void dot_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "dot", "expected 1-D operands, got ", describe(a),
             " and ", describe(b));
  check_dtypes("dot", a, b, out);
  KILN_CHECK(a.size(0) == b.size(0), "dot", "expected operands of the same length, got ",
             describe(a), " and ", describe(b));
  check_out_shape("dot", out, Dims{});
  if (is_half(a.dtype())) {
    auto o = empty(out.sizes(), DType::Float32);
    dot_out(*to_f32(a), *to_f32(b), *o);
    copy_(out, *o);
    return;
  }
  const Mat am{static_cast<char*>(a.data()), 1, a.size(0), 1, a.stride(0)};
  const Mat bm{static_cast<char*>(b.data()), b.size(0), 1, b.stride(0), 1};
  const Mat om{static_cast<char*>(out.data()), 1, 1, 1, 1};
  gemm_2d(a.dtype(), am, bm, om, 1.0, 0.0);
}

namespace {

// matmul_out with `e` (float32: its block epilogue only) on every sgemm the product runs; false
// when it ran none (a dot, a matrix-vector product, half types), so the caller applies it after.
bool matmul_into(const TensorImpl& a, const TensorImpl& b, TensorImpl& out, const Epilogue& e) {
  if (a.device() != Device::CPU || b.device() != Device::CPU || out.device() != Device::CPU)
      [[unlikely]] {
    cuda::check_same_device("matmul", a, "self", b, "other");
    cuda::check_same_device("matmul", a, "self", out, "out");
    cuda::matmul_out(a, b, nullptr, false, out, cuda::matmul_options(), cuda::current_stream());
    return false;
  }
  const Dims shape = matmul_shape(a, b);
  check_dtypes("matmul", a, b, out);
  check_out_shape("matmul", out, shape);
  const int64_t da = a.dim(), db = b.dim();
  if (da == 1 && db == 1) {
    dot_out(a, b, out);
    return false;
  }
  if (da == 2 && db == 1) {
    mv_out(a, b, out);
    return false;
  }
  if (out.numel() == 0) return true;
  if (is_half(a.dtype())) {
    auto o = empty(out.sizes(), DType::Float32);
    matmul_out(*to_f32(a), *to_f32(b), *o);
    copy_(out, *o);
    return false;
  }
  if (da == 2 && db == 2) {
    gemm_2d(a.dtype(), mat_of(a), mat_of(b), mat_of(out), 1.0, 0.0, e);
    return true;
  }
  if (da == 1 && db == 2) {  // [k] x [k, m] = [1, k] x [k, m] with the 1 removed
    auto a2 = views::unsqueeze(a, 0);
    auto o2 = views::unsqueeze(out, 0);
    gemm_2d(a.dtype(), mat_of(*a2), mat_of(b), mat_of(*o2), 1.0, 0.0, e);
    return true;
  }
  const int64_t k = a.size(-1);
  // [..., n, k] x [k, m]: fold the batch into the rows of one GEMM when the views allow.
  if (db == 2 && da >= 3) {
    const int64_t rows = a.numel() / std::max<int64_t>(k, 1);
    Dims a_strides, o_strides;
    const Dims a_shape{rows, k}, o_shape{rows, b.size(1)};
    if (k > 0 && views::compute_view_strides(a, a_shape, a_strides) &&
        views::compute_view_strides(out, o_shape, o_strides)) {
      auto a2 = views::view(a, a_shape);
      auto o2 = views::view(out, o_shape);
      gemm_2d(a.dtype(), mat_of(*a2), mat_of(b), mat_of(*o2), 1.0, 0.0, e);
      return true;
    }
  }
  // General batched case: promote 1-D operands, broadcast the batch dims.
  TensorImplPtr a_hold, b_hold, o_hold;
  const TensorImpl* a3 = &a;
  const TensorImpl* b3 = &b;
  TensorImpl* o3 = &out;
  if (da == 1) a3 = (a_hold = views::unsqueeze(a, 0)).get();
  if (db == 1) b3 = (b_hold = views::unsqueeze(b, 1)).get();
  if (da == 1) o3 = (o_hold = views::unsqueeze(*o3, o3->dim() - 1)).get();
  if (db == 1) o3 = (o_hold = views::unsqueeze(*o3, o3->dim())).get();
  const int64_t r = o3->dim();
  Dims a_full(o3->sizes()), b_full(o3->sizes());
  a_full[r - 2] = a3->size(-2);
  a_full[r - 1] = k;
  b_full[r - 2] = k;
  b_full[r - 1] = b3->size(-1);
  auto ae = views::expand(*a3, a_full);
  auto be = views::expand(*b3, b_full);
  gemm_batched(a.dtype(), *ae, *be, *o3, e);
  return true;
}

}  // namespace

void matmul_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out) {
  matmul_into(a, b, out, {});
}

void matmul_epilogue_out(const TensorImpl& a, const TensorImpl& b, TensorImpl& out,
                         const BlockEpilogue& block, const SgemmPacked* packed) {
  KILN_CHECK(out.dtype() == DType::Float32 && out.is_contiguous() && out.device() == Device::CPU,
             "matmul", "expected a dense float32 out on the CPU for a generated epilogue, got ",
             describe(out));
  if (packed && matmul_packed_out(a, b, *packed, out, block)) return;
  Epilogue e;
  e.block = block;
  if (!e.block.origin) e.block.origin = out.data_ptr<float>();  // (a caller's row block: its own)
  if (matmul_into(a, b, out, e) || out.numel() == 0) return;
  // No sgemm ran it (a dot or matrix-vector product): the whole result as one run.
  e.block.apply(out.data_ptr<float>(), out.numel(), 1, out.numel());
}

void addmm_out(const TensorImpl& bias, const TensorImpl& a, const TensorImpl& b, double beta,
               double alpha, TensorImpl& out) {
  check_2d("addmm", a, "mat1");
  check_2d("addmm", b, "mat2");
  check_dtypes("addmm", a, b, out);
  KILN_CHECK(bias.dtype() == a.dtype(), "addmm", "expected bias of dtype ",
             dtype_short_name(a.dtype()), ", got ", describe(bias));
  KILN_CHECK(a.size(1) == b.size(0), "addmm", "expected mat1 [n, k] and mat2 [k, m], got ",
             describe(a), " and ", describe(b));
  const Dims shape{a.size(0), b.size(1)};
  check_out_shape("addmm", out, shape);
  // Validates that bias broadcasts (throws "addmm: cannot broadcast ...").
  const Dims bias_strides = broadcast_strides(bias, shape, "addmm");
  if (out.numel() == 0) return;
  if (is_half(a.dtype())) {
    auto o = empty(out.sizes(), DType::Float32);
    addmm_out(*to_f32(bias), *to_f32(a), *to_f32(b), beta, alpha, *o);
    copy_(out, *o);
    return;
  }
  const int64_t n = shape[0], m = shape[1];
  if (a.dtype() == DType::Float32 && beta != 0.0 &&
      (bias_strides[0] == 0 || bias_strides[1] == 0)) {
    // A bias vector along the columns (or rows): fused into the GEMM epilogue.
    const bool per_col = bias_strides[0] == 0;
    const int64_t len = per_col ? m : n;
    const int64_t st = per_col ? bias_strides[1] : bias_strides[0];
    std::vector<float> scaled(static_cast<size_t>(len));
    const float* bp = bias.data_ptr<float>();
    for (int64_t i = 0; i < len; ++i) scaled[i] = float(beta) * bp[i * st];
    Epilogue e;
    e.bias_kind = per_col ? Epilogue::Bias::PerCol : Epilogue::Bias::PerRow;
    e.bias = scaled.data();
    gemm_f32(mat_of(a), mat_of(b), mat_of(out), float(alpha), 0.0f, e);
    return;
  }
  if (beta != 0.0) {
    // out = bias (broadcast), then out = alpha * a b + beta * out.
    if (&bias != &out) copy_(out, bias);
    gemm_2d(a.dtype(), mat_of(a), mat_of(b), mat_of(out), alpha, beta);
  } else {
    gemm_2d(a.dtype(), mat_of(a), mat_of(b), mat_of(out), alpha, 0.0);
  }
}

Dims linear_shape(const TensorImpl& input, const TensorImpl& weight) {
  KILN_CHECK(weight.dim() == 2, "linear", "expected weight [out_features, in_features], got ",
             describe(weight));
  KILN_CHECK(input.dim() >= 1, "linear", "expected input [..., in_features], got ",
             describe(input));
  KILN_CHECK(input.size(-1) == weight.size(1), "linear", "expected input [..., ", weight.size(1),
             "] for weight ", describe(weight), ", got ", describe(input));
  Dims out(input.sizes());
  out.back() = weight.size(0);
  return out;
}

namespace {
// A constant matrix sgemm_pack_b can take as it lies: float32, 2-D, contiguous, on the CPU.
bool packable_matrix(const TensorImpl& m) {
  return m.dtype() == DType::Float32 && m.dim() == 2 && m.is_contiguous() &&
         m.device() == Device::CPU && m.numel() > 0;
}
}  // namespace

std::shared_ptr<const SgemmPacked> prepare_matmul_operand(const TensorImpl& b) {
  if (!packable_matrix(b)) return nullptr;
  const int64_t K = b.size(0), N = b.size(1);
  return sgemm_pack_b(false, K, N, b.data_ptr<float>(), N);
}

bool matmul_packed_out(const TensorImpl& a, const TensorImpl& b, const SgemmPacked& packed,
                       TensorImpl& out, const BlockEpilogue& block) {
  if (a.dtype() != DType::Float32 || out.dtype() != DType::Float32 || b.dim() != 2 || a.dim() < 1 ||
      !a.is_contiguous() || !out.is_contiguous() || a.device() != Device::CPU ||
      out.device() != Device::CPU)
    return false;
  const int64_t K = b.size(0), N = b.size(1);
  if (!packed.is_b() || packed.depth() != K || packed.outer() != N || K == 0) return false;
  check_out_shape("matmul", out, matmul_shape(a, b));
  if (out.numel() == 0) return true;
  const int64_t M = a.numel() / K;
  Epilogue e;
  e.block = block;
  if (!e.block.origin) e.block.origin = out.data_ptr<float>();
  sgemm_packed_b(false, M, 1.0f, a.data_ptr<float>(), K, packed, 0.0f, out.data_ptr<float>(), N, e);
  return true;
}

std::shared_ptr<const SgemmPacked> prepare_linear_weight(const TensorImpl& weight) {
  if (!packable_matrix(weight)) return nullptr;
  const int64_t N = weight.size(0), K = weight.size(1);
  return sgemm_pack_b(true, K, N, weight.data_ptr<float>(), K);
}

bool linear_gemm_out(const TensorImpl& x, const TensorImpl& w, const TensorImpl* bias,
                     const TensorImpl* res, Epilogue e, TensorImpl& o, const SgemmPacked* packed) {
  const bool f32 = x.dtype() == DType::Float32 && w.dtype() == DType::Float32 &&
                   o.dtype() == DType::Float32 && (!bias || bias->dtype() == DType::Float32) &&
                   (!res || res->dtype() == DType::Float32);
  const bool cpu = x.device() == Device::CPU && w.device() == Device::CPU &&
                   o.device() == Device::CPU && (!bias || bias->device() == Device::CPU) &&
                   (!res || res->device() == Device::CPU);
  const bool dense = x.is_contiguous() && w.is_contiguous() && o.is_contiguous() && w.dim() == 2 &&
                     x.dim() >= 1 && o.dim() == x.dim() &&
                     (!bias || (bias->is_contiguous() && bias->numel() == w.size(0))) &&
                     (!res || (res->is_contiguous() && res->sizes() == o.sizes()));
  if (!f32 || !cpu || !dense) return false;
  const int64_t K = w.size(1), N = w.size(0);
  if (K == 0) return false;  // out = bias: linear_out handles it
  for (int64_t d = 0; d + 1 < x.dim(); ++d) {
    KILN_CHECK(x.sizes()[d] == o.sizes()[d], "linear", "expected out of shape [..., ", N,
               "] matching input ", describe(x), ", got ", describe(o));
  }
  KILN_CHECK(x.size(-1) == K && o.size(-1) == N, "linear", "expected input [..., ", K,
             "] and out [..., ", N, "], got ", describe(x), " and ", describe(o));
  const int64_t M = x.numel() / K;
  if (o.numel() == 0) return true;
  if (bias) {
    e.bias_kind = Epilogue::Bias::PerCol;
    e.bias = bias->data_ptr<float>();
  }
  if (res) {
    e.residual = res->data_ptr<float>();
    e.ld_residual = N;
  }
  if (!e.block.origin) e.block.origin = o.data_ptr<float>();  // (a caller's row block: its own)
  if (packed && packed->is_b() && packed->outer() == N && packed->depth() == K)
    sgemm_packed_b(false, M, 1.0f, x.data_ptr<float>(), K, *packed, 0.0f, o.data_ptr<float>(), N,
                   e);
  else
    sgemm(false, true, M, N, K, 1.0f, x.data_ptr<float>(), K, w.data_ptr<float>(), K, 0.0f,
          o.data_ptr<float>(), N, e);
  return true;
}

void linear_fused_out(const TensorImpl& x, const TensorImpl& w, const TensorImpl* bias,
                      const TensorImpl* res, const Epilogue& e, TensorImpl& o,
                      const SgemmPacked* packed) {
  if (linear_gemm_out(x, w, bias, res, e, o, packed)) return;
  KILN_CHECK(!e.block || (o.dtype() == DType::Float32 && o.is_contiguous()), "linear",
             "expected a dense float32 out for a generated epilogue, got ", describe(o));
  // Other dtypes and layouts: the unfused steps.
  linear_out(x, w, bias, o);
  if (res) add_out(o, *res, o);
  switch (e.activation) {
    case Activation::None:
      break;
    case Activation::Relu:
      relu_out(o, o);
      break;
    case Activation::Relu6:
      hardtanh_out(o, 0.0, 6.0, o);
      break;
    case Activation::Clamp:
      hardtanh_out(o, e.clamp_min, e.clamp_max, o);
      break;
    case Activation::Gelu:
      gelu_out(o, o);
      break;
    case Activation::GeluTanh:
      gelu_out(o, o, GeluApproximate::Tanh);
      break;
    case Activation::Silu:
      silu_out(o, o);
      break;
    case Activation::Sigmoid:
      sigmoid_out(o, o);
      break;
    case Activation::Tanh:
      tanh_out(o, o);
      break;
  }
  if (e.block && o.numel() > 0) {
    float* y = o.data_ptr<float>();
    const int64_t n = o.size(-1);
    BlockEpilogue b = e.block;
    if (!b.origin) b.origin = y;
    b.apply(y, n, o.numel() / n, n);
  }
}

namespace {
// Scratch for a block of a prologue's rows (allocator.h: a lent region or cached size classes).
class RowBlock {
 public:
  explicit RowBlock(size_t floats) : bytes_(std::max<size_t>(floats, 1) * sizeof(float)) {
    p_ = static_cast<float*>(scratch_allocate(bytes_));
  }
  ~RowBlock() { scratch_deallocate(p_, bytes_); }
  RowBlock(const RowBlock&) = delete;
  RowBlock& operator=(const RowBlock&) = delete;
  float* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  float* p_;
};
// The rows of an input [M, K] that `prologue` computes, a block of them at a time into scratch
// (blocks that stay in the L2 while the product reads them, as sgemm's own operand blocks), each
// block handed to product(x_rows [n, K], r0, n) right after: the input is never stored whole.
// prepare(rows per block) runs first, so that the caller can do once what each block's product
// would otherwise redo.
template <typename Prepare, typename Product>
void prologue_blocks(int64_t M, int64_t K, const BlockEpilogue& prologue, Prepare&& prepare,
                     Product&& product) {
  const int64_t rows = std::clamp<int64_t>(rt::target_params().l2_block_bytes / 4 / K, 1, M);
  prepare(rows);
  RowBlock block(static_cast<size_t>(rows * K));  // rows * K <= M * K: counted by the callers
  auto storage = make_intrusive<Storage>(block.get(), block.bytes(), std::function<void(void*)>());
  for (int64_t r0 = 0; r0 < M; r0 += rows) {
    const int64_t n = std::min(rows, M - r0);
    float* xb = block.get();
    // Each row's offset is the whole input's (r0 + a) * K.
    parallel_for(0, n, std::max<int64_t>(1, (int64_t(1) << 14) / K), [&](int64_t a, int64_t b) {
      prologue.fn(prologue.ctx, xb + a * K, (r0 + a) * K, K, b - a, K);
    });
    auto x_rows = make_intrusive<TensorImpl>(storage, Dims{n, K}, Dims{K, 1}, 0, DType::Float32);
    product(*x_rows, r0, n);
  }
}

// A right operand for several blocks' products: `packed` when it holds it packed as B (N x K),
// else `prepare()`'s packing, kept in `own`, so that it is packed once, not by every block.
template <typename Prepare>
const SgemmPacked* packed_once(const SgemmPacked* packed, int64_t N, int64_t K,
                               std::shared_ptr<const SgemmPacked>& own, Prepare&& prepare) {
  if (packed && packed->is_b() && packed->outer() == N && packed->depth() == K) return packed;
  own = prepare();
  return own.get();
}

// The rows M of an input of `x_shape` (all but its last dim), counted with overflow checks.
int64_t prologue_rows(std::string_view op, const Dims& x_shape) {
  KILN_CHECK(!x_shape.empty(), op, "expected an input of at least 1 dim, got a 0-dim one");
  int64_t M = 1, elements = 0;
  for (size_t d = 0; d + 1 < x_shape.size(); ++d)
    KILN_CHECK(x_shape[d] >= 0 && mul_ok(M, x_shape[d], M), op,
               "expected an input shape whose elements can be counted, got ", x_shape);
  KILN_CHECK(x_shape.back() >= 0 && mul_ok(M, x_shape.back(), elements), op,
             "expected an input shape whose elements can be counted, got ", x_shape);
  return M;
}

void check_prologue_out(std::string_view op, const TensorImpl& o) {
  KILN_CHECK(o.dtype() == DType::Float32 && o.is_contiguous() && o.device() == Device::CPU, op,
             "expected a dense float32 out on the CPU for a generated prologue, got ", describe(o));
}

// Rows [r0, r0 + n) of a dense matrix of `width` columns.
TensorImplPtr rows_of(const TensorImpl& t, int64_t r0, int64_t n, int64_t width) {
  return make_view(t, Dims{n, width}, Dims{width, 1}, t.storage_offset() + r0 * width);
}

}  // namespace

void linear_prologue_out(const Dims& x_shape, const BlockEpilogue& prologue, const TensorImpl& w,
                         const TensorImpl* bias, const TensorImpl* res, const Epilogue& e,
                         TensorImpl& o, const SgemmPacked* packed) {
  const int64_t M = prologue_rows("linear", x_shape);
  KILN_CHECK(w.dim() == 2 && x_shape.back() == w.size(1), "linear", "expected input [..., ",
             w.dim() == 2 ? w.size(1) : -1, "] for weight ", describe(w), ", got input ", x_shape);
  Dims shape = x_shape;
  shape.back() = w.size(0);
  check_out_shape("linear", o, shape);
  check_prologue_out("linear", o);
  KILN_CHECK(!res || res->sizes() == o.sizes(), "linear", "expected a residual shaped like out ",
             describe(o), " for a generated prologue, got ", res ? describe(*res) : "");
  const int64_t K = x_shape.back(), N = w.size(0);
  if (K == 0 || M == 0) {  // nothing to fill: out = bias (and the epilogues)
    linear_fused_out(*empty(x_shape, DType::Float32), w, bias, res, e, o, packed);
    return;
  }
  TensorImplPtr res_dense = res ? views::contiguous(*res) : TensorImplPtr();
  std::shared_ptr<const SgemmPacked> own;
  Epilogue eb = e;
  if (eb.block) eb.block.origin = o.data_ptr<float>();
  prologue_blocks(
      M, K, prologue,
      [&](int64_t rows) {
        if (rows < M)
          packed = packed_once(packed, N, K, own, [&] { return prepare_linear_weight(w); });
      },
      [&](const TensorImpl& x_rows, int64_t r0, int64_t n) {
        auto res_rows = res_dense ? rows_of(*res_dense, r0, n, N) : TensorImplPtr();
        linear_fused_out(x_rows, w, bias, res_rows.get(), eb, *rows_of(o, r0, n, N), packed);
      });
}

void matmul_prologue_out(const Dims& x_shape, const BlockEpilogue& prologue, const TensorImpl& b,
                         TensorImpl& o, const BlockEpilogue& block, const SgemmPacked* packed) {
  const int64_t M = prologue_rows("matmul", x_shape);
  KILN_CHECK(b.dim() == 2 && x_shape.back() == b.size(0), "matmul",
             "expected a [K, N] right operand with K = ", x_shape.back(),
             " for a generated prologue, got ", describe(b));
  Dims shape = x_shape;
  shape.back() = b.size(1);
  check_out_shape("matmul", o, shape);
  check_prologue_out("matmul", o);
  const int64_t K = x_shape.back(), N = b.size(1);
  if (K == 0 || M == 0) {  // nothing to fill (zeros, and the epilogue)
    matmul_epilogue_out(*empty(x_shape, DType::Float32), b, o, block, packed);
    return;
  }
  std::shared_ptr<const SgemmPacked> own;
  BlockEpilogue whole = block;
  if (whole) whole.origin = o.data_ptr<float>();
  prologue_blocks(
      M, K, prologue,
      [&](int64_t rows) {
        if (rows < M)
          packed = packed_once(packed, N, K, own, [&] { return prepare_matmul_operand(b); });
      },
      [&](const TensorImpl& x_rows, int64_t r0, int64_t n) {
        matmul_epilogue_out(x_rows, b, *rows_of(o, r0, n, N), whole, packed);
      });
}

void linear_out(const TensorImpl& input, const TensorImpl& weight, const TensorImpl* bias,
                TensorImpl& out) {
  const Dims shape = linear_shape(input, weight);
  check_dtypes("linear", input, weight, out);
  check_out_shape("linear", out, shape);
  const int64_t out_f = weight.size(0), in_f = weight.size(1);
  if (bias != nullptr) {
    KILN_CHECK(bias->dtype() == input.dtype(), "linear", "expected bias of dtype ",
               dtype_short_name(input.dtype()), ", got ", describe(*bias));
    KILN_CHECK(bias->dim() == 1 && bias->size(0) == out_f, "linear", "expected bias [", out_f,
               "], got ", describe(*bias));
  }
  if (out.numel() == 0) return;
  if (input.device() != Device::CPU || weight.device() != Device::CPU ||
      out.device() != Device::CPU) [[unlikely]] {
    // x [.., in] as [rows, in] @ weight^T (a transposed view: nothing copied) + bias epilogue.
    cuda::check_same_device("linear", input, "input", weight, "weight");
    if (bias) cuda::check_same_device("linear", input, "input", *bias, "bias");
    KILN_CHECK(input.is_contiguous(), "linear", "expected a contiguous input on cuda, got ",
               describe(input), " with strides ", input.strides());
    const int64_t rows = out.numel() / out_f;  // out is not empty here, so out_f > 0
    TensorImplPtr x2 = make_view(input, Dims{rows, in_f}, Dims{in_f, 1}, input.storage_offset());
    TensorImplPtr wt = make_view(weight, Dims{in_f, out_f},
                                 Dims{weight.stride(1), weight.stride(0)}, weight.storage_offset());
    TensorImplPtr o2 = make_view(out, Dims{rows, out_f}, Dims{out_f, 1}, out.storage_offset());
    return cuda::matmul_out(*x2, *wt, bias, false, *o2, cuda::matmul_options(),
                            cuda::current_stream());
  }
  if (is_half(input.dtype())) {
    auto o = empty(out.sizes(), DType::Float32);
    TensorImplPtr b32 = bias ? to_f32(*bias) : TensorImplPtr();
    linear_out(*to_f32(input), *to_f32(weight), b32.get(), *o);
    copy_(out, *o);
    return;
  }
  const int64_t rows = out.numel() / out_f;
  // Input and output as [rows, features] matrices (a copy only when the views cannot be formed).
  TensorImplPtr x2 = views::reshape(input, Dims{rows, in_f});
  Dims o_strides;
  TensorImplPtr o2, tmp;
  if (views::compute_view_strides(out, Dims{rows, out_f}, o_strides)) {
    o2 = views::view(out, Dims{rows, out_f});
  } else {
    tmp = empty(Dims{rows, out_f}, out.dtype());
    o2 = tmp;
  }
  // weight^T is a [in, out] matrix with strides (weight.stride(1), weight.stride(0)): a
  // contiguous weight becomes sgemm's trans_b with no copy.
  const Mat wt{static_cast<char*>(weight.data()), in_f, out_f, weight.stride(1), weight.stride(0)};
  if (input.dtype() == DType::Float32) {
    Epilogue e;
    std::vector<float> bbuf;
    if (bias != nullptr) {
      e.bias_kind = Epilogue::Bias::PerCol;
      if (bias->stride(0) == 1) {
        e.bias = bias->data_ptr<float>();
      } else {
        bbuf.resize(static_cast<size_t>(out_f));
        for (int64_t j = 0; j < out_f; ++j) bbuf[j] = bias->data_ptr<float>()[j * bias->stride(0)];
        e.bias = bbuf.data();
      }
    }
    gemm_f32(mat_of(*x2), wt, mat_of(*o2), 1.0f, 0.0f, e);
  } else {
    if (bias != nullptr) {
      copy_(*o2, *bias);
      gemm_f64(mat_of(*x2), wt, mat_of(*o2), 1.0, 1.0);
    } else {
      gemm_f64(mat_of(*x2), wt, mat_of(*o2), 1.0, 0.0);
    }
  }
  if (tmp) copy_(out, *views::view(*tmp, out.sizes()));
}

}  // namespace kiln::kernels

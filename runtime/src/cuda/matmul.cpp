// cuBLASLt matmul (see kiln/runtime/cuda/matmul.h).
#if KILN_HAVE_CUDA
#include "kiln/runtime/cuda/matmul.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "api.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/pointwise.h"
#include "kiln/runtime/error.h"

namespace kiln::cuda {

namespace {

constexpr std::string_view kOp = "matmul";
// cuBLASLt's heuristics pick faster kernels (split-K among them) when given workspace; NVIDIA
// recommends 32 MiB on Hopper.
constexpr size_t kWorkspaceBytes = 32u << 20;
// How many of cuBLASLt's heuristic candidates a large product times (see tune()).
constexpr int kCandidates = 32;

// One handle and workspace for the process: matmuls are ordered on one stream (the eager stream)
// so far; concurrent streams would each need their own workspace.
struct Handle {
  cublasLtHandle_t handle = nullptr;
  DevicePtr workspace = 0;
};
Handle& handle() {
  static Handle* h = [] {
    auto* h = new Handle();  // process lifetime, like the device allocator
    api::check(api::cublaslt(kOp).cublasLtCreate(&h->handle), kOp, "cublasLtCreate");
    h->workspace = device_allocator().allocate(kWorkspaceBytes, current_stream());
    return h;
  }();
  return *h;
}

// A float32 matrix operand in cuBLASLt's column-major terms: rows x cols with leading
// dimension ld, transposed or not.
struct Operand {
  bool transposed;
  int64_t ld;
};
// A row-major [R, C] view is column-major C x R (ld = stride of dim 0); a transposed view
// (strides (1, R)) is column-major R x C, which the product reads transposed.
Operand operand(const TensorImpl& t, const char* name) {
  const int64_t r = t.sizes()[0], c = t.sizes()[1];
  if (t.strides()[1] == 1 && t.strides()[0] >= std::max<int64_t>(c, 1))
    return {false, t.strides()[0]};
  if (t.strides()[0] == 1 && t.strides()[1] >= std::max<int64_t>(r, 1))
    return {true, t.strides()[1]};
  fail(kOp, "expected ", name, " row-major or a transposed view on cuda, got ", describe(t),
       " with strides ", t.strides());
}

template <typename T>
void set(const api::CublasLt& lt, cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
         const T& v) {
  api::check(lt.cublasLtMatmulDescSetAttribute(d, a, &v, sizeof v), kOp,
             "cublasLtMatmulDescSetAttribute");
}

void* workspace_ptr(const Handle& h) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>(h.workspace));
}
cudaStream_t cuda_stream(StreamId s) {
  return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(s));
}

// A problem's descriptors and chosen algorithm, built once: eager calls of one shape then cost a
// lookup and the launch.
struct PlanKey {
  int64_t m, n, k, ld_b, ld_a;
  bool b_transposed, a_transposed, tf32;
  int epilogue;
  bool operator==(const PlanKey&) const = default;
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& p) const {
    size_t h = 0;
    for (int64_t v : {p.m, p.n, p.k, p.ld_b, p.ld_a, static_cast<int64_t>(p.b_transposed),
                      static_cast<int64_t>(p.a_transposed), static_cast<int64_t>(p.tf32),
                      static_cast<int64_t>(p.epilogue)}) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  cublasLtMatmulAlgo_t algo = {};
  bool tuned = false;
};

std::mutex& plans_mutex() {
  static std::mutex m;
  return m;
}

Plan& plan_for(const PlanKey& key, const api::CublasLt& lt) {
  static auto* plans = new std::unordered_map<PlanKey, Plan, PlanKeyHash>();
  auto [it, inserted] = plans->try_emplace(key);
  Plan& p = it->second;
  if (!inserted) return p;
  try {
    const cublasComputeType_t compute =
        key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    api::check(lt.cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F), kOp,
               "cublasLtMatmulDescCreate");
    set(lt, p.desc, CUBLASLT_MATMUL_DESC_TRANSA, key.b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(lt, p.desc, CUBLASLT_MATMUL_DESC_TRANSB, key.a_transposed ? CUBLAS_OP_T : CUBLAS_OP_N);
    set(lt, p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<cublasLtEpilogue_t>(key.epilogue));
    // Layouts as stored (before the op): our b is column-major n x k (or k x n transposed).
    const int64_t m = key.m, n = key.n, k = key.k;
    api::check(lt.cublasLtMatrixLayoutCreate(&p.la, CUDA_R_32F, key.b_transposed ? k : n,
                                             key.b_transposed ? n : k, key.ld_b),
               kOp, "cublasLtMatrixLayoutCreate");
    api::check(lt.cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_32F, key.a_transposed ? m : k,
                                             key.a_transposed ? k : m, key.ld_a),
               kOp, "cublasLtMatrixLayoutCreate");
    api::check(lt.cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_32F, n, m, n), kOp,
               "cublasLtMatrixLayoutCreate");
    cublasLtMatmulPreference_t pref = nullptr;
    api::check(lt.cublasLtMatmulPreferenceCreate(&pref), kOp, "cublasLtMatmulPreferenceCreate");
    const size_t workspace = kWorkspaceBytes;
    lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &workspace, sizeof workspace);
    p.candidates.resize(kCandidates);
    int found = 0;
    const cublasStatus_t st =
        lt.cublasLtMatmulAlgoGetHeuristic(handle().handle, p.desc, p.la, p.lb, p.lc, p.lc, pref,
                                          kCandidates, p.candidates.data(), &found);
    lt.cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
      fail(kOp, "cuBLASLt has no algorithm for [", m, ", ", k, "] x [", k, ", ", n,
           "] float32 (status ", static_cast<int>(st), ")");
    }
    p.candidates.resize(found);
    p.algo = p.candidates[0].algo;
  } catch (...) {
    plans->erase(it);
    throw;
  }
  return p;
}

// Large products try cuBLASLt's candidates once each on the real operands and keep the fastest
// (its heuristic's first pick is not always the fastest: PyTorch and cuBLAS's own
// cublasLtMatmulAlgoGetHeuristic docs recommend timing the top results); small ones, where a
// timing run costs more than it can win, keep the heuristic's first.
void tune(Plan& p, const PlanKey& key, const api::CublasLt& lt, Handle& h, void* a, void* b,
          void* out, StreamId stream) {
  p.tuned = true;
  constexpr double kTuneAboveFlops = 1e9;
  if (p.candidates.size() < 2 || 2.0 * key.m * key.n * key.k < kTuneAboveFlops) return;
  Event start, end;
  float best = INFINITY;
  const float alpha = 1.0f, beta = 0.0f;
  for (const cublasLtMatmulHeuristicResult_t& c : p.candidates) {
    float ms = INFINITY;
    for (int rep = 0; rep < 3; ++rep) {  // the first run of an algorithm warms it up
      start.record(stream);
      const cublasStatus_t st =
          lt.cublasLtMatmul(h.handle, p.desc, &alpha, b, p.la, a, p.lb, &beta, out, p.lc, out, p.lc,
                            &c.algo, workspace_ptr(h), kWorkspaceBytes, cuda_stream(stream));
      end.record(stream);
      end.synchronize();
      if (st != CUBLAS_STATUS_SUCCESS) break;
      if (rep > 0) ms = std::min(ms, start.elapsed_ms(end));
    }
    if (ms < best) {
      best = ms;
      p.algo = c.algo;
    }
  }
}

}  // namespace

MatmulOptions& matmul_options() {
  static MatmulOptions options;
  return options;
}

void matmul_out(const TensorImpl& a, const TensorImpl& b, const TensorImpl* bias, bool relu,
                TensorImpl& out, const MatmulOptions& options, StreamId stream) {
  for (const TensorImpl* t : {&a, &b, static_cast<const TensorImpl*>(&out)}) {
    KILN_CHECK(t->device() == Device::CUDA, kOp, "expected every tensor on cuda, got ",
               describe(*t));
    KILN_CHECK(t->dtype() == DType::Float32, kOp, "the CUDA backend runs float32 only so far, got ",
               describe(*t));
    KILN_CHECK(t->dim() == 2, kOp, "expected 2-D matrices on cuda, got ", describe(*t));
  }
  const int64_t m = a.sizes()[0], k = a.sizes()[1], n = b.sizes()[1];
  KILN_CHECK(b.sizes()[0] == k, kOp, "expected b of ", k, " rows (a is ", describe(a), "), got ",
             describe(b));
  KILN_CHECK(out.sizes()[0] == m && out.sizes()[1] == n && out.is_contiguous(), kOp,
             "expected a contiguous output of [", m, ", ", n, "], got ", describe(out));
  if (bias) {
    KILN_CHECK(bias->device() == Device::CUDA && bias->dtype() == DType::Float32 &&
                   bias->dim() == 1 && bias->sizes()[0] == n && bias->is_contiguous(),
               kOp, "expected a contiguous float32 bias of [", n, "] on cuda, got ",
               describe(*bias));
  }
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum, which cuBLASLt does not define: zeros (+ bias) (relu)
    fill32(reinterpret_cast<uintptr_t>(out.raw_data()), 0, out.nbytes(), stream);
    if (bias) {
      PointwiseExpr e;
      const PointwiseExpr::Value v = e.input(0);
      if (relu) e.unary(kernels::UnaryOp::Relu, v);
      const TensorImpl* in[] = {bias};
      pointwise_out(kOp, e, in, out, stream);
    }
    return;
  }
  // cuBLASLt's heuristic assumes 256-byte aligned operands (its default preference); views with
  // a storage offset are less aligned, so they are copied to fresh (512-byte aligned) blocks.
  auto aligned = [](const TensorImpl& t) {
    return reinterpret_cast<uintptr_t>(t.raw_data()) % 256 == 0;
  };
  auto fresh_copy = [&](const TensorImpl& t) {
    TensorImplPtr c = empty(t.sizes(), t.dtype(), Device::CUDA);
    copy_out(*c, t);
    return c;
  };
  if (!aligned(a) || !aligned(b) || !aligned(out) || (bias && !aligned(*bias))) [[unlikely]] {
    TensorImplPtr a2 = aligned(a) ? TensorImplPtr() : fresh_copy(a);
    TensorImplPtr b2 = aligned(b) ? TensorImplPtr() : fresh_copy(b);
    TensorImplPtr bias2 = !bias || aligned(*bias) ? TensorImplPtr() : fresh_copy(*bias);
    const TensorImpl* bias_used = bias2 ? bias2.get() : bias;
    if (aligned(out)) {
      return matmul_out(a2 ? *a2 : a, b2 ? *b2 : b, bias_used, relu, out, options, stream);
    }
    TensorImplPtr o2 = empty(out.sizes(), DType::Float32, Device::CUDA);
    matmul_out(a2 ? *a2 : a, b2 ? *b2 : b, bias_used, relu, *o2, options, stream);
    return copy_out(out, *o2);
  }
  // Row-major C = A B is column-major C^T = B^T A^T: cuBLASLt's "A" is our b, its "B" our a.
  const Operand ob = operand(b, "b"), oa = operand(a, "a");
  const cublasLtEpilogue_t epilogue =
      bias ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
           : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
  const PlanKey key{m,
                    n,
                    k,
                    ob.ld,
                    oa.ld,
                    ob.transposed,
                    oa.transposed,
                    options.allow_tf32,
                    static_cast<int>(epilogue)};
  const api::CublasLt& lt = api::cublaslt(kOp);
  Handle& h = handle();
  std::lock_guard lock(plans_mutex());
  Plan& plan = plan_for(key, lt);
  if (bias) {
    const void* ptr = bias->raw_data();
    set(lt, plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, ptr);
  }
  if (!plan.tuned) tune(plan, key, lt, h, a.raw_data(), b.raw_data(), out.raw_data(), stream);
  const float alpha = 1.0f, beta = 0.0f;
  api::check(lt.cublasLtMatmul(h.handle, plan.desc, &alpha, b.raw_data(), plan.la, a.raw_data(),
                               plan.lb, &beta, out.raw_data(), plan.lc, out.raw_data(), plan.lc,
                               &plan.algo, workspace_ptr(h), kWorkspaceBytes, cuda_stream(stream)),
             kOp, "cublasLtMatmul");
}

}  // namespace kiln::cuda
#endif  // KILN_HAVE_CUDA

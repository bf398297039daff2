// kernels::attention_out: per (batch, block of query rows), scores = scale · q kᵀ by sgemm into a
// per-thread tile, the mask added, softmax in place, then tile · v by sgemm straight into the
// output. The separate ops write the [B, L, S] scores to memory, read them back for the softmax,
// write the probabilities and read them again for the second product; here the tile stays in
// cache between the three steps, and the layouts the ops around attention produce (the key
// transposed, heads between sequence and features) are read through strides instead of copied.
#include "kiln/runtime/kernels/attention.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/kernels/reduce.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln::kernels {
namespace {

constexpr const char* kOp = "attention";

// The dims of a rank-3 or rank-4 operand, in the order [outer batch, inner batch, rows, cols]
// (rank 3 has no outer batch: -1). seq_first swaps the rows with the (inner) batch.
std::array<int64_t, 4> dims_of(int64_t rank, bool seq_first) {
  if (rank == 3)
    return seq_first ? std::array<int64_t, 4>{-1, 1, 0, 2} : std::array<int64_t, 4>{-1, 0, 1, 2};
  return seq_first ? std::array<int64_t, 4>{0, 2, 1, 3} : std::array<int64_t, 4>{0, 1, 2, 3};
}

// A [B0, B1, rows, cols] operand as sgemm reads it: its batch and row strides (elements), columns
// contiguous. `owned` holds a contiguous copy when the view's columns are not.
struct Operand {
  const float* p = nullptr;
  int64_t b0 = 1, b1 = 0, rows = 0, cols = 0, s0 = 0, s1 = 0, sr = 0;
  TensorImplPtr owned;
  int64_t batch() const { return b0 * b1; }
  const float* at(int64_t b) const { return p + b / b1 * s0 + b % b1 * s1; }
};

Operand operand(const TensorImpl& t, int64_t rank, bool seq_first, const char* what) {
  KILN_CHECK(t.dim() == rank, kOp, "expected ", what, " of rank ", rank, " (the query's), got ",
             describe(t));
  KILN_CHECK(t.dtype() == DType::Float32, kOp, "expected ", what, " of dtype f32, got ",
             describe(t));
  const TensorImpl* src = &t;
  Operand o;
  const std::array<int64_t, 4> d = dims_of(rank, seq_first);
  // sgemm needs unit column stride and a row stride of at least a row (else: a copy).
  const int64_t cols = t.size(d[3]);
  if ((cols > 1 && t.stride(d[3]) != 1) || (t.size(d[2]) > 1 && t.stride(d[2]) < cols)) {
    o.owned = empty(t.sizes(), DType::Float32);
    copy_(*o.owned, t);
    src = o.owned.get();
  }
  o.p = static_cast<const float*>(src->data());
  if (d[0] >= 0) {
    o.b0 = src->size(d[0]);
    o.s0 = src->stride(d[0]);
  }
  o.b1 = src->size(d[1]);
  o.s1 = src->stride(d[1]);
  o.rows = src->size(d[2]);
  o.cols = cols;
  o.sr = src->stride(d[2]);
  return o;
}

// The mask's strides over [B0, B1, L, S] (0 along broadcast dims).
struct Mask {
  const float* p = nullptr;
  int64_t s0 = 0, s1 = 0, sl = 0, ss = 0, b1 = 1;
  const float* row(int64_t b, int64_t l) const { return p + b / b1 * s0 + b % b1 * s1 + l * sl; }
};

Mask mask_of(const TensorImpl* m, const Operand& q, int64_t S) {
  Mask out;
  if (!m) return out;
  KILN_CHECK(m->dtype() == DType::Float32, kOp, "expected an additive mask of dtype f32, got ",
             describe(*m));
  KILN_CHECK(m->dim() <= 4, kOp, "expected a mask of rank <= 4, got ", describe(*m));
  const int64_t want[4] = {q.b0, q.b1, q.rows, S};
  int64_t strides[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < m->dim(); ++i) {
    const int64_t d = 4 - m->dim() + i, n = m->size(i);
    KILN_CHECK(n == 1 || n == want[d], kOp, "expected a mask broadcastable to [", q.b0, ", ", q.b1,
               ", ", q.rows, ", ", S, "], got ", describe(*m));
    strides[d] = n == 1 ? 0 : m->stride(i);
  }
  out.p = static_cast<const float*>(m->data());
  out.s0 = strides[0];
  out.s1 = strides[1];
  out.sl = strides[2];
  out.ss = strides[3];
  out.b1 = std::max<int64_t>(q.b1, 1);
  return out;
}

// Query rows per task: the scores tile (rows x S) and the batch's keys and values, which every
// row block of that batch reads again, within the L2 block of the target description; halved
// (not below two of the GEMM microkernel's row tiles) until every thread has two tasks.
int64_t rows_per_task(int64_t B, int64_t L, int64_t S, int64_t D, int64_t Dv) {
  const int64_t l2 = rt::target_params().l2_block_bytes;
  const int64_t kv = S * (D + Dv) * int64_t(sizeof(float));
  const int64_t budget = std::max(l2 - kv, l2 / 4);
  int64_t rows = std::clamp<int64_t>(budget / std::max<int64_t>(1, S * int64_t(sizeof(float))), 1,
                                     std::max<int64_t>(L, 1));
  const int64_t want = 2 * int64_t(num_threads());
  const int64_t min_rows = 2 * rt::gemm_micro_tile(rt::active_target().isa).mr;
  while (rows > min_rows && B * ((L + rows - 1) / rows) < want) rows = (rows + 1) / 2;
  return rows;
}

}  // namespace

void attention_out(const TensorImpl& q, const TensorImpl& k, const TensorImpl& v,
                   const TensorImpl* mask, double scale, bool seq_first, TensorImpl& out) {
  KILN_CHECK(q.dim() == 3 || q.dim() == 4, kOp, "expected query of rank 3 or 4, got ", describe(q));
  const int64_t rank = q.dim();
  const Operand Q = operand(q, rank, seq_first, "query"), K = operand(k, rank, seq_first, "key");
  const Operand V = operand(v, rank, seq_first, "value");
  const int64_t B = Q.batch(), L = Q.rows, D = Q.cols, S = K.rows, Dv = V.cols;
  KILN_CHECK(K.b0 == Q.b0 && K.b1 == Q.b1 && V.b0 == Q.b0 && V.b1 == Q.b1, kOp,
             "expected query, key and value with the same batch dims, got ", describe(q), ", ",
             describe(k), ", ", describe(v));
  KILN_CHECK(K.cols == D, kOp, "expected key features ", D, " (the query's), got ", describe(k));
  KILN_CHECK(V.rows == S, kOp, "expected value rows ", S, " (the key's), got ", describe(v));
  KILN_CHECK(std::isfinite(scale), kOp, "expected a finite scale, got ", scale);
  Dims want = q.sizes();
  want[dims_of(rank, seq_first)[3]] = Dv;
  KILN_CHECK(out.sizes() == want && out.dtype() == DType::Float32, kOp, "expected out f32", want,
             ", got ", describe(out));
  const Mask M = mask_of(mask, Q, S);
  if (B == 0 || L == 0 || Dv == 0) return;

  // The result goes straight into out when sgemm can write it (unit column stride, rows apart).
  TensorImplPtr tmp;
  TensorImpl* dst = &out;
  const std::array<int64_t, 4> od = dims_of(rank, seq_first);
  if ((Dv > 1 && out.stride(od[3]) != 1) || (L > 1 && out.stride(od[2]) < Dv)) {
    tmp = empty(out.sizes(), DType::Float32);
    dst = tmp.get();
  }
  Operand O = operand(*dst, rank, seq_first, "out");
  float* const o_base = static_cast<float*>(dst->data());

  const int64_t rows = rows_per_task(B, L, S, D, Dv), blocks = (L + rows - 1) / rows;
  const float alpha = static_cast<float>(scale);
  parallel_for(0, B * blocks, 1, [&](int64_t t0, int64_t t1) {
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(rows * S, 1)) * sizeof(float);
    float* tile = static_cast<float*>(scratch_allocate(bytes));
    struct Release {
      float* p;
      size_t n;
      ~Release() { scratch_deallocate(p, n); }
    } release{tile, bytes};
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / blocks, l0 = (t % blocks) * rows, m = std::min(rows, L - l0);
      sgemm(false, true, m, S, D, alpha, Q.at(b) + l0 * Q.sr, Q.sr, K.at(b), K.sr, 0.0f, tile, S);
      if (M.p)
        for (int64_t r = 0; r < m; ++r) {
          const float* mr = M.row(b, l0 + r);
          float* row = tile + r * S;
          for (int64_t s = 0; s < S; ++s) row[s] += mr[s * M.ss];
        }
      if (S > 0) softmax_rows_f32_inplace(tile, m, S);
      float* ob = o_base + (O.at(b) - O.p) + l0 * O.sr;
      sgemm(false, false, m, Dv, S, 1.0f, tile, S, V.at(b), V.sr, 0.0f, ob, O.sr);
    }
  });
  if (tmp) copy_(out, *tmp);
}

}  // namespace kiln::kernels

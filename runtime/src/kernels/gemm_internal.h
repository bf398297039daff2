#pragma once
// Internal interface between the GEMM driver (gemm.cpp) and its per-ISA microkernels
// (gemm_avx512.cpp, gemm_avx2.cpp, the portable and NEON kernels in gemm.cpp).
//
// The layout follows the BLIS / GotoBLAS idea (Goto & van de Geijn, "Anatomy of high-performance
// matrix multiplication", 2008; Van Zee & van de Geijn, "BLIS", 2015): op(A) and op(B) are copied
// ("packed") into contiguous panels so that the microkernel reads both operands with unit stride,
// whatever the transposes and leading dimensions of the caller.
//
//   packed A sliver (MR rows x kc): a[p * MR + r]      (zero rows past M)
//   packed B panel  (kc x NR cols): b[p * NR + j]      (zero columns past N)
//
// A microkernel computes one MR x NR tile of C in registers:
//   C[0:m, 0:n] = alpha * sum_p a[p*MR + r] * b[p*ldb + j] + beta * C[0:m, 0:n]
// (beta == 0: C is not read, so NaN/Inf there does not leak). m <= MR, n <= NR; `b` may also point
// straight into an unpacked row-major B whose rows hold at least NR readable columns (ldb = its
// leading dimension), which the driver uses for skinny products where packing B would double the
// memory traffic.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kiln/runtime/kernels/gemm.h"

namespace kiln::kernels::gemm_detail {

// What the microkernel adds to the tile it has just computed, before storing it (last K block
// only): C = clamp(C + row_bias[r] + col_bias[j] + residual[r, j], lo, hi). Keeping this in
// registers saves a second pass over C. Activations other than relu/clamp are applied by the
// driver afterwards (`clamp` is then false).
struct TileEpilogue {
  const float* row_bias = nullptr;  // m values, or null
  const float* col_bias = nullptr;  // n values, or null
  const float* residual = nullptr;  // [m, n] with row stride ld_residual, or null
  int64_t ld_residual = 0;
  // relu: max(x, 0) (NaN -> 0, as the scalar `x > 0 ? x : 0`); clamp: min(max(x, lo), hi)
  // (NaN propagates, as std::min(std::max(x, lo), hi)).
  enum class Act : uint8_t { None, Relu, Clamp } act = Act::None;
  float lo = 0.0f, hi = 0.0f;
};

// The epilogue of the tile j columns right of the one `e` describes (a row of tiles).
inline TileEpilogue columns_from(TileEpilogue e, int64_t j) {
  if (e.col_bias) e.col_bias += j;
  if (e.residual) e.residual += j;
  return e;
}

// The portable form of the above, for kernels that store first (NEON, scalar).
// A local copy of the epilogue: C's stores could alias the caller's, and the compiler would reload
// every field per element (on AVX2 that made the epilogue 4x the cost of a K = 16 product).
inline void apply_tile_epilogue(float* c, int64_t ldc, int m, int n, const TileEpilogue& epilogue) {
  const TileEpilogue e = epilogue;
  for (int r = 0; r < m; ++r) {
    float* row = c + r * ldc;
    const float rb = e.row_bias ? e.row_bias[r] : 0.0f;
    const float* res = e.residual ? e.residual + r * e.ld_residual : nullptr;
    for (int j = 0; j < n; ++j) {
      float x = row[j] + rb;
      if (e.col_bias) x += e.col_bias[j];
      if (res) x += res[j];
      if (e.act == TileEpilogue::Act::Relu) {
        x = x > 0.0f ? x : 0.0f;
      } else if (e.act == TileEpilogue::Act::Clamp) {
        x = std::min(std::max(x, e.lo), e.hi);
      }
      row[j] = x;
    }
  }
}

// C[0:m, 0:n] = alpha * A B + beta * C, then `ep` (null: none).
using MicroKernelFn = void (*)(int64_t kc, const float* a, const float* b, int64_t ldb, float* c,
                               int64_t ldc, int m, int n, float alpha, float beta,
                               const TileEpilogue* ep);
// The same for a row of tiles: C[0:m, 0:n] for any n, the B panel of columns [q*NR, q*NR + NR) at
// b + q * b_next (row stride ldb; the last panel may be ragged), `ep` for the tile at column 0
// (its col_bias and residual advance with the columns).
using MicroKernelRowFn = void (*)(int64_t kc, const float* a, const float* b, int64_t b_next,
                                  int64_t ldb, float* c, int64_t ldc, int m, int64_t n, float alpha,
                                  float beta, const TileEpilogue* ep);
// The same with A read in place: row r of the sliver (r < m) at a + r * lda, unit stride along K.
using MicroKernelRowAFn = void (*)(int64_t kc, const float* a, int64_t lda, const float* b,
                                   int64_t b_next, int64_t ldb, float* c, int64_t ldc, int m,
                                   int64_t n, float alpha, float beta, const TileEpilogue* ep);
// Packs rows [0, m) x columns [0, k) of op(A) into ceil(m / MR) slivers (see above).
using PackAFn = void (*)(bool trans, const float* A, int64_t lda, int64_t m, int64_t k, float* dst);
// Packs rows [0, k) x columns [0, n) of op(B) into ceil(n / NR) panels (see above).
using PackBFn = void (*)(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n, float* dst);

// C[i, j] = alpha * dot(A[i, 0:K], W[j, 0:K]) + beta * C[i, j] for i < m (<= 4), j < n (<= 4):
// rows of A and W contiguous. Used for A x W^T with few rows of A (small-batch linear layers),
// where packing the transposed W would cost more than the product.
using DotTileFn = void (*)(int m, int n, int64_t K, float alpha, const float* A, int64_t lda,
                           const float* W, int64_t ldw, float beta, float* C, int64_t ldc);

struct KernelSet {
  const char* name;
  int mr, nr;  // register tile
  int64_t kc;  // K block: an A sliver (MR x KC) stays in L1 while B panels stream from L2
  int64_t mc;  // rows of the packed A block shared by all threads (L3 resident), multiple of MR
  int64_t nc;  // columns of one thread's packed B block (L2 resident), multiple of NR
  MicroKernelFn kernel;
  PackAFn pack_a;
  PackBFn pack_b;
  DotTileFn dot_tile;                     // nullptr: the portable one
  MicroKernelRowFn kernel_row = nullptr;  // nullptr: `kernel` once per tile
  // nullptr: A is always packed. Otherwise a row-major A with few rows against a packed B is read
  // in place (the sliver's MR short rows stay in L1 across the row of tiles).
  MicroKernelRowAFn kernel_row_rows = nullptr;
  // The K block of a B packed once (sgemm_pack_b: weights against few rows of A), 0: kc. Longer
  // than kc: each K block restarts the row of tiles and re-reads C, and on the short-M products
  // of channels-last convs (49 x 160 x 960) blocks of 240 ran at 0.8x the rate of one block.
  int64_t kc_b = 0;
};

// A packed operand for ks whose panels the caller writes through *data (uninitialized; the layout
// of PackedView, zero padding included): for packers other than ks.pack_a / ks.pack_b (the
// Winograd weight transform writes its 36 matrices straight into theirs). Throws on allocation
// failure.
std::shared_ptr<SgemmPacked> allocate_packed(const KernelSet& ks, bool is_b, int64_t outer,
                                             int64_t K, float** data);

// The microkernel family sgemm uses now (set_sgemm_isa / KILN_GEMM_ISA / CPUID).
const KernelSet& active_kernel_set();

// Whether drivers may read A in place through KernelSet::kernel_row_rows (default: yes; the
// environment's KILN_GEMM_PACK_A=1 says no). Tests switch it to check both paths.
bool a_in_place_enabled();
void set_a_in_place(bool enabled);

// The K block sgemm cuts K into (equal blocks no larger than ks.kc, or ks.kc_b for a product
// with a B packed by sgemm_pack_b; a multiple of 4).
int64_t k_block(const KernelSet& ks, int64_t K, bool packed_b = false);

// An SgemmPacked as the drivers see it: the K block starting at p0 holds padded * kb floats at
// data + p0 * padded, where padded is M (an A) or N (a B) rounded up to the kernel's MR or NR; an
// A's slivers are MR * kb floats apart, a B's panels NR * kb.
struct PackedView {
  const KernelSet* ks;
  const float* data;
  int64_t outer, K, padded, kc;
  bool is_b;
};

// For a caller that writes the right operand's panels itself (the fused mbconv's depthwise writes
// its output straight into them): the panel width of products with the packed A, or 0 when A's K
// is longer than one K block (then the layout has several blocks and this path is not offered).
int b_panel_width(const SgemmPacked& A);
// C[M, N] = epilogue(A · B) with A from sgemm_pack_a and B in the packed layout for A's kernels:
// one K block, panels of b_panel_width(A) columns (K rows each, panel q at b_panels + q * nr * K;
// the columns past N are read but never stored).
void sgemm_packed_ab(const SgemmPacked& A, const float* b_panels, int64_t N, float* C, int64_t ldc,
                     const Epilogue& e);

// nullptr when the ISA is not compiled into this build.
const KernelSet* avx512_kernels();
const KernelSet* avx2_kernels();
const KernelSet* neon_kernels();
const KernelSet* portable_kernels();

// ---- Generic packing, instantiated in each ISA's translation unit ------------------------------

template <int MR>
inline void pack_a_generic(bool trans, const float* A, int64_t lda, int64_t m, int64_t k,
                           float* dst) {
  for (int64_t r0 = 0; r0 < m; r0 += MR) {
    const int mr = static_cast<int>(std::min<int64_t>(MR, m - r0));
    float* d = dst + r0 * k;
    if (trans) {  // op(A)(i, p) = A[p * lda + i]: MR contiguous values per p
      const float* s = A + r0;
      if (mr == MR) {
        for (int64_t p = 0; p < k; ++p) std::memcpy(d + p * MR, s + p * lda, MR * sizeof(float));
      } else {
        for (int64_t p = 0; p < k; ++p) {
          for (int r = 0; r < mr; ++r) d[p * MR + r] = s[p * lda + r];
          for (int r = mr; r < MR; ++r) d[p * MR + r] = 0.0f;
        }
      }
    } else {  // op(A)(i, p) = A[i * lda + p]: interleave MR row streams
      const float* s = A + r0 * lda;
      if (mr == MR) {
        for (int64_t p = 0; p < k; ++p) {
#pragma GCC unroll 16
          for (int r = 0; r < MR; ++r) d[p * MR + r] = s[r * lda + p];
        }
      } else {
        for (int64_t p = 0; p < k; ++p) {
          for (int r = 0; r < mr; ++r) d[p * MR + r] = s[r * lda + p];
          for (int r = mr; r < MR; ++r) d[p * MR + r] = 0.0f;
        }
      }
    }
  }
}

template <int NR>
inline void pack_b_generic(bool trans, const float* B, int64_t ldb, int64_t k, int64_t n,
                           float* dst) {
  for (int64_t j0 = 0; j0 < n; j0 += NR) {
    const int nr = static_cast<int>(std::min<int64_t>(NR, n - j0));
    float* d = dst + j0 * k;
    if (!trans) {  // op(B)(p, j) = B[p * ldb + j]: NR contiguous values per p
      const float* s = B + j0;
      if (nr == NR) {
        for (int64_t p = 0; p < k; ++p) std::memcpy(d + p * NR, s + p * ldb, NR * sizeof(float));
      } else {
        for (int64_t p = 0; p < k; ++p) {
          for (int j = 0; j < nr; ++j) d[p * NR + j] = s[p * ldb + j];
          for (int j = nr; j < NR; ++j) d[p * NR + j] = 0.0f;
        }
      }
    } else {  // op(B)(p, j) = B[j * ldb + p]: transpose NR row streams
      const float* s = B + j0 * ldb;
      for (int j = 0; j < nr; ++j) {
        const float* row = s + j * ldb;
        for (int64_t p = 0; p < k; ++p) d[p * NR + j] = row[p];
      }
      for (int j = nr; j < NR; ++j) {
        for (int64_t p = 0; p < k; ++p) d[p * NR + j] = 0.0f;
      }
    }
  }
}

}  // namespace kiln::kernels::gemm_detail

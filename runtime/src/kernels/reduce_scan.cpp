// cumsum / cumprod along one dim: [outer, D, inner] view of a contiguous input; inner == 1 scans
// each row, inner > 1 carries a row of running values (vectorized across columns).
// Floating scans accumulate in double, integer scans in int64 (outputs Int64, as in PyTorch).
#include <algorithm>
#include <vector>

#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/kernels/reduce.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "reduce_common.h"

namespace kiln::kernels {

using namespace red;

namespace {

constexpr int64_t kScanTile = 256;

template <typename T, bool Prod>
void scan(const T* x, sum_out_t<T>* y, int64_t outer, int64_t D, int64_t inner) {
  using O = sum_out_t<T>;
  using A = std::conditional_t<is_fp_v<T>, double, int64_t>;
  if (inner == 1) {
    parallel_for(0, outer, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(D, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) {
                     A acc = Prod ? A(1) : A(0);
                     for (int64_t i = 0; i < D; ++i) {
                       if constexpr (Prod) {
                         acc *= to<A>(x[r * D + i]);
                       } else {
                         acc += to<A>(x[r * D + i]);
                       }
                       y[r * D + i] = from<O>(acc);
                     }
                   }
                 });
    return;
  }
  const int64_t ntiles = (inner + kScanTile - 1) / kScanTile;
  const int64_t per = D * std::min(inner, kScanTile);
  parallel_for(0, outer * ntiles, std::max<int64_t>(1, kParallelGrain / std::max<int64_t>(per, 1)),
               [&](int64_t b, int64_t e) {
                 A acc[kScanTile];
                 for (int64_t t = b; t < e; ++t) {
                   const int64_t o = t / ntiles, j0 = (t % ntiles) * kScanTile;
                   const int64_t tw = std::min(kScanTile, inner - j0);
                   for (int64_t j = 0; j < tw; ++j) acc[j] = Prod ? A(1) : A(0);
                   for (int64_t k = 0; k < D; ++k) {
                     const int64_t off = (o * D + k) * inner + j0;
                     for (int64_t j = 0; j < tw; ++j) {
                       if constexpr (Prod) {
                         acc[j] *= to<A>(x[off + j]);
                       } else {
                         acc[j] += to<A>(x[off + j]);
                       }
                       y[off + j] = from<O>(acc[j]);
                     }
                   }
                 }
               });
}

template <bool Prod>
void scan_impl(const TensorImpl& self, int64_t dim, TensorImpl& out, std::string_view op) {
  const DType odt = sum_result_dtype(self.dtype());
  KILN_CHECK(out.sizes() == self.sizes(), op, "expected out of shape ", self.sizes(), ", got ",
             out.sizes());
  KILN_CHECK(out.dtype() == odt, op, "expected out of dtype ", dtype_name(odt), ", got ",
             dtype_name(out.dtype()));
  const int64_t d = wrap_dim(dim, self.dim(), op);
  if (self.numel() == 0) return;
  int64_t outer = 1, D = 1, inner = 1;
  for (int64_t i = 0; i < self.dim(); ++i) {
    if (i < d) outer *= self.sizes()[i];
    if (i == d) D = self.sizes()[i];
    if (i > d) inner *= self.sizes()[i];
  }
  auto x = views::contiguous(self);
  const bool direct = out.is_contiguous();
  TensorImplPtr y = direct ? TensorImplPtr(&out) : empty(out.sizes(), odt);
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = decltype(tag);
    scan<T, Prod>(x->data_ptr<T>(), y->data_ptr<sum_out_t<T>>(), outer, D, inner);
  });
  if (!direct) copy_(out, *y);
}

}  // namespace

void cumsum_out(const TensorImpl& self, int64_t dim, TensorImpl& out) {
  scan_impl<false>(self, dim, out, "cumsum");
}
void cumprod_out(const TensorImpl& self, int64_t dim, TensorImpl& out) {
  scan_impl<true>(self, dim, out, "cumprod");
}

}  // namespace kiln::kernels

// embedding / embedding_backward / dropout.
#include "kiln/runtime/kernels/embedding.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kiln/runtime/cuda/random.h"
#include "kiln/runtime/kernels/loop.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_common.h"

namespace kiln::kernels {
namespace {

using namespace nn_detail;

// Indices as a contiguous int64 tensor; checks the dtype and that all are in [0, V).
TensorImplPtr checked_indices(std::string_view op, const TensorImpl& idx, int64_t V) {
  KILN_CHECK(is_integral(idx.dtype(), false), op, "expected indices of an integer dtype, got ",
             dtype_name(idx.dtype()));
  TensorImplPtr r =
      idx.dtype() == DType::Int64 ? views::contiguous(idx) : to_dtype(&idx, DType::Int64);
  const int64_t* p = r->data_ptr<int64_t>();
  for (int64_t i = 0; i < r->numel(); ++i) {
    KILN_CHECK(p[i] >= 0 && p[i] < V, op, "expected indices in [0, ", V, ") (num_embeddings), got ",
               p[i]);
  }
  return r;
}

void check_weight(std::string_view op, std::span<const int64_t> w) {
  KILN_CHECK(w.size() == 2, op, "expected weight of 2 dims (num_embeddings, embedding_dim), got ",
             dims_str(w));
}

}  // namespace

Dims embedding_output_shape(std::span<const int64_t> indices, std::span<const int64_t> weight) {
  check_weight("embedding", weight);
  Dims s(indices);
  s.push_back(weight[1]);
  return s;
}

void embedding_out(const TensorImpl& weight, const TensorImpl& indices, TensorImpl& out) {
  constexpr std::string_view op = "embedding";
  const Dims os = embedding_output_shape(indices.sizes(), weight.sizes());
  check_shape(op, out, os, "out");
  KILN_CHECK(out.dtype() == weight.dtype(), op, "expected out of dtype ",
             dtype_name(weight.dtype()), " (as weight), got ", dtype_name(out.dtype()));
  const int64_t V = weight.size(0), D = weight.size(1);
  auto idx = checked_indices(op, indices, V);
  auto w = views::contiguous(weight);
  OutTarget y(&out);
  const int64_t n = idx->numel();
  const size_t row_bytes = static_cast<size_t>(D) * weight.itemsize();
  const char* wp = static_cast<const char*>(w->data());
  char* yp = static_cast<char*>(y.ptr);
  const int64_t* ip = idx->data_ptr<int64_t>();
  parallel_for(0, n, std::max<int64_t>(1, 65536 / std::max<int64_t>(row_bytes, 1)),
               [&](int64_t a, int64_t b) {
                 for (int64_t i = a; i < b; ++i)
                   std::memcpy(yp + i * row_bytes, wp + ip[i] * row_bytes, row_bytes);
               });
  y.finish();
}

void embedding_backward_out(const TensorImpl& grad_output, const TensorImpl& indices,
                            std::optional<int64_t> padding_idx, bool scale_grad_by_freq,
                            TensorImpl& grad_weight) {
  constexpr std::string_view op = "embedding_backward";
  check_weight(op, grad_weight.sizes());
  check_floating(op, grad_weight, "grad_weight");
  check_same_dtype(op, grad_weight, grad_output, "grad_output");
  const int64_t V = grad_weight.size(0), D = grad_weight.size(1);
  check_shape(op, grad_output, embedding_output_shape(indices.sizes(), grad_weight.sizes()),
              "grad_output");
  int64_t pad = -1;
  if (padding_idx) {
    pad = *padding_idx < 0 ? *padding_idx + V : *padding_idx;
    KILN_CHECK(pad >= 0 && pad < V, op, "expected padding_idx in [", -V, ", ", V, "), got ",
               *padding_idx);
  }
  auto idx = checked_indices(op, indices, V);
  const int64_t n = idx->numel();
  const int64_t* ip = idx->data_ptr<int64_t>();
  std::vector<int64_t> counts;
  if (scale_grad_by_freq) {
    counts.assign(static_cast<size_t>(V), 0);
    for (int64_t i = 0; i < n; ++i) ++counts[ip[i]];
  }
  const DType cd = grad_weight.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  auto gy = grad_output.dtype() == cd && grad_output.is_contiguous()
                ? views::contiguous(grad_output)
                : to_dtype(&grad_output, cd);
  OutTarget gw(&grad_weight, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const T* g = gy->data_ptr<T>();
    T* w = gw.get<T>();
    // Each task owns a range of rows of grad_weight and scans all indices: no write conflicts.
    const int nt = num_threads();
    const int64_t parts = (n * D < 65536 || nt == 1) ? 1 : std::min<int64_t>(nt, V);
    parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t part = p0; part < p1; ++part) {
        const int64_t v0 = V * part / parts, v1 = V * (part + 1) / parts;
        std::fill(w + v0 * D, w + v1 * D, T(0));
        for (int64_t i = 0; i < n; ++i) {
          const int64_t v = ip[i];
          if (v < v0 || v >= v1 || v == pad) continue;
          T* dst = w + v * D;
          const T* src = g + i * D;
          if (scale_grad_by_freq) {
            const T s = T(1) / static_cast<T>(counts[v]);
            for (int64_t d = 0; d < D; ++d) dst[d] += src[d] * s;
          } else {
            for (int64_t d = 0; d < D; ++d) dst[d] += src[d];
          }
        }
      }
    });
  });
  gw.finish();
}

// ---------------------------------------------------------------------------------------------
namespace {

void dropout_impl(std::string_view op, const TensorImpl& input, const TensorImpl& mask, double p,
                  TensorImpl& out) {
  check_floating(op, input, "input");
  check_same_dtype(op, input, out, "out");
  check_shape(op, out, input.sizes(), "out");
  KILN_CHECK(mask.dtype() == DType::Bool || mask.dtype() == DType::UInt8, op,
             "expected mask of dtype bool or uint8, got ", dtype_name(mask.dtype()));
  KILN_CHECK(p >= 0.0 && p <= 1.0, op, "expected p in [0, 1], got ", p);
  if (input.device() == Device::CUDA || mask.device() == Device::CUDA ||
      out.device() == Device::CUDA) {
    return cuda::dropout_out(op, input, mask, p, out);
  }
  const Dims mstrides = broadcast_strides(mask, input.sizes(), op);
  const DType cd = input.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  const double scale = p >= 1.0 ? 0.0 : 1.0 / (1.0 - p);
  auto x = input.dtype() == cd ? TensorImplPtr{} : to_dtype(&input, cd);
  const TensorImpl& xin = x ? *x : input;
  OutTarget y(&out, cd);
  TensorImplPtr yv = y.tmp ? y.tmp : TensorImplPtr{};
  TensorImpl& yout = yv ? *yv : out;
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    const int64_t es = static_cast<int64_t>(sizeof(T));
    std::array<Dims, 3> bs;
    for (size_t d = 0; d < input.sizes().size(); ++d) {
      bs[0].push_back(yout.strides()[d] * es);
      bs[1].push_back(xin.strides()[d] * es);
      bs[2].push_back(mstrides[d]);  // mask elements are 1 byte
    }
    std::array<char*, 3> base{static_cast<char*>(yout.data()), static_cast<char*>(xin.data()),
                              static_cast<char*>(mask.data())};
    auto plan = plan_loop<3>(input.sizes(), base, bs);
    const T s = static_cast<T>(scale);
    for_each_strided(plan, [&](char** ptr, const int64_t* st, int64_t n) {
      if (st[0] == es && st[1] == es && st[2] == 1) {
        T* yo = reinterpret_cast<T*>(ptr[0]);
        const T* xi = reinterpret_cast<const T*>(ptr[1]);
        const uint8_t* m = reinterpret_cast<const uint8_t*>(ptr[2]);
        for (int64_t i = 0; i < n; ++i) yo[i] = m[i] ? xi[i] * s : T(0);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t m = *reinterpret_cast<const uint8_t*>(ptr[2] + i * st[2]);
          const T v = *reinterpret_cast<const T*>(ptr[1] + i * st[1]);
          *reinterpret_cast<T*>(ptr[0] + i * st[0]) = m ? v * s : T(0);
        }
      }
    });
  });
  y.finish();
}

}  // namespace

void dropout_out(const TensorImpl& input, const TensorImpl& mask, double p, TensorImpl& out) {
  dropout_impl("dropout", input, mask, p, out);
}

void dropout_backward_out(const TensorImpl& grad_output, const TensorImpl& mask, double p,
                          TensorImpl& grad_input) {
  dropout_impl("dropout_backward", grad_output, mask, p, grad_input);
}

}  // namespace kiln::kernels

// F.interpolate's nearest and bilinear 2-d modes and their backward. The source indices and
// weights of each output row and column are computed once per call (they depend only on the
// extents), then every (n, c) plane is resampled independently: parallel over planes, and the
// backward accumulates only into its own grad_input plane, so no atomics and the same sums on
// any thread count.
#include "kiln/runtime/kernels/interpolate.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kiln/runtime/thread_pool.h"
#include "nn_common.h"

namespace kiln::kernels {
namespace {

using namespace nn_detail;

// Source positions of one output dim: out[o] reads i0[o] with weight w0[o] and i1[o] with w1[o]
// (nearest: w0 = 1, w1 = 0, i1 = i0).
template <typename T>
struct Taps {
  std::vector<int64_t> i0, i1;
  std::vector<T> w0, w1;
};

template <typename T>
Taps<T> taps(int64_t in, int64_t out, double scale, const InterpolateParams& p) {
  Taps<T> t;
  t.i0.resize(out), t.i1.resize(out), t.w0.resize(out), t.w1.resize(out);
  if (p.mode == InterpolateMode::Nearest) {
    // PyTorch's nearest_idx: identity and exact 2x first, then the float step.
    const float step = scale > 0 ? static_cast<float>(1.0 / scale)
                                 : static_cast<float>(in) / static_cast<float>(out);
    for (int64_t o = 0; o < out; ++o) {
      int64_t i = out == in       ? o
                  : out == 2 * in ? o >> 1
                                  : static_cast<int64_t>(std::floor(static_cast<float>(o) * step));
      i = std::min(i, in - 1);
      t.i0[o] = t.i1[o] = i;
      t.w0[o] = T(1), t.w1[o] = T(0);
    }
    return t;
  }
  const T step = p.align_corners
                     ? (out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0))
                 : scale > 0 ? static_cast<T>(1.0 / scale)
                             : static_cast<T>(in) / static_cast<T>(out);
  for (int64_t o = 0; o < out; ++o) {
    const T x = p.align_corners ? step * static_cast<T>(o)
                                : std::max(step * (static_cast<T>(o) + T(0.5)) - T(0.5), T(0));
    const int64_t i = std::min(static_cast<int64_t>(std::floor(x)), in - 1);
    const T frac = std::min(std::max(x - static_cast<T>(i), T(0)), T(1));
    t.i0[o] = i;
    t.i1[o] = i + (i < in - 1 ? 1 : 0);
    t.w0[o] = T(1) - frac;
    t.w1[o] = frac;
  }
  return t;
}

struct Geom {
  int64_t planes, H, W, Ho, Wo;
};

// input/grad_input [.., H, W] against output/grad_output [.., Ho, Wo]: rank 4, same N and C,
// non-empty, a known mode, align_corners only with bilinear, finite non-negative scales.
Geom check(std::string_view op, const TensorImpl& in, const TensorImpl& out,
           const InterpolateParams& p) {
  KILN_CHECK(p.mode == InterpolateMode::Nearest || p.mode == InterpolateMode::Bilinear, op,
             "expected mode 0 (nearest) or 1 (bilinear), got ", static_cast<int64_t>(p.mode));
  KILN_CHECK(!p.align_corners || p.mode == InterpolateMode::Bilinear, op,
             "align_corners can only be set with mode bilinear, got mode nearest");
  KILN_CHECK(
      std::isfinite(p.scale_h) && std::isfinite(p.scale_w) && p.scale_h >= 0 && p.scale_w >= 0, op,
      "expected finite scale factors > 0 (or 0 for none), got (", p.scale_h, ", ", p.scale_w, ")");
  KILN_CHECK(in.dim() == 4, op, "expected a 4-d (N, C, H, W) input, got ", dims_str(in.sizes()));
  KILN_CHECK(out.dim() == 4 && out.size(0) == in.size(0) && out.size(1) == in.size(1), op,
             "expected an output of shape [", in.size(0), ", ", in.size(1), ", H_out, W_out], got ",
             dims_str(out.sizes()));
  KILN_CHECK(in.size(2) > 0 && in.size(3) > 0 && out.size(2) > 0 && out.size(3) > 0, op,
             "expected non-empty spatial dims, got input ", dims_str(in.sizes()), " and output ",
             dims_str(out.sizes()));
  // A scale factor must be the one the output size came from (floor(in * scale) == out), so the
  // source step 1/scale keeps every index near the input; an artifact's others are refused.
  for (int k = 0; k < 2; ++k) {
    const double scale = k == 0 ? p.scale_h : p.scale_w;
    const int64_t n = in.size(2 + k), o = out.size(2 + k);
    KILN_CHECK(scale == 0 || std::floor(static_cast<double>(n) * scale) == static_cast<double>(o),
               op, "scale factor ", scale, " of dim ", 2 + k, " gives ",
               std::floor(static_cast<double>(n) * scale), " outputs for ", n, " inputs, got ", o);
  }
  check_floating(op, in, "input");
  check_same_dtype(op, in, out, "output");
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

int64_t plane_grain(const Geom& g) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(g.H * g.W + g.Ho * g.Wo, 1));
}

template <typename T>
void forward(const Geom& g, const InterpolateParams& p, const T* x, T* y) {
  const Taps<T> th = taps<T>(g.H, g.Ho, p.scale_h, p), tw = taps<T>(g.W, g.Wo, p.scale_w, p);
  const bool nearest = p.mode == InterpolateMode::Nearest;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const T* xp = x + pl * g.H * g.W;
      T* yp = y + pl * g.Ho * g.Wo;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        const T* r0 = xp + th.i0[oh] * g.W;
        const T* r1 = xp + th.i1[oh] * g.W;
        if (nearest) {  // a copy: no 0 * x terms (an inf input stays inf, not NaN)
          for (int64_t ow = 0; ow < g.Wo; ++ow) yp[oh * g.Wo + ow] = r0[tw.i0[ow]];
          continue;
        }
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const int64_t a = tw.i0[ow], b = tw.i1[ow];
          const T top = r0[a] * tw.w0[ow] + r0[b] * tw.w1[ow];
          const T bottom = r1[a] * tw.w0[ow] + r1[b] * tw.w1[ow];
          yp[oh * g.Wo + ow] = top * th.w0[oh] + bottom * th.w1[oh];
        }
      }
    }
  });
}

template <typename T>
void backward(const Geom& g, const InterpolateParams& p, const T* gy, T* gx) {
  const Taps<T> th = taps<T>(g.H, g.Ho, p.scale_h, p), tw = taps<T>(g.W, g.Wo, p.scale_w, p);
  const bool nearest = p.mode == InterpolateMode::Nearest;
  parallel_for(0, g.planes, plane_grain(g), [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      T* gp = gx + pl * g.H * g.W;
      std::fill(gp, gp + g.H * g.W, T(0));
      const T* yp = gy + pl * g.Ho * g.Wo;
      for (int64_t oh = 0; oh < g.Ho; ++oh) {
        T* r0 = gp + th.i0[oh] * g.W;
        T* r1 = gp + th.i1[oh] * g.W;
        if (nearest) {
          for (int64_t ow = 0; ow < g.Wo; ++ow) r0[tw.i0[ow]] += yp[oh * g.Wo + ow];
          continue;
        }
        for (int64_t ow = 0; ow < g.Wo; ++ow) {
          const T v = yp[oh * g.Wo + ow];
          const int64_t a = tw.i0[ow], b = tw.i1[ow];
          const T top = v * th.w0[oh], bottom = v * th.w1[oh];
          r0[a] += top * tw.w0[ow];
          r0[b] += top * tw.w1[ow];
          r1[a] += bottom * tw.w0[ow];
          r1[b] += bottom * tw.w1[ow];
        }
      }
    }
  });
}

}  // namespace

int64_t interpolate_output_size(std::string_view op, int64_t in, double scale) {
  KILN_CHECK(std::isfinite(scale) && scale > 0, op, "expected a finite scale factor > 0, got ",
             scale);
  const double size = std::floor(static_cast<double>(in) * scale);
  constexpr double kMax = static_cast<double>(int64_t(1) << 40);
  KILN_CHECK(size >= 1 && size <= kMax, op, "expected an output size in [1, 2^40], got ", size,
             " for input size ", in, " and scale factor ", scale);
  return static_cast<int64_t>(size);
}

void interpolate_out(const TensorImpl& input, const InterpolateParams& p, TensorImpl& out) {
  constexpr std::string_view op = "interpolate";
  const Geom g = check(op, input, out, p);
  const DType cd = compute_dtype(input.dtype());
  auto x = input_as(input, cd);
  OutTarget y(&out, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    forward<T>(g, p, x->data_ptr<T>(), y.get<T>());
  });
  y.finish();
}

void interpolate_backward_out(const TensorImpl& grad_output, const InterpolateParams& p,
                              TensorImpl& grad_input) {
  constexpr std::string_view op = "interpolate_backward";
  const Geom g = check(op, grad_input, grad_output, p);
  const DType cd = compute_dtype(grad_input.dtype());
  auto gy = input_as(grad_output, cd);
  OutTarget gx(&grad_input, cd);
  dispatch_fd(cd, [&](auto tag) {
    using T = decltype(tag);
    backward<T>(g, p, gy->data_ptr<T>(), gx.get<T>());
  });
  gx.finish();
}

}  // namespace kiln::kernels

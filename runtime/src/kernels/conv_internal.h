#pragma once
// Private to the conv kernels: resolved conv2d geometry and the direct depthwise kernels.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/runtime/allocator.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/gemm.h"
#include "simd_util.h"

namespace kiln::kernels::conv_detail {

// The activations the conv kernels apply in registers; the others go through apply_activation.
inline bool vector_activation(Activation a) {
  return a == Activation::None || a == Activation::Relu || a == Activation::Relu6 ||
         a == Activation::Clamp;
}

inline __m256 activate(__m256 v, const ConvEpilogue& ep) {
  switch (ep.activation) {
    case Activation::Relu:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case Activation::Relu6:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_setzero_ps()), _mm256_set1_ps(6.0f));
    case Activation::Clamp:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.clamp_min)),
                           _mm256_set1_ps(ep.clamp_max));
    default:
      return v;
  }
}

struct ConvGeom {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input
  int64_t O = 0, KH = 0, KW = 0;       // weight [O, C/G, KH, KW]
  int64_t Ho = 0, Wo = 0;              // output
  int64_t G = 1, Cg = 0, Og = 0;       // groups, channels per group
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  // Floats between consecutive input planes (channels, then images); 0: H * W. Only
  // depthwise_conv2d_f32 reads it (the fused block's bands of an image's rows, read in place).
  int64_t x_plane = 0;

  int64_t HW() const { return H * W; }
  int64_t XPlane() const { return x_plane > 0 ? x_plane : H * W; }
  int64_t HoWo() const { return Ho * Wo; }
  int64_t K() const { return Cg * KH * KW; }  // GEMM depth (rows of the column matrix)
  // 1x1, stride 1, no padding: the input plane block already is the column matrix.
  bool direct_1x1() const { return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
  bool depthwise() const { return G == C && G == O && G > 1; }
};

// Validates a conv2d (input, weight) pair and resolves its geometry; errors name `op`.
ConvGeom make_geom(std::string_view op, std::span<const int64_t> in, std::span<const int64_t> wt,
                   const Conv2dParams& p);

// Scratch from the region the executor lends (warm arena bytes), else the runtime allocator
// (cached size classes: no OS call in a steady loop). See scratch_allocate.
template <typename T>
class ConvScratch {
 public:
  explicit ConvScratch(int64_t n)
      : bytes_(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T)) {
    KILN_CHECK(n >= 0 && static_cast<uint64_t>(n) <= SIZE_MAX / sizeof(T), "conv2d",
               "expected a scratch size in [0, ", SIZE_MAX / sizeof(T), "] elements, got ", n);
    p_ = static_cast<T*>(scratch_allocate(bytes_));
  }
  ~ConvScratch() { scratch_deallocate(p_, bytes_); }
  ConvScratch(const ConvScratch&) = delete;
  ConvScratch& operator=(const ConvScratch&) = delete;
  T* get() const { return p_; }

 private:
  size_t bytes_;
  T* p_;
};

// Winograd F(4x4, 3x3) (conv_winograd.cpp): 3x3, stride 1, dilation 1, one group, float32.
bool winograd_applicable(const ConvGeom& g);
// Whether Winograd beats the GEMM path for this geometry (measured by bench_conv; the environment
// variable KILN_CONV_WINOGRAD=always|never overrides, for comparisons).
bool winograd_profitable(const ConvGeom& g);
// The 36 transformed filters U_ξ[O, C], each packed for the GEMM microkernel.
struct WinogradWeight {
  int64_t O = 0, C = 0;
  std::vector<std::shared_ptr<const SgemmPacked>> xi;
  size_t nbytes() const;
};
// `w`: the contiguous [O, C, 3, 3] weight.
std::shared_ptr<const WinogradWeight> winograd_prepare(const ConvGeom& g, const float* w);
// y = act(conv(x, w) + bias + residual), all contiguous NCHW; bias / residual may be null.
void winograd_conv2d_f32(const ConvGeom& g, const WinogradWeight& w, const float* x,
                         const float* bias, const float* residual, float* y,
                         const ConvEpilogue& ep);

// Direct conv for few input channels (conv_direct.cpp): one group, C <= 4, stride <= 2, dilation 1,
// Wo >= 16 (image stems, where im2col + GEMM's K is too small to pay for the column matrix).
// KILN_CONV_DIRECT=never turns it off, for comparisons.
bool direct_conv_applicable(const ConvGeom& g);
// The weight [O, C, KH, KW] rearranged for it: [ceil(O/4)][C*KH*KW][4], zero past O.
int64_t direct_weight_floats(const ConvGeom& g);
void direct_pack_weight(const ConvGeom& g, const float* w, float* dst);
// y = act(conv(x, w) + bias + residual), all contiguous NCHW; `wr` from direct_pack_weight; bias /
// residual may be null. Any activation (the vector ones in registers).
void direct_conv2d_f32(const ConvGeom& g, const float* wr, const float* x, const float* bias,
                       const float* residual, float* y, const ConvEpilogue& ep);

// y[N, C, Ho, Wo] = depthwise(x, w) + bias, then residual and activation. All contiguous.
// bias / residual may be null. False (nothing written) when padding or dilation would make the
// per-thread plane buffers larger than max(2^26, 16 input planes) floats: the caller then uses
// the im2col path.
bool depthwise_conv2d_f32(const ConvGeom& g, const float* x, const float* w, const float* bias,
                          const float* residual, float* y, const ConvEpilogue& ep);

// y[o * ldy + p] = act(yt[p * ldt + o] + res[o * ld_res + p]) for p < cols, o < rows: the
// transpose back to NCHW of a product computed with the channels across the vector lanes (or any
// plain transpose), with what remains of the epilogue (`res` null: none; `act` None: none).
void transpose_epilogue(const float* yt, int64_t ldt, int64_t cols, int64_t rows, float* y,
                        int64_t ldy, const float* res, int64_t ld_res, const Epilogue& act);

// The input planes of the channel-interleaved depthwise path: float32, or bytes read as their
// value minus `zero_point` (the int8 convolution: every value an integer, the sums of at most
// 256 products of two bytes below 2^24, so the float arithmetic is exact). Exactly one pointer
// set; channel c's row h starts at element c * plane + h * width; bytes are read only within the
// first `count` elements.
struct DepthwiseInput {
  const float* f32 = nullptr;
  const uint8_t* u8 = nullptr;
  const int8_t* s8 = nullptr;
  int32_t zero_point = 0;
  int64_t plane = 0, width = 0, count = 0;
};
// Where that path's sums go: per block of cb <= 8 channels (planes plane0 .. plane0 + cb, channel
// c0 onward) and band of `count` output pixels starting at pixel `off` of each plane,
// O[p * 8 + j] = channel j's sum at pixel off + p, bias included (O holds whole vectors of 8
// pixels past count). Called from several threads at once, for different blocks.
class DepthwiseSink {
 public:
  virtual ~DepthwiseSink() = default;
  virtual void store(int64_t plane0, int64_t c0, int cb, int64_t off, int64_t count,
                     const float* O) const = 0;
};
// Whether the channel-interleaved path takes g: outputs up to 32 wide, 3x3 (dilation 1, stride
// <= 2) up to 128 wide.
bool depthwise_narrow_fits(const ConvGeom& g);
// depthwise(x, w) + bias through that path, the sums handed to `sink`; w [C][KH * KW] float32,
// bias C values or null. False (nothing written) where it does not fit or its buffers would
// exceed the plane bound.
bool depthwise_narrow_to(const ConvGeom& g, const DepthwiseInput& x, const float* w,
                         const float* bias, const DepthwiseSink& sink);

// The depthwise conv of one image (g.N == 1; x's planes g.XPlane() apart) written as the right
// operand of a GEMM: panels of nr output pixels, [ceil(Ho * Wo / nr)][C][nr] (the layout
// sgemm_packed_ab reads), with bias and `ep`'s activation, which must have a vector form or be
// none (no residual). Spares the fused mbconv block the second pass of packing its depthwise
// output. False (nothing written) where the channel-interleaved path does not take g or nr is not
// a multiple of 8: the caller runs depthwise_conv2d_f32 and packs instead.
bool depthwise_to_panels(const ConvGeom& g, const float* x, const float* w, const float* bias,
                         const ConvEpilogue& ep, int64_t nr, float* panels);
// Whether depthwise_to_panels takes g, ep and nr.
bool depthwise_panels_fit(const ConvGeom& g, const ConvEpilogue& ep, int64_t nr);
// depthwise_to_panels from an input already channel-interleaved and padded, as the fused block's
// expansion writes it (expand_interleaved): channels [8b, 8b + 8) at xi + b * block_floats, laid
// out [g.H][Wb][8] with Wb = (Wo - 1) * sw + (KW - 1) * dw + 1 padded columns (zero where they fall
// outside the image) and g.H = the rows the outputs read (g.ph == 0: padding rows are zero rows of
// xi); each block carries 8 spare pixels at its end (block_floats >= (g.H * Wb + 8) * 8).
bool depthwise_interleaved_to_panels(const ConvGeom& g, const float* xi, int64_t block_floats,
                                     const float* w, const float* bias, const ConvEpilogue& ep,
                                     int64_t nr, float* panels);
// One row of the fused block's expansion into that layout: for pixels [0, cols) of x (channel c at
// x + c * x_plane), channels e < E: out[e / 8 * block_floats + p * 8 + e % 8] =
// act(Σ_c w[c][e] · x[c][p] + bias[e]), with w the expansion weight packed by
// pack_expand_panels and `bias` E values or null. ep: a vector activation (or none).
void expand_interleaved(int64_t C, int64_t E, const float* x, int64_t x_plane, int64_t cols,
                        const float* w_panels, const float* bias, const ConvEpilogue& ep,
                        float* out, int64_t block_floats);
// We[E, C] -> panels of 16 output channels, [ceil(E / 16)][C][16], zero past E.
void pack_expand_panels(const float* we, int64_t E, int64_t C, float* out);
inline int64_t expand_panels_floats(int64_t E, int64_t C) {
  return (E + 15) / 16 * 16 * C;
}

// Depthwise conv over a channels-last image: x[H, W, C] -> y[Ho, Wo, C] (channel stride 1, pixel
// stride C), y = act(Σ taps w[kh, kw, c] · x + bias[c]) for the output pixels [p0, p1) (row-major
// order). `w` is tap-major: [KH * KW, C]. Dilation 1; `g.C` is the channel count, g.N, g.G and
// g.O are ignored. Any activation (the vector ones in registers). Serial: callers split pixels
// over threads.
void depthwise_nhwc_f32(const ConvGeom& g, const float* x, const float* w, const float* bias,
                        float* y, const ConvEpilogue& ep, int64_t p0, int64_t p1);

}  // namespace kiln::kernels::conv_detail

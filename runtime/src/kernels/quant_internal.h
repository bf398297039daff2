#pragma once
// Private to the int8 kernels (quantize.cpp, qgemm*.cpp): the checked quantization parameters,
// the requantize formula, and the packed int16-pair layout the integer microkernels share.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/runtime/tensor.h"
#include "kiln/runtime/views.h"
#include "nn_common.h"

namespace kiln::kernels::conv_detail {
struct ConvGeom;
}  // namespace kiln::kernels::conv_detail

namespace kiln::kernels::quant_detail {

using nn_detail::dims_str;
using nn_detail::to_dtype;

struct Range {
  int64_t lo, hi;
};

inline Range range_of(std::string_view op, DType d, std::string_view what) {
  switch (d) {
    case DType::Int8:
      return {-128, 127};
    case DType::UInt8:
      return {0, 255};
    case DType::Int32:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
    default:
      fail(op, "expected ", what, " of dtype int8, uint8 or int32, got ", dtype_name(d));
  }
}

// The quantization parameters per channel, checked: element i of a contiguous input belongs to
// channel (i / inner) % channels.
struct Channels {
  int64_t outer = 1, channels = 1, inner = 1;
  std::vector<float> scale;
  std::vector<int64_t> zero_point;
};

inline Channels channels_of(std::string_view op, const TensorImpl& input, const TensorImpl& scale,
                            const TensorImpl& zero_point, int64_t axis, Range range) {
  KILN_CHECK(scale.dtype() == DType::Float32, op, "expected scale of dtype float32, got ",
             dtype_name(scale.dtype()));
  KILN_CHECK(is_integral(zero_point.dtype(), false), op,
             "expected zero_point of an integer dtype, got ", dtype_name(zero_point.dtype()));
  KILN_CHECK(scale.dim() <= 1, op, "expected scale of 0 dims (per tensor) or 1 (per channel), got ",
             dims_str(scale.sizes()));
  KILN_CHECK(std::ranges::equal(zero_point.sizes(), scale.sizes()), op,
             "expected zero_point of scale's shape ", dims_str(scale.sizes()), ", got ",
             dims_str(zero_point.sizes()));
  Channels c;
  const int64_t rank = input.dim();
  if (scale.dim() == 1) {
    KILN_CHECK(axis >= -rank && axis < rank, op, "expected axis in [", -rank, ", ", rank,
               ") for an input of ", rank, " dims, got ", axis);
    const int64_t a = axis < 0 ? axis + rank : axis;
    KILN_CHECK(scale.size(0) == input.size(a), op, "expected ", input.size(a),
               " scales (input's size along axis ", a, "), got ", scale.size(0));
    c.channels = input.size(a);
    for (int64_t d = 0; d < a; ++d) c.outer *= input.size(d);
    for (int64_t d = a + 1; d < rank; ++d) c.inner *= input.size(d);
  } else {
    c.inner = input.numel();
  }
  auto s = views::contiguous(scale);
  auto z = zero_point.dtype() == DType::Int64 ? views::contiguous(zero_point)
                                              : to_dtype(&zero_point, DType::Int64);
  const float* sp = s->data_ptr<float>();
  const int64_t* zp = z->data_ptr<int64_t>();
  c.scale.assign(sp, sp + s->numel());
  c.zero_point.assign(zp, zp + z->numel());
  for (size_t k = 0; k < c.scale.size(); ++k) {
    KILN_CHECK(std::isfinite(c.scale[k]) && c.scale[k] > 0.0f, op,
               "expected positive finite scales, got ", c.scale[k], " (channel ", k, ")");
    KILN_CHECK(c.zero_point[k] >= range.lo && c.zero_point[k] <= range.hi, op,
               "expected zero points in [", range.lo, ", ", range.hi, "], got ", c.zero_point[k],
               " (channel ", k, ")");
  }
  return c;
}

// Checked per-tensor (0-dim) parameters and 8-bit dtypes of the integer ops.
inline float scalar_scale(std::string_view op, const TensorImpl* s, std::string_view what) {
  KILN_CHECK(s != nullptr, op, "expected ", what, ", got none");
  KILN_CHECK(s->dtype() == DType::Float32 && s->dim() == 0, op, "expected ", what,
             " as a 0-dim float32 tensor, got ", dtype_name(s->dtype()), " of shape ",
             dims_str(s->sizes()));
  const float v = views::contiguous(*s)->data_ptr<float>()[0];
  KILN_CHECK(std::isfinite(v) && v > 0.0f, op, "expected a positive finite ", what, ", got ", v);
  return v;
}

inline int32_t scalar_zero_point(std::string_view op, const TensorImpl* z, Range r,
                                 std::string_view what) {
  KILN_CHECK(z != nullptr, op, "expected ", what, ", got none");
  KILN_CHECK(is_integral(z->dtype(), false) && z->dim() == 0, op, "expected ", what,
             " as a 0-dim integer tensor, got ", dtype_name(z->dtype()), " of shape ",
             dims_str(z->sizes()));
  const int64_t v = to_dtype(z, DType::Int64)->data_ptr<int64_t>()[0];
  KILN_CHECK(v >= r.lo && v <= r.hi, op, "expected ", what, " in [", r.lo, ", ", r.hi, "], got ",
             v);
  return static_cast<int32_t>(v);
}

inline Range int8_range(std::string_view op, DType d, std::string_view what) {
  KILN_CHECK(d == DType::Int8 || d == DType::UInt8, op, "expected ", what,
             " of dtype uint8 or int8, got ", dtype_name(d));
  return range_of(op, d, what);
}

// fn(T{}) for an 8-bit dtype (int8_t, else uint8_t: checked by the caller).
template <typename Fn>
void with_byte_type(DType d, Fn&& fn) {
  if (d == DType::Int8)
    fn(int8_t{});
  else
    fn(uint8_t{});
}

// ---- The integer add (qadd.cpp): kiln.qadd, and the residual add of kiln.qconv2d_add ---------

// y = quantize(relu?(dequantize(a) + dequantize(b))), every parameter per tensor.
struct AddConstants {
  DType a = DType::UInt8, b = DType::UInt8, y = DType::UInt8;
  float a_scale = 1.0f, b_scale = 1.0f, y_scale = 1.0f;
  int32_t a_zp = 0, b_zp = 0;
  float y_zp = 0.0f, lo = 0.0f, hi = 0.0f;
  bool relu = false;
};
// The checked constants (8-bit dtypes, positive finite scales, zero points in range).
AddConstants add_constants(std::string_view op, DType a, const TensorImpl* a_scale,
                           const TensorImpl* a_zero_point, DType b, const TensorImpl* b_scale,
                           const TensorImpl* b_zero_point, DType y, const TensorImpl* y_scale,
                           const TensorImpl* y_zero_point, bool relu);
// y[i] = the add of a[i] and b[i] for i < n, serial; a may be y (in place). The float32 steps
// of the dequantize, add and quantize kernels in their order, so the bytes are theirs.
void add_span(const void* a, const void* b, void* y, int64_t n, const AddConstants& k);

// kiln.qconv2d_add's residual: out[i] = add(out[i] as the convolution wrote it, other[i]) over
// each part of the output as soon as the convolution has written it (while it is in cache),
// in spans long enough to run as vector loops.
struct ResidualAdd {
  const uint8_t* other = nullptr;  // contiguous, the output's layout; one byte per element
  AddConstants k;
  void apply(void* out, int64_t offset, int64_t n) const {
    uint8_t* y = static_cast<uint8_t*>(out) + offset;
    add_span(y, other + offset, y, n, k);
  }
  // Planes [first, first + count) of `plane` bytes each, over the thread pool.
  void apply_planes(void* out, int64_t first, int64_t count, int64_t plane) const;
};

// ---- The requantize formula (kernels/qgemm.h), one implementation per lane type ----------------

// The per-output-channel constants of the epilogue: v = (acc + bias) * mult clamped to
// [lo, hi] = [qmin - y_zp, qmax - y_zp] (relu: lo >= 0), rounded half to even, plus y_zp.
// Clamping before rounding equals clamping after it: the bounds are integers and rounding is
// monotone; and it keeps the float -> int conversion in range.
inline int32_t requantize_value(int32_t acc, int32_t bias, float mult, float lo, float hi,
                                int32_t zp) {
  const auto sum = static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(bias));
  const float v = std::min(std::max(static_cast<float>(sum) * mult, lo), hi);
  return static_cast<int32_t>(std::nearbyint(v)) + zp;
}

// Everything the epilogue and the packing need, per output channel (`channels` of them).
struct Requant {
  int32_t x_zp = 0;
  std::vector<int32_t> w_zp;  // per channel
  std::vector<float> mult;    // per channel, padded to whole panels with copies of the last
  std::vector<int32_t> bias;  // per channel (0 where absent), padded likewise
  float lo = 0.0f, hi = 0.0f;
  int32_t y_zp = 0;
  bool out_signed = false;
};

// Depthwise qconv2d (groups == channels, one input channel per group; qconv_depthwise.cpp): x
// contiguous uint8 or int8, w contiguous int8 [C, 1, KH, KW] with KH * KW <= kMaxDepthwiseTaps
// (its float32 sums stay exact), out contiguous of rq's dtype; `add` (or null) applied to each
// span as it is written.
constexpr int64_t kMaxDepthwiseTaps = 256;
void qconv2d_depthwise(const conv_detail::ConvGeom& g, const TensorImpl& x, const int8_t* w,
                       const Requant& rq, void* out, const ResidualAdd* add = nullptr);
// The same on channels-last x and out ([N, H, W, C]; qconv_depthwise_nhwc.cpp), `add` applied
// once the whole output is written; false (nothing written) where its row buffers would exceed
// a bound set by the image.
bool qconv2d_depthwise_channels_last(const conv_detail::ConvGeom& g, const TensorImpl& x,
                                     const int8_t* w, const Requant& rq, void* out,
                                     const ResidualAdd* add = nullptr);

// ---- Packed operands of the integer GEMM --------------------------------------------------------
// C[M, N] = A[M, K] B[K, N], K taken in groups of `group` values per int32 word:
//   group 2: int16 pairs (v[2p], v[2p + 1]) of values minus their zero points, what `vpmaddwd`
//            multiplies pairwise and sums (exact: |v - zp| <= 255);
//   group 4: byte quads of the raw values, what `vpdpbusd` multiplies (u8 x s8) and sums: the
//            activations as uint8 (int8 ones offset by 128), the weights as int8 with zero
//            points 0; the activations' zero point enters as a per-channel correction
//            -x_zp * sum_k w folded into the bias (exact modulo 2^32, like the sums themselves).
//            Families with signed_quads (`sdot`: s8 x s8) take the activations as int8 instead
//            (uint8 ones offset by -128), their zero point offset alike.
// Past K and M the values are 0; conv padding is the activations' zero point (0 once it is
// subtracted in int16 pairs; in quads x_zp itself, offset like the values).
//   A sliver (mr rows): a[p * mr + r]          B panel (nr columns): b[p * nr + j]
// Per-channel constant arrays are padded to whole panels (kChannelPad).
constexpr int kChannelPad = 64;

// Where one tile's requantized values go and with what constants: the tile's rows r < m and
// columns j < n, at out[r * ld + j]. mult and bias of a row or column at [r * row_step +
// j * col_step] (steps 0 or 1: per row (conv: output channels) or per column (linear)); `bias`
// may be null.
struct TileOut {
  void* out = nullptr;
  int64_t ld = 0;
  bool out_signed = false;  // int8, else uint8
  const float* mult = nullptr;
  const int32_t* bias = nullptr;
  int64_t row_step = 0, col_step = 0;
  float lo = 0.0f, hi = 0.0f;
  int32_t zp = 0;
  // Float32 results instead (dynamic quantization): out[r * ld + j] = fma(float(acc + bias),
  // mult, fbias) with fbias indexed like mult (null: 0); lo, hi and zp unused.
  bool float_out = false;
  const float* fbias = nullptr;
};

// One float32 result of a float_out tile (the scalar form of every family's float epilogue).
inline float dequantize_acc(int32_t acc, int32_t bias, float mult, float fbias) {
  const auto sum = static_cast<int32_t>(static_cast<uint32_t>(acc) + static_cast<uint32_t>(bias));
  return std::fma(static_cast<float>(sum), mult, fbias);
}

// Computes the tile acc = A_sliver . B_panel over `words` K words, then requantizes it into `t`.
using QMicroKernelFn = void (*)(int64_t words, const int32_t* a, const int32_t* b, int m, int n,
                                const TileOut& t);

// The direct convolution's K block: 64 bytes of one filter row (an AMX A tile's row; 16 byte
// quads of the VNNI tile).
inline constexpr int64_t kDirectBlockBytes = 64;

// The tile of a direct (implicit-GEMM) convolution: A is read where it lies, row r of K block
// b (16 words: kDirectBlockBytes of uint8 activations) at a + a_offsets[b] + r * a_stride bytes,
// so no im2col copy is made; B is a packed panel as for the GEMM kernels. Every hardware row of A
// is read (rows past m too: the caller's buffer holds them); m rows are stored.
// A tile of `kernel` whose A sliver is row-major in place: row r's word p at
// a + r * a_stride + 4 * p (rows past m are not read).
using QRowsKernelFn = void (*)(int64_t words, const uint8_t* a, int64_t a_stride, const int32_t* b,
                               int m, int n, const TileOut& t);

using QDirectKernelFn = void (*)(int64_t words, const uint8_t* a, int64_t a_stride,
                                 const int64_t* a_offsets, const int32_t* b, int m, int n,
                                 const TileOut& t);

// A microkernel family: its tile, its K grouping, and (group 4) one kernel per operand order.
struct QFamily {
  const char* name;
  int mr, nr, group;
  QMicroKernelFn kernel;                 // group 2; group 4: A holds the activations' quads
  QMicroKernelFn kernel_b_u8 = nullptr;  // group 4: B holds the activations' quads
  // 0: A slivers are word-major like B (a[p * mr + r]). Otherwise K is padded to whole blocks of
  // this many words, in A and B alike, and each A sliver holds per block its mr rows one after
  // another (a[(p / w * mr + r) * w + p % w]): AMX's A tiles, K contiguous per row.
  int a_tile_words = 0;
  // Group 4: the activations packed as int8 (uint8 ones offset by -128), not uint8.
  bool signed_quads = false;
  // The direct convolution tile (K blocks of kDirectBlockBytes), or null.
  QDirectKernelFn direct_conv = nullptr;
  // The most extra products the direct tile may compute, relative to im2col's, per kind: its K
  // (filter rows padded to whole blocks) over im2col's, and its output channels padded to whole
  // tiles of nr over the channels (im2col's products have them as rows of mr). 0: no bound.
  // Where the tile is much faster than the copies it saves (AMX) padding is cheap; where it is
  // not (VNNI) it is not. Measured per family with bench_conv's int8 rows (qconv_direct.cpp).
  // The column bound also decides a channels-last 1x1 convolution's orientation (qgemm.cpp
  // pointwise_by_rows): output channels across B's columns within it, else across A's rows.
  double direct_max_k_ratio = 0.0, direct_max_column_ratio = 0.0;
  // Group 4 with a_tile_words 0: `kernel` with A's quads read in place from rows of `stride`
  // bytes (the activations as they lie, when their bytes are already the family's quads), or null.
  QRowsKernelFn kernel_a_rows = nullptr;
};
const QFamily* qgemm_avx2_family();        // null where the build has no AVX2
const QFamily* qgemm_avx512vnni_family();  // null where the build has no AVX-512
const QFamily* qgemm_avxvnni_family();     // null where the build has no AVX-VNNI
const QFamily* qgemm_neon_i8mm_family();   // null where the build is not arm64 with I8MM
const QFamily* qgemm_neon_dot_family();    // null where the build is not arm64 with dotprod
const QFamily* qgemm_amx_family();  // null without AMX in the build or the tile state granted

// quantize_out's formula into uint8 (quantize.cpp): n contiguous values, one scale and zero point.
void quantize_bytes(const float* x, int64_t n, float scale, int32_t zero_point, uint8_t* q);

// Calls fn(std::integral_constant<int, R>{}) with the fewest rows R of 1, 2, 4 and kMR that
// cover m: a tile computes only the rows its A sliver really holds (a batch-1 linear, an RNN step
// fill one of kMR), instead of products of padding.
template <int kMR, typename Fn>
inline void with_tile_rows(int m, Fn&& fn) {
  if (m <= 1)
    fn(std::integral_constant<int, 1>{});
  else if (m <= 2 && kMR > 2)
    fn(std::integral_constant<int, 2>{});
  else if (m <= 4 && kMR > 4)
    fn(std::integral_constant<int, 4>{});
  else
    fn(std::integral_constant<int, kMR>{});
}

// Requantizes an accumulated tile (row stride `ld_acc`) into `t`, one value at a time.
void store_tile_scalar(const int32_t* acc, int64_t ld_acc, int m, int n, const TileOut& t);

}  // namespace kiln::kernels::quant_detail

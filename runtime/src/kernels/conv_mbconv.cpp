// The fused inverted-residual block (mbconv.h): expand 1x1 -> depthwise -> project 1x1, in bands
// of output rows.
//
// Per work item (an image, or a range of its output rows when there are fewer images than
// threads), per band of R output rows [oh0, oh1):
//   1. the band needs input rows [lo, hi) = [oh0*sh - ph, (oh1-1)*sh - ph + KH); rows the previous
//      band already expanded are moved to the front of the band buffer, the others are expanded
//      by one GEMM over x's rows (rows outside the image are zero: the depthwise padding);
//   2. the depthwise kernel runs on the band buffer as an image of hi - lo rows without vertical
//      padding, into a second buffer of R rows;
//   3. the projection GEMM writes y's rows [oh0, oh1) directly (bias, residual, activation in its
//      epilogue).
// R keeps both buffers around 384 KB (L2). All GEMMs and the depthwise run serially inside the
// work item (it is already one of the pool's tasks).
// With prepared weights (run_rows_interleaved) the band buffers hold the layouts the next step
// computes in, so nothing is reordered between steps: the expansion writes channel-interleaved
// blocks [rows][Wb][8] (conv_mbconv_expand.cpp), the depthwise computes on them in place and
// writes the projection's packed right operand, which the GEMM reads as it is. Without (and where
// those kernels do not apply) the expanded band is NCHW planes and each step repacks its input.
//
// The channels-last strategy (MBConvParams::strategy; the compiler picks it for small maps:
// MobileNetV2's 28x28, 14x14 and 7x7 blocks) runs a whole image at a time instead:
//   1. eᵀ[HW, E] = xᵀ · Weᵀ (the GEMM's rows are pixels, its vector lanes channels);
//   2. the depthwise runs on eᵀ as a channels-last image (conv_depthwise_nhwc.cpp) into dᵀ;
//   3. yᵀ[HoWo, P] = dᵀ · Wpᵀ, transposed into y with the residual and activation.
// Only the P x HoWo output is ever transposed. In NCHW the expansion's output would be transposed
// back from its channels-across-lanes GEMM, the depthwise would interleave channels into lanes
// and back, and the projection would transpose its input while packing it. With one image per
// thread or more, threads take whole images; otherwise each step is parallel.
#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include "conv_internal.h"
#include "gemm_internal.h"
#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/mbconv.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "nn_common.h"

namespace kiln::kernels {
namespace {

using conv_detail::ConvGeom;
using conv_detail::ConvScratch;
using nn_detail::dims_str;

constexpr std::string_view kOp = "mbconv";
// The widest GEMM panel (AVX-512's 32 columns) the depthwise writes its band into.
constexpr int64_t kMaxPanel = 32;

struct Geometry {
  int64_t N, C, H, W;  // input
  int64_t E;           // expanded channels (= C without expansion)
  int64_t P;           // output channels
  int64_t KH, KW, sh, sw, ph, pw;
  int64_t Ho, Wo;
  bool expand;
  int64_t R;                     // output rows per band
  int64_t eb_floats, db_floats;  // the band buffers
  // The expanded band channel-interleaved (run_rows_interleaved): blocks of 8 channels, each
  // [rows][Wb][8] plus 8 spare pixels.
  int64_t ebi_block, ebi_floats;
  bool channels_last;  // the small-map strategy (eb: eᵀ, db: dᵀ, yt_floats: yᵀ)
  int64_t yt_floats;
};

// a * b, or a kiln::Error when it exceeds `limit` (sizes from an artifact may be anything: a
// zero-element tensor can carry huge extents).
int64_t checked_mul(int64_t a, int64_t b, int64_t limit, std::string_view what) {
  int64_t r = 0;
  KILN_CHECK(a >= 0 && b >= 0 && mul_ok(a, b, r) && r <= limit, kOp, "expected ", what,
             " of at most ", limit, " elements, got ", a, " x ", b);
  return r;
}

void check_dims(const TensorImpl* t, std::string_view what, const Dims& want) {
  KILN_CHECK(t != nullptr, kOp, "expected ", what, " of shape ", dims_str(want), ", got none");
  KILN_CHECK(Dims(t->sizes()) == want, kOp, "expected ", what, " of shape ", dims_str(want),
             ", got ", dims_str(t->sizes()));
  KILN_CHECK(t->dtype() == DType::Float32, kOp, "expected ", what, " of dtype float32, got ",
             dtype_name(t->dtype()));
}

Geometry geometry(const MBConvOperands& ops, const MBConvParams& p) {
  KILN_CHECK(ops.input && ops.input->dim() == 4, kOp, "expected input of 4 dims (N,C,H,W), got ",
             ops.input ? dims_str(ops.input->sizes()) : std::string("none"));
  KILN_CHECK(ops.dw_weight && ops.dw_weight->dim() == 4 && ops.project_weight &&
                 ops.project_weight->dim() == 4,
             kOp, "expected depthwise and projection weights of 4 dims");
  Geometry g;
  g.N = ops.input->size(0), g.C = ops.input->size(1), g.H = ops.input->size(2);
  g.W = ops.input->size(3);
  g.expand = ops.expand_weight != nullptr;
  g.E = g.expand ? ops.expand_weight->size(0) : g.C;
  g.KH = ops.dw_weight->size(2), g.KW = ops.dw_weight->size(3);
  g.P = ops.project_weight->size(0);
  g.sh = p.stride_h, g.sw = p.stride_w, g.ph = p.pad_h, g.pw = p.pad_w;
  // Bounds the extent arithmetic below for any artifact's sizes and attributes.
  constexpr int64_t kMaxExtent = int64_t(1) << 31;
  KILN_CHECK(std::max({g.H, g.W, g.KH, g.KW, g.ph, g.pw}) < kMaxExtent, kOp,
             "expected input planes, depthwise kernel and padding below 2^31, got input ",
             dims_str(ops.input->sizes()), ", kernel ", g.KH, "x", g.KW, ", padding (", g.ph, ", ",
             g.pw, ")");
  KILN_CHECK(g.sh >= 1 && g.sw >= 1 && g.ph >= 0 && g.pw >= 0, kOp,
             "expected stride >= 1 and padding >= 0, got stride (", g.sh, ", ", g.sw, ") padding (",
             g.ph, ", ", g.pw, ")");
  KILN_CHECK(g.KH >= 1 && g.KW >= 1 && g.ph < g.KH && g.pw < g.KW, kOp,
             "expected padding smaller than the depthwise kernel, got padding (", g.ph, ", ", g.pw,
             ") for kernel ", g.KH, "x", g.KW);
  check_dims(ops.input, "input", Dims(ops.input->sizes()));
  if (g.expand) check_dims(ops.expand_weight, "expand_weight", Dims{g.E, g.C, 1, 1});
  if (ops.expand_bias) check_dims(ops.expand_bias, "expand_bias", Dims{g.E});
  check_dims(ops.dw_weight, "dw_weight", Dims{g.E, 1, g.KH, g.KW});
  if (ops.dw_bias) check_dims(ops.dw_bias, "dw_bias", Dims{g.E});
  check_dims(ops.project_weight, "project_weight", Dims{g.P, g.E, 1, 1});
  if (ops.project_bias) check_dims(ops.project_bias, "project_bias", Dims{g.P});
  // Bounds the band arithmetic ((R-1)*sh rows, sh*W floats per row) for any artifact's values.
  KILN_CHECK(g.sh <= g.H + 2 * g.ph && g.sw <= g.W + 2 * g.pw, kOp,
             "expected stride at most the padded input (", g.H + 2 * g.ph, "x", g.W + 2 * g.pw,
             "), got (", g.sh, ", ", g.sw, ")");
  g.Ho = (g.H + 2 * g.ph - g.KH) / g.sh + 1;
  g.Wo = (g.W + 2 * g.pw - g.KW) / g.sw + 1;
  KILN_CHECK(g.H + 2 * g.ph >= g.KH && g.W + 2 * g.pw >= g.KW, kOp, "expected padded input (",
             g.H + 2 * g.ph, "x", g.W + 2 * g.pw, ") at least as large as the kernel (", g.KH, "x",
             g.KW, ")");
  if (ops.residual) check_dims(ops.residual, "residual", Dims{g.N, g.P, g.Ho, g.Wo});
  KILN_CHECK(g.C > 0 && g.E > 0 && g.P > 0 && g.H > 0 && g.W > 0, kOp,
             "expected non-empty channels and input planes, got input ",
             dims_str(ops.input->sizes()), " with ", g.E, " expanded and ", g.P,
             " output channels");
  // Band buffers: output rows per band so that they stay near the target's mbconv_band_bytes,
  // each at most 2^30 floats.
  constexpr int64_t kLimit = int64_t(1) << 30;
  const int64_t in_cols = checked_mul(g.sh, g.W, kLimit, "a band's input columns per row");
  const int64_t per_row = checked_mul(g.E, in_cols + g.Wo, kLimit, "a band row");
  g.R = std::clamp<int64_t>(rt::target_params().mbconv_band_bytes / 4 / per_row, 1, g.Ho);
  g.eb_floats = checked_mul(checked_mul(g.E, (g.R - 1) * g.sh + g.KH, kLimit, "expanded rows"), g.W,
                            kLimit, "the expanded band");
  // Room for the band's pixels rounded up to whole GEMM panels (at most kMaxPanel wide).
  g.db_floats = checked_mul(g.E, g.R * g.Wo + kMaxPanel, kLimit, "the depthwise band");
  // The interleaved band when it stays within the same bound (-1: run_rows_interleaved is not
  // offered; the NCHW band above then serves).
  const int64_t wb = (g.Wo - 1) * g.sw + g.KW;  // padded columns the depthwise reads
  int64_t block = 0, total = 0;
  const bool ebi_ok = mul_ok((g.R - 1) * g.sh + g.KH, wb, block) &&
                      mul_ok(block + 8, int64_t(8), block) && mul_ok((g.E + 7) / 8, block, total) &&
                      total <= kLimit;
  g.ebi_block = ebi_ok ? block : -1;
  g.ebi_floats = ebi_ok ? total : -1;
  // Channels-last operands exist only between blocks of that strategy (--kiln-mbconv-channels-
  // last), and imply it: artifacts written before kiln.mbconv recorded its strategy carry them
  // without it.
  g.channels_last = mbconv_run_strategy(p) == MBConvStrategy::ChannelsLast;
  if (p.input_channels_last || p.output_channels_last) {
    KILN_CHECK(!ops.residual || p.input_channels_last == p.output_channels_last, kOp,
               "expected a residual in the output's layout: input and output both channels-last or "
               "both not, got input ",
               p.input_channels_last ? "channels-last" : "NCHW", " and output ",
               p.output_channels_last ? "channels-last" : "NCHW");
  }
  if (g.channels_last) {
    g.eb_floats = checked_mul(g.E, g.H * g.W, kLimit, "one image's expanded tensor");
    g.db_floats = checked_mul(g.E, g.Ho * g.Wo, kLimit, "one image's depthwise output");
    g.yt_floats = checked_mul(g.P, g.Ho * g.Wo, kLimit, "the projection's output");
  }
  return g;
}

// Banded: both 1x1 weights packed as the GEMM's left operand. Channels-last: as its right one
// (transposed), and the depthwise weight tap-major.
class Prepared final : public PreparedMBConv {
 public:
  bool channels_last = false;
  std::shared_ptr<const SgemmPacked> expand, project;
  std::vector<float> dw_taps;        // channels-last: [KH * KW, E]
  std::vector<float> expand_panels;  // banded: the expansion for expand_interleaved
  size_t nbytes() const override {
    return (expand ? expand->nbytes() : 0) + (project ? project->nbytes() : 0) +
           (dw_taps.size() + expand_panels.size()) * sizeof(float);
  }
  const char* algorithm() const override { return channels_last ? "channels-last" : "banded"; }
};

// w[E, 1, KH, KW] -> taps[KH * KW, E].
void dw_tap_major(const float* w, int64_t E, int64_t taps, float* out) {
  for (int64_t e = 0; e < E; ++e)
    for (int64_t t = 0; t < taps; ++t) out[t * E + e] = w[e * taps + t];
}

// C[M, cols] = epilogue(W[M, K] · B[K, cols]) with W packed when prepared.
void gemm_1x1(const SgemmPacked* packed, const float* w, int64_t M, int64_t K, const float* B,
              int64_t ldb, int64_t cols, float* C, int64_t ldc, const Epilogue& e) {
  if (packed)
    sgemm_packed_a(*packed, false, cols, 1.0f, B, ldb, 0.0f, C, ldc, e);
  else
    sgemm(false, false, M, cols, K, 1.0f, w, K, B, ldb, 0.0f, C, ldc, e);
}

Epilogue epilogue(const ConvEpilogue& a, const float* bias) {
  Epilogue e;
  if (bias) e.bias_kind = Epilogue::Bias::PerRow, e.bias = bias;
  e.activation = a.activation, e.clamp_min = a.clamp_min, e.clamp_max = a.clamp_max;
  return e;
}

struct Data {
  const float *x, *we, *be, *wd, *bd, *wp, *bp, *res;
  float* y;
  const Prepared* prep;
};

// The depthwise over `rows` rows of the expanded image (ph of them its vertical padding, above)
// giving r output rows: a band without vertical padding (ph 0), or the whole image.
ConvGeom depthwise_geometry(const Geometry& g, int64_t rows, int64_t r, int64_t ph) {
  ConvGeom dg;
  dg.N = 1, dg.C = g.E, dg.H = rows, dg.W = g.W, dg.O = g.E, dg.KH = g.KH, dg.KW = g.KW;
  dg.G = g.E, dg.Cg = 1, dg.Og = 1, dg.sh = g.sh, dg.sw = g.sw, dg.ph = ph, dg.pw = g.pw;
  dg.Ho = r, dg.Wo = g.Wo;
  return dg;
}

// Output rows [oh_begin, oh_end) of image n.
void run_rows(const Geometry& g, const Data& d, const MBConvParams& p, int64_t n, int64_t oh_begin,
              int64_t oh_end, float* eb, float* db) {
  const int64_t R = g.R, HW = g.H * g.W, W = g.W;
  const float* xn = d.x + n * g.C * HW;
  const Epilogue e_expand = epilogue(p.expand, d.be);
  ConvEpilogue e_dw = p.dw;
  e_dw.residual = nullptr;
  int64_t have_lo = 0, have_hi = 0, stride_old = 0;  // input rows held in eb, its channel stride
  // The projection's packed right-operand panel width (0: db is packed by the GEMM instead).
  const int64_t nr = d.prep ? gemm_detail::b_panel_width(*d.prep->project) : 0;
  for (int64_t oh0 = oh_begin; oh0 < oh_end; oh0 += R) {
    const int64_t oh1 = std::min(oh0 + R, oh_end), r = oh1 - oh0;
    const int64_t lo = oh0 * g.sh - g.ph, hi = (oh1 - 1) * g.sh - g.ph + g.KH;
    const int64_t rows = hi - lo, stride = rows * W;  // the band's channel planes
    const int64_t a = std::clamp<int64_t>(lo, 0, g.H), b = std::clamp<int64_t>(hi, 0, g.H);
    // The depthwise's input: the expanded band, padding only left and right; without an
    // expansion x's rows [a, b) in place (planes HW apart), the rows outside the image its
    // padding (a copy into the band was 13% of MobileNetV2's first block).
    ConvGeom dg = depthwise_geometry(g, rows, r, 0);
    const float* dw_in = eb;
    if (g.expand) {
      // 1. Rows [lo, have_hi) were expanded for the previous band: move them (forward-safe: the
      // new channel stride is never larger than the old one).
      const int64_t keep = have_hi > lo && have_lo <= lo ? std::min(have_hi, hi) - lo : 0;
      if (keep > 0 && (lo != have_lo || stride != stride_old)) {
        for (int64_t e = 0; e < g.E; ++e)
          std::memmove(eb + e * stride, eb + e * stride_old + (lo - have_lo) * W,
                       sizeof(float) * keep * W);
      }
      const int64_t first = lo + keep;  // first row to produce
      for (int64_t row = first; row < hi; ++row) {
        if (row >= 0 && row < g.H) continue;  // inside the image: expanded below
        for (int64_t e = 0; e < g.E; ++e)
          std::memset(eb + e * stride + (row - lo) * W, 0, sizeof(float) * W);
      }
      const int64_t a1 = std::clamp<int64_t>(first, 0, g.H);
      if (b > a1)
        gemm_1x1(d.prep ? d.prep->expand.get() : nullptr, d.we, g.E, g.C, xn + a1 * W, HW,
                 (b - a1) * W, eb + (a1 - lo) * W, stride, e_expand);
      have_lo = lo, have_hi = hi, stride_old = stride;
    } else {
      dg.H = b - a, dg.ph = a - lo, dg.x_plane = HW;
      dw_in = xn + a * W;
    }
    const int64_t howo = g.Ho * g.Wo, off = n * g.P * howo + oh0 * g.Wo;
    Epilogue e_proj = epilogue(p.project, d.bp);
    if (d.res) e_proj.residual = d.res + off, e_proj.ld_residual = howo;
    // 2. and 3. with a prepared projection: the depthwise writes db as the projection's packed
    // right operand, which the GEMM reads as it is (packing db again was 9% of a 56x56 block).
    if (nr > 0 && nr <= kMaxPanel &&
        conv_detail::depthwise_to_panels(dg, dw_in, d.wd, d.bd, e_dw, nr, db)) {
      gemm_detail::sgemm_packed_ab(*d.prep->project, db, r * g.Wo, d.y + off, howo, e_proj);
      continue;
    }
    // 2. Depthwise over the band. False only for bands past the depthwise kernel's buffer bound
    // (W near 2^26).
    KILN_CHECK(conv_detail::depthwise_conv2d_f32(dg, dw_in, d.wd, d.bd, nullptr, db, e_dw), kOp,
               "expected a depthwise band of at most 2^26 floats, got ", rows, " rows of ", W,
               " columns");
    // 3. Projection into y's rows [oh0, oh1), with the residual.
    gemm_1x1(d.prep ? d.prep->project.get() : nullptr, d.wp, g.P, g.E, db, r * g.Wo, r * g.Wo,
             d.y + off, howo, e_proj);
  }
}

// Whether run_rows_interleaved takes the block: a prepared expansion with an activation the
// registers apply, and a depthwise the channel-interleaved kernel takes into the projection's
// panels (nr wide).
bool interleaved_fits(const Geometry& g, const Data& d, const MBConvParams& p, int64_t nr) {
  // db holds whole panels of at most kMaxPanel pixels (geometry's db_floats).
  return g.expand && d.prep && !d.prep->expand_panels.empty() && nr > 0 && nr <= kMaxPanel &&
         g.ebi_floats > 0 && conv_detail::vector_activation(p.expand.activation) &&
         !p.expand.residual &&
         conv_detail::depthwise_panels_fit(depthwise_geometry(g, (g.R - 1) * g.sh + g.KH, g.R, 0),
                                           p.dw, nr);
}

// run_rows with the expansion written channel-interleaved (expand_interleaved), the layout the
// depthwise computes in, and the depthwise written as the projection's packed operand: neither the
// expanded nor the depthwise band is transposed or packed a second time. ebi: g.ebi_floats, db:
// g.db_floats.
void run_rows_interleaved(const Geometry& g, const Data& d, const MBConvParams& p, int64_t n,
                          int64_t oh_begin, int64_t oh_end, float* ebi, float* db, int64_t nr) {
  const int64_t HW = g.H * g.W, howo = g.Ho * g.Wo;
  const float* xn = d.x + n * g.C * HW;
  const int64_t wb = (g.Wo - 1) * g.sw + g.KW, row_floats = wb * 8;
  const int64_t blocks = (g.E + 7) / 8, block = g.ebi_block;
  const int64_t cols = std::min(g.W, wb - g.pw);  // input columns the depthwise reads
  ConvEpilogue e_dw = p.dw;
  e_dw.residual = nullptr;
  // The padding columns are zero from here on: rows are written only inside them (or whole, zero).
  std::memset(ebi, 0, sizeof(float) * g.ebi_floats);
  int64_t have_lo = 0, have_hi = 0;  // input rows held in ebi
  for (int64_t oh0 = oh_begin; oh0 < oh_end; oh0 += g.R) {
    const int64_t oh1 = std::min(oh0 + g.R, oh_end), r = oh1 - oh0;
    const int64_t lo = oh0 * g.sh - g.ph, hi = (oh1 - 1) * g.sh - g.ph + g.KH;
    // 1. Rows [lo, have_hi) were expanded for the previous band: moved to the front of each
    // block; the others expanded (zero outside the image).
    const int64_t keep = have_hi > lo && have_lo <= lo ? std::min(have_hi, hi) - lo : 0;
    if (keep > 0 && lo != have_lo)
      for (int64_t b = 0; b < blocks; ++b)
        std::memmove(ebi + b * block, ebi + b * block + (lo - have_lo) * row_floats,
                     sizeof(float) * keep * row_floats);
    for (int64_t row = lo + keep; row < hi; ++row) {
      float* dst = ebi + (row - lo) * row_floats;
      if (row < 0 || row >= g.H) {
        for (int64_t b = 0; b < blocks; ++b)
          std::memset(dst + b * block, 0, sizeof(float) * row_floats);
        continue;
      }
      conv_detail::expand_interleaved(g.C, g.E, xn + row * g.W, HW, cols,
                                      d.prep->expand_panels.data(), d.be, p.expand, dst + g.pw * 8,
                                      block);
    }
    have_lo = lo, have_hi = hi;
    // 2. The depthwise into the projection's panels; 3. the projection into y's rows.
    KILN_CHECK(conv_detail::depthwise_interleaved_to_panels(depthwise_geometry(g, hi - lo, r, 0),
                                                            ebi, block, d.wd, d.bd, e_dw, nr, db),
               kOp, "expected a depthwise band the interleaved kernel takes, got ", hi - lo,
               " rows of ", g.W, " columns");
    const int64_t off = n * g.P * howo + oh0 * g.Wo;
    Epilogue e_proj = epilogue(p.project, d.bp);
    if (d.res) e_proj.residual = d.res + off, e_proj.ld_residual = howo;
    gemm_detail::sgemm_packed_ab(*d.prep->project, db, r * g.Wo, d.y + off, howo, e_proj);
  }
}

// Image n, channels-last (see the top of the file); eb, db, yt: g.eb_floats, g.db_floats,
// g.yt_floats; taps: the tap-major depthwise weight.
void run_image_channels_last(const Geometry& g, const Data& d, const MBConvParams& p, int64_t n,
                             const float* taps, float* et, float* dt, float* yt) {
  const int64_t HW = g.H * g.W, howo = g.Ho * g.Wo;
  const float* xn = d.x + n * g.C * HW;
  const Prepared* prep = d.prep;
  // Each step splits pixels evenly over the threads (one range each: the GEMMs inside run
  // serially, each packing only its own rows), so the block costs two synchronizations.
  const int nth = in_parallel_region() ? 1 : num_threads();
  auto split = [nth](int64_t total, auto&& body) {
    auto run = [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t lo = total * t / nth, hi = total * (t + 1) / nth;
        if (hi > lo) body(lo, hi);
      }
    };
    if (nth == 1)
      run(0, 1);
    else
      parallel_for(0, nth, 1, run);
  };
  // 1. eᵀ[HW, E] (bias per column), pixel rows [r0, r1). A channels-last input is xᵀ already:
  // without an expansion it is eᵀ itself.
  Epilogue ee = epilogue(p.expand, nullptr);
  if (d.be) ee.bias_kind = Epilogue::Bias::PerCol, ee.bias = d.be;
  const bool x_cl = p.input_channels_last;
  const float* e_src = !g.expand && x_cl ? xn : et;
  if (g.expand || !x_cl) {
    split(HW, [&](int64_t r0, int64_t r1) {
      // xᵀ's rows: NCHW x read transposed (ta), channels-last x as it is.
      const float* a = x_cl ? xn + r0 * g.C : xn + r0;
      const int64_t lda = x_cl ? g.C : HW;
      if (!g.expand)
        conv_detail::transpose_epilogue(xn + r0, HW, g.C, r1 - r0, et + r0 * g.C, g.C, nullptr, 0,
                                        Epilogue{});
      else if (prep)
        sgemm_packed_b(!x_cl, r1 - r0, 1.0f, a, lda, *prep->expand, 0.0f, et + r0 * g.E, g.E, ee);
      else
        sgemm(!x_cl, true, r1 - r0, g.E, g.C, 1.0f, a, lda, d.we, g.C, 0.0f, et + r0 * g.E, g.E,
              ee);
    });
  }
  // 2. and 3., output pixels [q0, q1): their rows of dᵀ[HoWo, E], then of yᵀ[HoWo, P] = dᵀ · Wpᵀ
  // (bias per column; the activation after the residual, which only the transpose adds), and
  // their columns of y.
  const ConvGeom dg = depthwise_geometry(g, g.H, g.Ho, g.ph);
  // A channels-last output is yᵀ itself: the projection writes it with the residual (then in
  // the same layout) in its epilogue, and nothing is transposed.
  const bool y_cl = p.output_channels_last;
  Epilogue ge, after;
  if (d.bp) ge.bias_kind = Epilogue::Bias::PerCol, ge.bias = d.bp;
  Epilogue& act = d.res && !y_cl ? after : ge;
  act.activation = p.project.activation;
  act.clamp_min = p.project.clamp_min, act.clamp_max = p.project.clamp_max;
  const int64_t off = n * g.P * howo;
  split(howo, [&](int64_t q0, int64_t q1) {
    conv_detail::depthwise_nhwc_f32(dg, e_src, taps, d.bd, dt, p.dw, q0, q1);
    float* yq = y_cl ? d.y + off + q0 * g.P : yt + q0 * g.P;
    Epilogue gq = ge;
    if (y_cl && d.res) gq.residual = d.res + off + q0 * g.P, gq.ld_residual = g.P;
    if (prep)
      sgemm_packed_b(false, q1 - q0, 1.0f, dt + q0 * g.E, g.E, *prep->project, 0.0f, yq, g.P, gq);
    else
      sgemm(false, true, q1 - q0, g.P, g.E, 1.0f, dt + q0 * g.E, g.E, d.wp, g.E, 0.0f, yq, g.P, gq);
    if (!y_cl)
      conv_detail::transpose_epilogue(yq, g.P, q1 - q0, g.P, d.y + off + q0, howo,
                                      d.res ? d.res + off + q0 : nullptr, howo, after);
  });
}

const float* data_or_null(const TensorImplPtr& t) {
  return t ? t->data_ptr<float>() : nullptr;
}

}  // namespace

Dims mbconv_output_shape(const MBConvOperands& ops, const MBConvParams& p) {
  const Geometry g = geometry(ops, p);
  return Dims{g.N, g.P, g.Ho, g.Wo};
}

const char* mbconv_strategy_name(MBConvStrategy s) {
  return s == MBConvStrategy::ChannelsLast ? "channels_last" : "banded";
}

MBConvStrategy mbconv_run_strategy(const MBConvParams& p) {
  return p.input_channels_last || p.output_channels_last ? MBConvStrategy::ChannelsLast
                                                         : p.strategy;
}

MBConvStrategy mbconv_strategy(int64_t value, std::string_view op) {
  KILN_CHECK(value == 0 || value == 1, op,
             "expected strategy 0 (banded) or 1 (channels_last), got ", value);
  return static_cast<MBConvStrategy>(value);
}

std::shared_ptr<const PreparedMBConv> prepare_mbconv(const MBConvOperands& ops,
                                                     MBConvStrategy strategy) {
  // The weights' shapes, checked against each other before any of their bytes is read.
  KILN_CHECK(ops.input && ops.input->dim() == 4 && ops.dw_weight && ops.dw_weight->dim() == 4 &&
                 ops.project_weight,
             kOp, "expected a 4-d input and depthwise weight to prepare the block");
  const int64_t E = ops.dw_weight->size(0);
  if (ops.expand_weight)
    check_dims(ops.expand_weight, "expand_weight", Dims{E, ops.input->size(1), 1, 1});
  check_dims(ops.project_weight, "project_weight", Dims{ops.project_weight->size(0), E, 1, 1});
  auto out = std::make_shared<Prepared>();
  out->channels_last = strategy == MBConvStrategy::ChannelsLast;
  auto pack = [&](const TensorImpl& w) {
    auto c = views::contiguous(w);
    // [O, K] as the left operand, or its transpose [K, O] as the right one.
    return out->channels_last
               ? sgemm_pack_b(true, w.size(1), w.size(0), c->data_ptr<float>(), w.size(1))
               : sgemm_pack_a(false, w.size(0), w.size(1), c->data_ptr<float>(), w.size(1));
  };
  if (ops.expand_weight) out->expand = pack(*ops.expand_weight);
  out->project = pack(*ops.project_weight);
  if (ops.expand_weight && !out->channels_last) {
    const int64_t C = ops.expand_weight->size(1);
    out->expand_panels.resize(static_cast<size_t>(
        checked_mul(conv_detail::expand_panels_floats(E, 1), C, int64_t(1) << 30, "expansion")));
    auto we = views::contiguous(*ops.expand_weight);
    conv_detail::pack_expand_panels(we->data_ptr<float>(), E, C, out->expand_panels.data());
  }
  if (out->channels_last) {
    check_dims(ops.dw_weight, "dw_weight",
               Dims{E, 1, ops.dw_weight->size(2), ops.dw_weight->size(3)});
    const int64_t taps = ops.dw_weight->size(2) * ops.dw_weight->size(3);
    out->dw_taps.resize(
        static_cast<size_t>(checked_mul(E, taps, int64_t(1) << 30, "depthwise taps")));
    auto wd = views::contiguous(*ops.dw_weight);
    dw_tap_major(wd->data_ptr<float>(), E, taps, out->dw_taps.data());
  }
  return out;
}

void mbconv_out(const MBConvOperands& ops, const MBConvParams& p, TensorImpl& out,
                const PreparedMBConv* prepared) {
  const Geometry g = geometry(ops, p);
  check_dims(&out, "out", Dims{g.N, g.P, g.Ho, g.Wo});
  const auto* prep = dynamic_cast<const Prepared*>(prepared);
  // A prepared object for other weight shapes is ignored (the caller promises the values).
  if (prep && (prep->channels_last != g.channels_last || (prep->expand != nullptr) != g.expand ||
               (prep->expand && (prep->expand->outer() != g.E || prep->expand->depth() != g.C)) ||
               prep->project->outer() != g.P || prep->project->depth() != g.E ||
               (g.channels_last && prep->dw_taps.size() != size_t(g.E * g.KH * g.KW))))
    prep = nullptr;
  auto x = views::contiguous(*ops.input);
  auto we = nn_detail::contig_or_null(ops.expand_weight),
       be = nn_detail::contig_or_null(ops.expand_bias);
  auto wd = views::contiguous(*ops.dw_weight);
  auto bd = nn_detail::contig_or_null(ops.dw_bias);
  auto wp = views::contiguous(*ops.project_weight);
  auto bp = nn_detail::contig_or_null(ops.project_bias),
       res = nn_detail::contig_or_null(ops.residual);
  // Channels-last data has no strided NCHW view: such operands must be the dense buffers.
  KILN_CHECK((!p.input_channels_last ||
              (ops.input->is_contiguous() && (!ops.residual || ops.residual->is_contiguous()))) &&
                 (!p.output_channels_last || out.is_contiguous()),
             kOp, "expected contiguous channels-last operands, got a strided ",
             p.output_channels_last && !out.is_contiguous() ? "output" : "input or residual");
  const bool direct = out.is_contiguous();
  TensorImplPtr tmp = direct ? TensorImplPtr{} : empty(out.sizes(), DType::Float32);
  TensorImpl& y = direct ? out : *tmp;
  if (g.N > 0 && g.P > 0 && g.Ho > 0 && g.Wo > 0) {
    const Data d{x->data_ptr<float>(), data_or_null(we),
                 data_or_null(be),     wd->data_ptr<float>(),
                 data_or_null(bd),     wp->data_ptr<float>(),
                 data_or_null(bp),     data_or_null(res),
                 y.data_ptr<float>(),  prep};
    const int nth = in_parallel_region() ? 1 : num_threads();
    if (g.channels_last) {
      // Unprepared weights: reordered per call, in the caching allocator's scratch.
      ConvScratch<float> own_taps(prep ? 0 : g.E * g.KH * g.KW);
      const float* taps = prep ? prep->dw_taps.data() : own_taps.get();
      if (!prep) dw_tap_major(d.wd, g.E, g.KH * g.KW, own_taps.get());
      // Not needed: eᵀ when the input is channels-last without expansion, yᵀ when the output is.
      const int64_t et_floats = !g.expand && p.input_channels_last ? 0 : g.eb_floats;
      const int64_t yt_floats = p.output_channels_last ? 0 : g.yt_floats;
      auto images = [&](int64_t n0, int64_t n1) {
        ConvScratch<float> et(et_floats), dt(g.db_floats), yt(yt_floats);
        for (int64_t n = n0; n < n1; ++n)
          run_image_channels_last(g, d, p, n, taps, et.get(), dt.get(), yt.get());
      };
      // Threads take whole images when they divide evenly (or there are many); otherwise the
      // images run one after another with each step parallel.
      if (nth > 1 && (g.N % nth == 0 || g.N >= 4 * nth))
        parallel_for(0, g.N, 1, images);
      else
        images(0, g.N);
    } else {
      // Work items: whole images, or row ranges of them when images are fewer than threads.
      const int64_t chunks = g.N >= nth ? 1 : std::min<int64_t>(g.Ho, (nth + g.N - 1) / g.N);
      const int64_t nr = prep ? gemm_detail::b_panel_width(*prep->project) : 0;
      const bool interleaved = interleaved_fits(g, d, p, nr);
      parallel_for(0, g.N * chunks, 1, [&](int64_t i0, int64_t i1) {
        ConvScratch<float> eb(interleaved ? g.ebi_floats
                              : g.expand  ? g.eb_floats
                                          : 0),
            db(g.db_floats);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t n = i / chunks, c = i % chunks;
          const int64_t oh0 = g.Ho * c / chunks, oh1 = g.Ho * (c + 1) / chunks;
          if (interleaved)
            run_rows_interleaved(g, d, p, n, oh0, oh1, eb.get(), db.get(), nr);
          else
            run_rows(g, d, p, n, oh0, oh1, eb.get(), db.get());
        }
      });
    }
  }
  if (!direct) copy_(out, *tmp);
}

}  // namespace kiln::kernels

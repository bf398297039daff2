// kernels::attention_out (kiln.attention) against a float64 loop written from the definition
// softmax(scale · q kᵀ + mask) · v, per batch and query row.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/runtime/kernels/attention.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace nn_test;

namespace {

struct Case {
  int64_t B, L, S, D, Dv;
};

// The reference on logical [B, L, D] / [B, S, D] / [B, S, Dv] values; mask given as [B, L, S]
// (already broadcast) or empty.
std::vector<double> reference(const Case& c, const std::vector<double>& q,
                              const std::vector<double>& k, const std::vector<double>& v,
                              const std::vector<double>& mask, double scale) {
  std::vector<double> out(static_cast<size_t>(c.B * c.L * c.Dv), 0.0);
  std::vector<double> p(static_cast<size_t>(c.S));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t l = 0; l < c.L; ++l) {
      double m = -std::numeric_limits<double>::infinity();
      for (int64_t s = 0; s < c.S; ++s) {
        double dot = 0;
        for (int64_t d = 0; d < c.D; ++d)
          dot += q[(b * c.L + l) * c.D + d] * k[(b * c.S + s) * c.D + d];
        p[s] = scale * dot + (mask.empty() ? 0.0 : mask[(b * c.L + l) * c.S + s]);
        m = std::max(m, p[s]);
      }
      double sum = 0;
      for (int64_t s = 0; s < c.S; ++s) sum += (p[s] = std::exp(p[s] - m));
      for (int64_t e = 0; e < c.Dv; ++e) {
        double acc = 0;
        for (int64_t s = 0; s < c.S; ++s) acc += p[s] / sum * v[(b * c.S + s) * c.Dv + e];
        out[(b * c.L + l) * c.Dv + e] = acc;
      }
    }
  return out;
}

// [B, R, C] values stored [R, B, C] (seq_first) as a contiguous tensor.
TensorImplPtr stored(const std::vector<double>& logical, Dims sizes, bool seq_first) {
  auto t = from_vec(logical, sizes, DType::Float32);
  if (!seq_first) return t;
  auto swapped = views::transpose(*t, 0, 1);
  return views::contiguous(*swapped);
}

// The logical [B, L, Dv] values of an output stored seq_first or not.
std::vector<double> logical(const TensorImpl& out, bool seq_first) {
  if (!seq_first) return to_vec(out);
  return to_vec(*views::transpose(out, 0, 1));
}

// Values in float32 precision (the reference sees what the kernel sees).
std::vector<double> f32(std::vector<double> v) {
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

void check(const Case& c, bool seq_first, bool with_mask, bool strided, double scale) {
  const auto qv = f32(rand_vec(c.B * c.L * c.D)), kv = f32(rand_vec(c.B * c.S * c.D));
  const auto vv = f32(rand_vec(c.B * c.S * c.Dv));
  auto q = stored(qv, {c.B, c.L, c.D}, false), k = stored(kv, {c.B, c.S, c.D}, false);
  auto v = stored(vv, {c.B, c.S, c.Dv}, false);
  if (seq_first) {
    q = stored(qv, {c.B, c.L, c.D}, true);
    k = stored(kv, {c.B, c.S, c.D}, true);
    v = stored(vv, {c.B, c.S, c.Dv}, true);
  }
  if (strided) {  // every operand a step-2 slice: columns not contiguous
    q = noncontig(*q);
    k = noncontig(*k);
    v = noncontig(*v);
  }
  // A [1, L, S] mask (broadcast over batches) with -inf in places, every row keeping a finite
  // entry; the reference gets it broadcast.
  TensorImplPtr mask;
  std::vector<double> mask_full;
  if (with_mask) {
    std::vector<double> m = f32(rand_vec(c.L * c.S, -2.0, 2.0));
    for (int64_t l = 0; l < c.L; ++l)
      for (int64_t s = 1; s < c.S; ++s)
        if ((l + s) % 3 == 0) m[l * c.S + s] = -std::numeric_limits<double>::infinity();
    mask = from_vec(m, {1, c.L, c.S}, DType::Float32);
    for (int64_t b = 0; b < c.B; ++b) mask_full.insert(mask_full.end(), m.begin(), m.end());
  }
  Dims out_sizes = seq_first ? Dims{c.L, c.B, c.Dv} : Dims{c.B, c.L, c.Dv};
  auto out = empty(out_sizes, DType::Float32);
  kernels::attention_out(*q, *k, *v, mask.get(), scale, seq_first, *out);
  expect_close(logical(*out, seq_first), reference(c, qv, kv, vv, mask_full, scale), 1e-4, 1e-5,
               "B" + std::to_string(c.B) + " L" + std::to_string(c.L) + " S" + std::to_string(c.S) +
                   (seq_first ? " seq_first" : "") + (with_mask ? " mask" : "") +
                   (strided ? " strided" : ""));
}

}  // namespace

TEST(Attention, MatchesTheDefinitionInFloat64) {
  // Several row blocks per batch (L 100 on one batch), a ragged key length, one key, one
  // feature, the transformer block's head shape.
  const Case cases[] = {{1, 100, 37, 16, 8}, {3, 5, 1, 4, 6}, {2, 7, 9, 1, 3}, {4, 64, 64, 64, 64}};
  const int saved = num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Case& c : cases)
      for (bool seq_first : {false, true})
        for (bool with_mask : {false, true}) check(c, seq_first, with_mask, false, 0.37);
    check(cases[0], true, true, true, 1.0);
    check(cases[1], false, false, true, 0.125);
  }
  set_num_threads(saved);
}

// Two batch dims [B, H, L, D] (heads apart), stored batch-major or with the sequence before the
// heads ([B, L, H, D], as a reshaped projection is before its heads are transposed out), with a
// [B, 1, 1, S] padding mask: the rank-3 reference over the B * H flattened batches.
TEST(Attention, TwoBatchDimsInBothLayouts) {
  const int64_t B = 2, H = 3, L = 9, S = 11, D = 8, Dv = 5;
  const Case flat{B * H, L, S, D, Dv};
  const auto qv = f32(rand_vec(B * H * L * D)), kv = f32(rand_vec(B * H * S * D));
  const auto vv = f32(rand_vec(B * H * S * Dv));
  std::vector<double> pad(static_cast<size_t>(B * S), 0.0), pad_full;
  pad[S - 1] = pad[S + 2] = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t l = 0; l < L; ++l)
        pad_full.insert(pad_full.end(), pad.begin() + b * S, pad.begin() + (b + 1) * S);
  const std::vector<double> want = reference(flat, qv, kv, vv, pad_full, 0.3);
  auto mask = from_vec(pad, {B, 1, 1, S}, DType::Float32);
  for (bool seq_first : {false, true}) {
    auto store = [&](const std::vector<double>& x, int64_t rows, int64_t cols) {
      auto t = from_vec(x, {B, H, rows, cols}, DType::Float32);
      return seq_first ? views::contiguous(*views::transpose(*t, 1, 2)) : t;
    };
    auto q = store(qv, L, D), k = store(kv, S, D), v = store(vv, S, Dv);
    auto out = empty(seq_first ? Dims{B, L, H, Dv} : Dims{B, H, L, Dv}, DType::Float32);
    kernels::attention_out(*q, *k, *v, mask.get(), 0.3, seq_first, *out);
    const std::vector<double> got =
        seq_first ? to_vec(*views::transpose(*out, 1, 2)) : to_vec(*out);
    expect_close(got, want, 1e-4, 1e-5, seq_first ? "rank 4 seq_first" : "rank 4");
  }
}

// A fully masked row has no finite score: NaN, as softmax of all -inf gives.
TEST(Attention, AFullyMaskedRowIsNaN) {
  auto q = rand_tensor({1, 2, 4}), k = rand_tensor({1, 3, 4}), v = rand_tensor({1, 3, 2});
  const double inf = std::numeric_limits<double>::infinity();
  auto mask = from_vec({-inf, -inf, -inf, 0, 0, 0}, {2, 3}, DType::Float32);
  auto out = empty(Dims{1, 2, 2}, DType::Float32);
  kernels::attention_out(*q, *k, *v, mask.get(), 1.0, false, *out);
  const std::vector<double> got = to_vec(*out);
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[1]));
  EXPECT_TRUE(std::isfinite(got[2]) && std::isfinite(got[3]));
}

TEST(Attention, BadOperandsNameTheExpectedShape) {
  auto q = rand_tensor({2, 4, 8}), k = rand_tensor({2, 5, 8}), v = rand_tensor({2, 5, 3});
  auto out = empty(Dims{2, 4, 3}, DType::Float32);
  auto run = [&](const TensorImpl& qq, const TensorImpl& kk, const TensorImpl& vv,
                 const TensorImpl* m, TensorImpl& o) {
    return error_of([&] { kernels::attention_out(qq, kk, vv, m, 1.0, false, o); });
  };
  EXPECT_EQ(run(*q, *k, *v, nullptr, *out), "");
  auto k7 = rand_tensor({2, 5, 7});
  EXPECT_NE(run(*q, *k7, *v, nullptr, *out).find("expected key features 8"), std::string::npos);
  auto v4 = rand_tensor({2, 4, 3});
  EXPECT_NE(run(*q, *k, *v4, nullptr, *out).find("expected value rows 5"), std::string::npos);
  auto k3 = rand_tensor({3, 5, 8});
  EXPECT_NE(run(*q, *k3, *v, nullptr, *out).find("with the same batch dims"), std::string::npos);
  auto mask = rand_tensor({4, 4});
  EXPECT_NE(run(*q, *k, *v, mask.get(), *out).find("broadcastable to [1, 2, 4, 5]"),
            std::string::npos);
  auto qd = rand_tensor({2, 4, 8}, DType::Float64);
  EXPECT_NE(run(*qd, *k, *v, nullptr, *out).find("of dtype f32"), std::string::npos);
  auto q2 = rand_tensor({4, 8});
  EXPECT_NE(run(*q2, *k, *v, nullptr, *out).find("of rank 3 or 4"), std::string::npos);
  auto k4 = rand_tensor({1, 2, 5, 8});
  EXPECT_NE(run(*q, *k4, *v, nullptr, *out).find("key of rank 3 (the query's)"), std::string::npos);
  auto wrong = empty(Dims{2, 4, 4}, DType::Float32);
  EXPECT_NE(run(*q, *k, *v, nullptr, *wrong).find("expected out f32[2, 4, 3]"), std::string::npos);
  EXPECT_NE(error_of([&] {
              kernels::attention_out(*q, *k, *v, nullptr, NAN, false, *out);
            }).find("scale"),
            std::string::npos);
}

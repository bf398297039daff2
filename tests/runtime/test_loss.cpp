// Losses, embedding and dropout against naive float64 formulas written here; backward passes
// against central finite differences of the (separately verified) float64 forward.
#include <gtest/gtest.h>

#include "kiln/runtime/kernels/embedding.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/thread_pool.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

const char* red_name(LossReduction r) {
  return r == LossReduction::None ? "none" : r == LossReduction::Mean ? "mean" : "sum";
}

TensorImplPtr out_for(Dims elem, LossReduction r, DType dt) {
  return empty(r == LossReduction::None ? elem : Dims{}, dt);
}

// Reduces per-element losses as PyTorch does for pointwise losses.
std::vector<double> reduce_ref(const std::vector<double>& l, LossReduction r) {
  if (r == LossReduction::None) return l;
  double s = 0;
  for (double v : l) s += v;
  return {r == LossReduction::Mean ? s / double(l.size()) : s};
}

std::vector<int64_t> rand_targets(int64_t n, int64_t C, int64_t ignore_index, double p_ignore) {
  std::uniform_int_distribution<int64_t> u(0, C - 1);
  std::uniform_real_distribution<double> q(0, 1);
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (auto& v : t) v = q(rng()) < p_ignore ? ignore_index : u(rng());
  return t;
}

TensorImplPtr int_tensor(const std::vector<int64_t>& v, Dims s, DType dt = DType::Int64) {
  auto t = empty(s, DType::Int64);
  std::copy(v.begin(), v.end(), t->data_ptr<int64_t>());
  if (dt == DType::Int64) return t;
  auto r = empty(s, dt);
  kernels::copy_(*r, *t);
  return r;
}

// Reference cross entropy per sample for input [N, C, S...] laid out as (n, c, s), written from
// the definition: log-softmax over c, then the label-smoothed weighted NLL.
struct CeRef {
  std::vector<double> per_sample;
  double denom = 0;
};
CeRef ref_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& t, int64_t N,
                        int64_t C, int64_t S, const std::vector<double>* w, int64_t ignore,
                        double eps, bool logits) {
  CeRef r;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      const int64_t tt = t[n * S + s];
      if (tt == ignore) {
        r.per_sample.push_back(0);
        continue;
      }
      std::vector<double> logp(C);
      double z = 0;
      for (int64_t c = 0; c < C; ++c) z += std::exp(x[(n * C + c) * S + s]);
      for (int64_t c = 0; c < C; ++c)
        logp[c] = logits ? x[(n * C + c) * S + s] - std::log(z) : x[(n * C + c) * S + s];
      const double wt = w ? (*w)[tt] : 1.0;
      double smooth = 0;
      for (int64_t c = 0; c < C; ++c) smooth -= (w ? (*w)[c] : 1.0) * logp[c];
      const double nll = -wt * logp[tt];
      r.per_sample.push_back(logits ? (1 - eps) * nll + eps / C * smooth : nll);
      r.denom += wt;
    }
  return r;
}

}  // namespace

TEST(Loss, CrossEntropyForwardBackward) {
  struct C {
    Dims xs;  // input shape
    bool weighted;
    double eps;
    double p_ignore;
  };
  for (const C& c : {C{Dims{6, 5}, false, 0.0, 0.0}, C{Dims{6, 5}, true, 0.0, 0.3},
                     C{Dims{7, 4}, false, 0.2, 0.2}, C{Dims{5, 6}, true, 0.1, 0.2},
                     C{Dims{3, 4, 2, 3}, true, 0.15, 0.2}, C{Dims{2, 3, 5}, false, 0.0, 0.0},
                     C{Dims{9}, true, 0.1, 0.0}}) {
    const bool vec = c.xs.size() == 1;
    const int64_t N = vec ? 1 : c.xs[0], Cc = vec ? c.xs[0] : c.xs[1];
    const int64_t S = numel(c.xs) / (N * Cc);
    Dims ts;
    if (!vec) {
      ts.push_back(N);
      for (size_t d = 2; d < c.xs.size(); ++d) ts.push_back(c.xs[d]);
    }
    auto xv = rand_vec(numel(c.xs), -3, 3), wv = rand_vec(Cc, 0.2, 2.0);
    auto tv = rand_targets(N * S, Cc, -100, c.p_ignore);
    if (c.p_ignore > 0) tv[0] = 1;  // at least one counted sample
    auto target = int_tensor(tv, ts, DType::Int32);
    auto w64 = from_vec(wv, Dims{Cc}, DType::Float64);
    for (LossReduction red : {LossReduction::None, LossReduction::Mean, LossReduction::Sum}) {
      SCOPED_TRACE(testing::Message() << c.xs << " weighted " << c.weighted << " eps " << c.eps
                                      << " " << red_name(red));
      CrossEntropyOptions opt;
      opt.weight = c.weighted ? w64.get() : nullptr;
      opt.label_smoothing = c.eps;
      opt.reduction = red;
      auto ref = ref_cross_entropy(xv, tv, N, Cc, S, c.weighted ? &wv : nullptr, -100, c.eps, true);
      std::vector<double> want = ref.per_sample;
      if (red != LossReduction::None) {
        double s = 0;
        for (double v : ref.per_sample) s += v;
        want = {red == LossReduction::Mean ? s / ref.denom : s};
      }
      EXPECT_EQ(cross_entropy_output_shape(c.xs, ts, red),
                red == LossReduction::None ? ts : Dims{});
      auto f = [&](const std::vector<double>& v) {
        auto x = from_vec(v, c.xs, DType::Float64);
        auto y = out_for(ts, red, DType::Float64);
        cross_entropy_out(*x, *target, opt, *y);
        return to_vec(*y);
      };
      expect_close(f(xv), want, 1e-12, 1e-12, "cross_entropy f64");
      auto x32 = noncontig(*from_vec(xv, c.xs, DType::Float32), true);
      auto y32 = out_for(ts, red, DType::Float32);
      cross_entropy_out(*x32, *target, opt, *y32);
      expect_close(to_vec(*y32), want, 1e-5, 1e-5, "cross_entropy f32");
      // Backward vs finite differences.
      auto r = rand_vec(static_cast<int64_t>(want.size()));
      auto num = numeric_grad(xv, f, r);
      for (DType dt : {DType::Float64, DType::Float32}) {
        auto x = from_vec(xv, c.xs, dt);
        auto gy = from_vec(r, red == LossReduction::None ? ts : Dims{}, dt);
        auto gx = noncontig(*empty(c.xs, dt));
        cross_entropy_backward_out(*gy, *x, *target, opt, *gx);
        const double tol = dt == DType::Float64 ? 1e-7 : 1e-5;
        expect_close(to_vec(*gx), num, tol, tol, "cross_entropy_backward");
      }
    }
  }
}

TEST(Loss, CrossEntropyIsStableForLargeLogits) {
  // Softmax is shift invariant: logits + 1000 must give the same (finite) loss.
  auto xv = rand_vec(4 * 6, -2, 2);
  auto tv = rand_targets(4, 6, -100, 0);
  auto target = int_tensor(tv, Dims{4});
  std::vector<double> shifted(xv);
  for (auto& v : shifted) v += 1000;
  CrossEntropyOptions opt;
  opt.label_smoothing = 0.1;
  for (DType dt : {DType::Float32, DType::Float64}) {
    auto y0 = empty(Dims{}, dt), y1 = empty(Dims{}, dt);
    cross_entropy_out(*from_vec(xv, Dims{4, 6}, dt), *target, opt, *y0);
    cross_entropy_out(*from_vec(shifted, Dims{4, 6}, dt), *target, opt, *y1);
    const double a = to_vec(*y0)[0], b = to_vec(*y1)[0];
    EXPECT_TRUE(std::isfinite(b));
    EXPECT_NEAR(a, b, dt == DType::Float32 ? 2e-3 : 1e-9);
  }
  // All targets ignored with mean: 0/0 = NaN as PyTorch.
  auto all_ignored = int_tensor({-100, -100}, Dims{2});
  auto y = empty(Dims{}, DType::Float32);
  cross_entropy_out(*rand_tensor(Dims{2, 3}), *all_ignored, CrossEntropyOptions{}, *y);
  EXPECT_TRUE(std::isnan(y->data_ptr<float>()[0]));
}

TEST(Loss, CrossEntropyErrors) {
  auto x = rand_tensor(Dims{3, 5});
  auto y = empty(Dims{}, DType::Float32);
  auto bad = int_tensor({0, 5, 1}, Dims{3});
  expect_error([&] { cross_entropy_out(*x, *bad, CrossEntropyOptions{}, *y); },
               {"cross_entropy", "[0, 5)", "got 5", "out of range"});
  auto neg = int_tensor({0, -1, 1}, Dims{3});
  expect_error([&] { cross_entropy_out(*x, *neg, CrossEntropyOptions{}, *y); },
               {"cross_entropy", "got -1"});
  auto wrong_shape = int_tensor({0, 1}, Dims{2});
  expect_error([&] { cross_entropy_out(*x, *wrong_shape, CrossEntropyOptions{}, *y); },
               {"cross_entropy", "target of shape [3]", "got [2]"});
  auto ft = rand_tensor(Dims{3});
  expect_error([&] { cross_entropy_out(*x, *ft, CrossEntropyOptions{}, *y); },
               {"cross_entropy", "integer dtype"});
  auto w = rand_tensor(Dims{4});
  auto ok = int_tensor({0, 1, 2}, Dims{3});
  CrossEntropyOptions opt;
  opt.weight = w.get();
  expect_error([&] { cross_entropy_out(*x, *ok, opt, *y); },
               {"cross_entropy", "weight of shape [5]"});
  auto g = empty(Dims{3, 5}, DType::Float32);
  auto gy = empty(Dims{}, DType::Float32);
  expect_error([&] { cross_entropy_backward_out(*gy, *x, *bad, CrossEntropyOptions{}, *g); },
               {"cross_entropy_backward", "out of range"});
}

TEST(Loss, NllLossForwardBackward) {
  for (Dims xs : {Dims{6, 4}, Dims{3, 5, 2}}) {
    const int64_t N = xs[0], Cc = xs[1], S = numel(xs) / (N * Cc);
    Dims ts{N};
    for (size_t d = 2; d < xs.size(); ++d) ts.push_back(xs[d]);
    auto xv = rand_vec(numel(xs), -3, 0), wv = rand_vec(Cc, 0.5, 2);
    auto tv = rand_targets(N * S, Cc, 2, 0.2);  // ignore_index = 2 (a valid class id)
    tv[0] = 0;
    auto target = int_tensor(tv, ts);
    auto w = from_vec(wv, Dims{Cc}, DType::Float32);
    for (LossReduction red : {LossReduction::None, LossReduction::Mean, LossReduction::Sum}) {
      SCOPED_TRACE(testing::Message() << xs << " " << red_name(red));
      CrossEntropyOptions opt;
      opt.weight = w.get();
      opt.ignore_index = 2;
      opt.reduction = red;
      auto wr = to_vec(*w);
      auto ref = ref_cross_entropy(xv, tv, N, Cc, S, &wr, 2, 0, false);
      std::vector<double> want = ref.per_sample;
      if (red != LossReduction::None) {
        double s = 0;
        for (double v : ref.per_sample) s += v;
        want = {red == LossReduction::Mean ? s / ref.denom : s};
      }
      auto f = [&](const std::vector<double>& v) {
        auto x = from_vec(v, xs, DType::Float64);
        auto y = out_for(ts, red, DType::Float64);
        nll_loss_out(*x, *target, opt, *y);
        return to_vec(*y);
      };
      expect_close(f(xv), want, 1e-12, 1e-12, "nll_loss");
      auto r = rand_vec(static_cast<int64_t>(want.size()));
      auto num = numeric_grad(xv, f, r);
      auto gx = empty(xs, DType::Float32);
      nll_loss_backward_out(*from_vec(r, red == LossReduction::None ? ts : Dims{}, DType::Float32),
                            *from_vec(xv, xs, DType::Float32), *target, opt, *gx);
      expect_close(to_vec(*gx), num, 1e-5, 1e-5, "nll_loss_backward");
    }
  }
}

TEST(Loss, PointwiseLossesForwardBackward) {
  enum Kind { Mse, SmoothL1, SmoothL1Zero, Bce, BceWeighted };
  for (Kind kind : {Mse, SmoothL1, SmoothL1Zero, Bce, BceWeighted}) {
    for (Dims xs : {Dims{4, 5}, Dims{2, 3, 4}, Dims{7}, Dims{}}) {
      for (LossReduction red : {LossReduction::None, LossReduction::Mean, LossReduction::Sum}) {
        SCOPED_TRACE(testing::Message() << "kind " << kind << " " << xs << " " << red_name(red));
        const int64_t n = numel(xs);
        auto xv = rand_vec(n, -3, 3);
        const bool bce = kind == Bce || kind == BceWeighted;
        auto yv = bce ? rand_vec(n, 0, 1) : rand_vec(n, -3, 3);
        const double beta = kind == SmoothL1Zero ? 0.0 : 1.3;
        // Class weight over the last dim and a full-shape weight (broadcast).
        const int64_t last = xs.size() ? xs.back() : 1;
        auto pwv = rand_vec(last, 0.5, 3), wv = rand_vec(last, 0.1, 1);
        Dims ws = xs.size() ? Dims{last} : Dims{};
        auto pw = from_vec(pwv, ws, DType::Float64), w = from_vec(wv, ws, DType::Float64);
        std::vector<double> per(n);
        for (int64_t i = 0; i < n; ++i) {
          const double x = xv[i], y = yv[i], d = x - y;
          switch (kind) {
            case Mse:
              per[i] = d * d;
              break;
            case SmoothL1:
              per[i] = std::abs(d) < beta ? 0.5 * d * d / beta : std::abs(d) - 0.5 * beta;
              break;
            case SmoothL1Zero:
              per[i] = std::abs(d);
              break;
            case Bce: {
              const double s = 1 / (1 + std::exp(-x));
              per[i] = -(y * std::log(s) + (1 - y) * std::log(1 - s));
              break;
            }
            case BceWeighted: {
              const double s = 1 / (1 + std::exp(-x));
              const int64_t c = i % last;
              per[i] = -wv[c] * (pwv[c] * y * std::log(s) + (1 - y) * std::log(1 - s));
              break;
            }
          }
        }
        const auto want = reduce_ref(per, red);
        auto yt64 = from_vec(yv, xs, DType::Float64);
        auto run = [&](const TensorImpl& x, const TensorImpl& y, TensorImpl& out) {
          switch (kind) {
            case Mse:
              mse_loss_out(x, y, red, out);
              break;
            case SmoothL1:
            case SmoothL1Zero:
              smooth_l1_loss_out(x, y, red, beta, out);
              break;
            case Bce:
              binary_cross_entropy_with_logits_out(x, y, nullptr, nullptr, red, out);
              break;
            case BceWeighted:
              binary_cross_entropy_with_logits_out(x, y, w.get(), pw.get(), red, out);
              break;
          }
        };
        auto f = [&](const std::vector<double>& v) {
          auto x = from_vec(v, xs, DType::Float64);
          auto out = empty(pointwise_loss_output_shape(xs, red), DType::Float64);
          run(*x, *yt64, *out);
          return to_vec(*out);
        };
        expect_close(f(xv), want, 1e-10, 1e-10, "forward f64");
        auto x32 = noncontig(*from_vec(xv, xs, DType::Float32));
        auto y32 = from_vec(yv, xs, DType::Float32);
        auto o32 = empty(pointwise_loss_output_shape(xs, red), DType::Float32);
        run(*x32, *y32, *o32);
        expect_close(to_vec(*o32), want, 1e-5, 1e-5, "forward f32");
        auto r = rand_vec(static_cast<int64_t>(want.size()));
        auto num = numeric_grad(xv, f, r);
        for (DType dt : {DType::Float64, DType::Float32}) {
          auto x = from_vec(xv, xs, dt), y = from_vec(yv, xs, dt);
          auto gy = from_vec(r, pointwise_loss_output_shape(xs, red), dt);
          auto gx = noncontig(*empty(xs, dt));
          switch (kind) {
            case Mse:
              mse_loss_backward_out(*gy, *x, *y, red, *gx);
              break;
            case SmoothL1:
            case SmoothL1Zero:
              smooth_l1_loss_backward_out(*gy, *x, *y, red, beta, *gx);
              break;
            case Bce:
              binary_cross_entropy_with_logits_backward_out(*gy, *x, *y, nullptr, nullptr, red,
                                                            *gx);
              break;
            case BceWeighted:
              binary_cross_entropy_with_logits_backward_out(*gy, *x, *y, w.get(), pw.get(), red,
                                                            *gx);
              break;
          }
          const double tol = dt == DType::Float64 ? 1e-6 : 1e-5;
          expect_close(to_vec(*gx), num, tol, tol, "backward");
        }
      }
    }
  }
}

TEST(Loss, BceWithLogitsIsStable) {
  // |x| = 100: the naive formula overflows; the stable one gives ~0 and ~100.
  auto x = from_vec({100, -100, 100, -100}, Dims{4}, DType::Float32);
  auto y = from_vec({1, 0, 0, 1}, Dims{4}, DType::Float32);
  auto out = empty(Dims{4}, DType::Float32);
  binary_cross_entropy_with_logits_out(*x, *y, nullptr, nullptr, LossReduction::None, *out);
  auto v = to_vec(*out);
  EXPECT_NEAR(v[0], 0, 1e-6);
  EXPECT_NEAR(v[1], 0, 1e-6);
  EXPECT_NEAR(v[2], 100, 1e-4);
  EXPECT_NEAR(v[3], 100, 1e-4);
}

TEST(Loss, PointwiseErrorsAndLargeInputs) {
  auto x = rand_tensor(Dims{3, 4});
  auto y = rand_tensor(Dims{4, 3});
  auto out = empty(Dims{}, DType::Float32);
  expect_error([&] { mse_loss_out(*x, *y, LossReduction::Mean, *out); },
               {"mse_loss", "target (same as input) of shape [3, 4]", "got [4, 3]"});
  auto yd = rand_tensor(Dims{3, 4}, DType::Float64);
  expect_error([&] { mse_loss_out(*x, *yd, LossReduction::Mean, *out); },
               {"mse_loss", "target of dtype float32"});
  auto y2 = rand_tensor(Dims{3, 4});
  expect_error([&] { smooth_l1_loss_out(*x, *y2, LossReduction::Mean, -1.0, *out); },
               {"smooth_l1_loss", "beta >= 0"});
  auto pw = rand_tensor(Dims{3});
  expect_error(
      [&] {
        binary_cross_entropy_with_logits_out(*x, *y2, nullptr, pw.get(), LossReduction::Mean, *out);
      },
      {"binary_cross_entropy_with_logits"});
  auto big = empty(Dims{2, 2}, DType::Float32);
  expect_error([&] { mse_loss_out(*x, *y2, LossReduction::Sum, *big); }, {"mse_loss", "1 element"});
  // Large input: chunked reduction independent of thread count.
  const int saved = num_threads();
  auto xv = rand_vec(100003), yv = rand_vec(100003);
  auto xl = from_vec(xv, Dims{100003}, DType::Float32),
       yl = from_vec(yv, Dims{100003}, DType::Float32);
  double ref = 0;
  auto xr = to_vec(*xl), yr = to_vec(*yl);
  for (size_t i = 0; i < xr.size(); ++i) ref += (xr[i] - yr[i]) * (xr[i] - yr[i]);
  std::vector<double> got;
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    auto o = empty(Dims{}, DType::Float32);
    mse_loss_out(*xl, *yl, LossReduction::Mean, *o);
    got.push_back(to_vec(*o)[0]);
    EXPECT_NEAR(got.back(), ref / 100003, 1e-6);
  }
  EXPECT_EQ(got[0], got[1]);
  set_num_threads(saved);
}

// =============================================================================================
// Embedding and dropout

TEST(Embedding, ForwardGathersRows) {
  const int64_t V = 11, D = 7;
  auto wv = rand_vec(V * D);
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    auto w = noncontig(*from_vec(wv, Dims{V, D}, dt), true);
    auto wr = to_vec(*w);
    std::vector<int64_t> iv = {3, 0, 10, 3, 7, 1};
    for (DType it : {DType::Int64, DType::Int32}) {
      auto idx = int_tensor(iv, Dims{2, 3}, it);
      auto out = empty(embedding_output_shape(idx->sizes(), w->sizes()), dt);
      EXPECT_EQ(out->sizes(), (Dims{2, 3, D}));
      embedding_out(*w, *idx, *out);
      std::vector<double> want;
      for (int64_t i : iv)
        for (int64_t d = 0; d < D; ++d) want.push_back(wr[i * D + d]);
      expect_close(to_vec(*out), want, 0, 0, "embedding");
    }
  }
  // 0-dim index and empty index.
  auto w = from_vec(wv, Dims{V, D}, DType::Float32);
  auto i0 = int_tensor({4}, Dims{});
  auto o0 = empty(Dims{D}, DType::Float32);
  embedding_out(*w, *i0, *o0);
  EXPECT_EQ(to_vec(*o0)[2], to_vec(*w)[4 * D + 2]);
  auto ie = empty(Dims{0, 3}, DType::Int64);
  auto oe = empty(Dims{0, 3, D}, DType::Float32);
  embedding_out(*w, *ie, *oe);
}

TEST(Embedding, Errors) {
  auto w = rand_tensor(Dims{5, 3});
  auto out = empty(Dims{3, 3}, DType::Float32);
  auto bad = int_tensor({0, 5, 2}, Dims{3});
  expect_error([&] { embedding_out(*w, *bad, *out); }, {"embedding", "[0, 5)", "got 5"});
  auto neg = int_tensor({0, -1, 2}, Dims{3});
  expect_error([&] { embedding_out(*w, *neg, *out); }, {"embedding", "got -1"});
  auto fidx = rand_tensor(Dims{3});
  expect_error([&] { embedding_out(*w, *fidx, *out); }, {"embedding", "integer dtype"});
  auto w3 = rand_tensor(Dims{5, 3, 1});
  expect_error([&] { embedding_output_shape(Dims{3}, w3->sizes()); },
               {"embedding", "weight of 2 dims"});
  auto gw = empty(Dims{5, 3}, DType::Float32);
  auto gy = rand_tensor(Dims{3, 3});
  auto ok = int_tensor({0, 1, 2}, Dims{3});
  expect_error([&] { embedding_backward_out(*gy, *ok, 5, false, *gw); },
               {"embedding_backward", "padding_idx"});
}

TEST(Embedding, BackwardAccumulates) {
  const int64_t V = 9, D = 5;
  std::uniform_int_distribution<int64_t> u(0, V - 1);
  for (int64_t n : {12, 20000}) {  // small (serial) and large (parallel over rows)
    std::vector<int64_t> iv(n);
    for (auto& v : iv) v = u(rng());
    iv[0] = iv[1] = 4;  // repeated index
    auto idx = int_tensor(iv, Dims{n});
    auto gyv = rand_vec(n * D);
    for (std::optional<int64_t> pad :
         {std::optional<int64_t>{}, std::optional<int64_t>{4}, std::optional<int64_t>{-1}}) {
      for (bool freq : {false, true}) {
        for (DType dt : {DType::Float32, DType::Float64}) {
          SCOPED_TRACE(testing::Message()
                       << "n " << n << " pad " << (pad ? *pad : 99) << " freq " << freq);
          auto gy = from_vec(gyv, Dims{n, D}, dt);
          auto gw = noncontig(*empty(Dims{V, D}, dt));
          embedding_backward_out(*gy, *idx, pad, freq, *gw);
          std::vector<double> want(V * D, 0.0);
          std::vector<int> count(V, 0);
          for (int64_t i : iv) ++count[i];
          const int64_t p = pad ? (*pad < 0 ? *pad + V : *pad) : -1;
          for (int64_t i = 0; i < n; ++i) {
            if (iv[i] == p) continue;
            for (int64_t d = 0; d < D; ++d)
              want[iv[i] * D + d] += gyv[i * D + d] / (freq ? count[iv[i]] : 1);
          }
          expect_close(to_vec(*gw), want, 1e-4, 1e-4, "embedding_backward");
        }
      }
    }
  }
}

TEST(Embedding, DropoutWithMask) {
  const Dims xs{4, 6};
  auto xv = rand_vec(numel(xs));
  std::vector<int64_t> mv(numel(xs));
  std::bernoulli_distribution b(0.6);
  for (auto& m : mv) m = b(rng());
  for (DType mdt : {DType::Bool, DType::UInt8}) {
    for (DType dt : {DType::Float32, DType::Float64, DType::Float16}) {
      auto x = noncontig(*from_vec(xv, xs, dt), true);
      auto xr = to_vec(*x);
      auto mask = int_tensor(mv, xs, mdt);
      auto out = empty(xs, dt);
      const double p = 0.3;
      dropout_out(*x, *mask, p, *out);
      std::vector<double> want(xr.size());
      for (size_t i = 0; i < xr.size(); ++i) want[i] = mv[i] ? xr[i] / (1 - p) : 0.0;
      expect_close(to_vec(*out), want, 2e-3, 1e-6, "dropout");
      auto gx = noncontig(*empty(xs, dt));
      dropout_backward_out(*x, *mask, p, *gx);
      expect_close(to_vec(*gx), want, 2e-3, 1e-6, "dropout_backward");
    }
  }
  // Broadcast mask (one per row) and p == 1.
  auto x = from_vec(xv, xs, DType::Float32);
  auto rowmask = int_tensor({1, 0, 1, 0}, Dims{4, 1}, DType::Bool);
  auto out = empty(xs, DType::Float32);
  dropout_out(*x, *rowmask, 0.5, *out);
  auto o = to_vec(*out), xr = to_vec(*x);
  for (int64_t i = 0; i < numel(xs); ++i)
    EXPECT_NEAR(o[i], (i / 6) % 2 == 0 ? xr[i] * 2 : 0.0, 1e-6);
  auto ones = int_tensor(std::vector<int64_t>(numel(xs), 1), xs, DType::Bool);
  dropout_out(*x, *ones, 1.0, *out);
  for (double v : to_vec(*out)) EXPECT_EQ(v, 0.0);
  auto fm = rand_tensor(xs);
  expect_error([&] { dropout_out(*x, *fm, 0.5, *out); },
               {"dropout", "mask of dtype bool or uint8"});
  expect_error([&] { dropout_out(*x, *ones, 1.5, *out); }, {"dropout", "p in [0, 1]"});
}

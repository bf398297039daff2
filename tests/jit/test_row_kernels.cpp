// Softmax, log-softmax, layer norm and logsumexp over the last dim as generated row kernels
// (#24): the compiled values against eager's (the runtime kernel) and a float64 reference, with
// their elementwise inputs computed in the same kernel — broadcast masks, strided views, -inf,
// +inf and NaN rows, one column, one dimension, float64, rows spread over threads; and sum, mean,
// amax and amin over leading dims as column kernels. Each at every vector width: the scalar loops
// (-1) and the linalg reductions of the vector pipeline at 128, 256 and 512 bits (rows of 17, 33,
// 1000: whole tiles and remainders).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::at_vector_width;
using kiln::test::kVectorWidths;
using kiln::test::rnd;

namespace {

// Compares element by element in float64: NaN where the reference is NaN, equal infinities,
// else within tol relative to max(1, |reference|).
void expect_matches(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const Tensor g = got.to(DType::Float64).contiguous(), w = want.to(DType::Float64).contiguous();
  const double* gp = g.data_ptr<double>();
  const double* wp = w.data_ptr<double>();
  int bad = 0;
  for (int64_t i = 0; i < g.numel() && bad < 5; ++i) {
    const bool ok = std::isnan(wp[i]) ? std::isnan(gp[i])
                                      : gp[i] == wp[i] || std::abs(gp[i] - wp[i]) <=
                                                              tol * std::max(1.0, std::abs(wp[i]));
    if (!ok) ADD_FAILURE() << what << " element " << i << ": " << gp[i] << " vs " << wp[i], ++bad;
  }
}

// The float64 formula, row by row over the last dim: the independent reference.
Tensor reference(const Tensor& x, bool log) {
  Tensor d = x.to(DType::Float64).contiguous();
  const int64_t cols = d.size(-1), rows = d.numel() / std::max<int64_t>(cols, 1);
  Tensor out = empty_like(d);
  const double* in = d.data_ptr<double>();
  double* o = out.data_ptr<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t j = 0; j < cols; ++j)
      m = std::isnan(in[r * cols + j]) ? NAN : std::max(m, in[r * cols + j]);
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(in[r * cols + j] - m);
    for (int64_t j = 0; j < cols; ++j)
      o[r * cols + j] =
          log ? in[r * cols + j] - m - std::log(s) : std::exp(in[r * cols + j] - m) / s;
  }
  return out;
}

struct Case {
  std::string name;
  std::function<TensorList(const TensorList&)> fn;
  TensorList inputs;
  // The softmax's input, computed eagerly, for the float64 reference (empty: skip it).
  std::function<Tensor(const TensorList&)> softmax_input;
  bool log = false;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  auto scaled = [](const TensorList& t) { return t[0] * 0.125 + t[1]; };
  c.push_back({"scaled and masked scores",
               [=](const TensorList& t) { return TensorList{softmax(scaled(t), -1)}; },
               {rnd({2, 3, 5, 17}, 1, 4.0), rnd({1, 1, 5, 17}, 2)},
               scaled});
  c.push_back({"log-softmax, dim given as rank - 1",
               [=](const TensorList& t) { return TensorList{log_softmax(scaled(t), 3)}; },
               {rnd({2, 3, 5, 17}, 3, 4.0), rnd({5, 17}, 4)},
               scaled,
               true});
  auto transposed = [](const TensorList& t) { return t[0].transpose(1, 2); };
  c.push_back({"strided rows (a transposed argument)",
               [=](const TensorList& t) { return TensorList{softmax(transposed(t), -1)}; },
               {rnd({3, 7, 9}, 5, 3.0)},
               transposed});
  Tensor masked = rnd({4, 6}, 6);
  masked.data_ptr<float>()[1] = -INFINITY;                                  // a row with one -inf
  for (int j = 0; j < 6; ++j) masked.data_ptr<float>()[6 + j] = -INFINITY;  // a row of -inf
  masked.data_ptr<float>()[14] = NAN;                                       // a row with a NaN
  masked.data_ptr<float>()[20] = 1e4f;  // a large value: exp would overflow unshifted
  auto identity = [](const TensorList& t) { return t[0] * 1.0; };
  c.push_back({"-inf, NaN and large values",
               [=](const TensorList& t) { return TensorList{softmax(identity(t), -1)}; },
               {masked},
               identity});
  c.push_back({"log-softmax of -inf, NaN and large values",
               [=](const TensorList& t) { return TensorList{log_softmax(identity(t), -1)}; },
               {masked},
               identity,
               true});
  auto plus_one = [](const TensorList& t) { return t[0] + 1.0; };
  c.push_back({"one column",
               [=](const TensorList& t) { return TensorList{softmax(plus_one(t), -1)}; },
               {rnd({5, 1}, 7)},
               plus_one});
  c.push_back({"one dimension",
               [=](const TensorList& t) { return TensorList{log_softmax(plus_one(t), 0)}; },
               {rnd({33}, 8)},
               plus_one,
               true});
  c.push_back({"float64",
               [=](const TensorList& t) { return TensorList{softmax(plus_one(t), -1)}; },
               {rnd({6, 11}, 9).to(DType::Float64)},
               plus_one});
  c.push_back({"rows over threads",
               [=](const TensorList& t) { return TensorList{softmax(scaled(t), -1)}; },
               {rnd({512, 1000}, 10, 2.0), rnd({1000}, 11)},
               scaled});
  // A causal mask of bytes (a bool leaf in the kernel, read as i8 and truncated), row 0 masked
  // but for its first element; 70 keys: a remainder at every width.
  Tensor causal = kiln::empty({70, 70}, DType::Bool);
  for (int64_t i = 0; i < 70; ++i)
    for (int64_t j = 0; j < 70; ++j) causal.data_ptr<bool>()[i * 70 + j] = j > i;
  auto masked_scores = [](const TensorList& t) { return masked_fill(t[0] * 0.5, t[1], -INFINITY); };
  c.push_back({"a causal mask of bools",
               [=](const TensorList& t) { return TensorList{softmax(masked_scores(t), -1)}; },
               {rnd({2, 70, 70}, 14, 3.0), causal},
               masked_scores});
  c.push_back({"over another dim (the runtime's kernel)",
               [=](const TensorList& t) { return TensorList{softmax(scaled(t), 0)}; },
               {rnd({6, 5}, 12), rnd({5}, 13)},
               nullptr});
  return c;
}

}  // namespace

TEST(RowKernels, SoftmaxOverTheLastDimMatchesEagerAndFloat64) {
  for (int bits : kVectorWidths)
    for (const Case& c : cases()) {
      SCOPED_TRACE("vector_bits " + std::to_string(bits));
      jit::CompiledFunction f = jit::compile(jit::trace(c.fn, c.inputs), at_vector_width(bits));
      // The example, then other values of the same shapes.
      for (int round = 0; round < 2; ++round) {
        TensorList in = c.inputs;
        if (round == 1)
          for (size_t k = 0; k < in.size(); ++k)
            if (in[k].dtype() != DType::Bool) in[k] = in[k] * 0.5 - 0.25;
        const Tensor got = f(in)[0];
        const double tol = in[0].dtype() == DType::Float64 ? 1e-12 : 2e-6;
        expect_matches(got, c.fn(in)[0], tol, c.name + " vs eager");
        if (c.softmax_input) {
          expect_matches(got, reference(c.softmax_input(in), c.log), tol, c.name + " vs float64");
        }
      }
    }
}

namespace {
// Layer norm over the last dim in float64: (x - mean) / sqrt(var + eps) * w + b.
Tensor layer_norm_reference(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor d = x.to(DType::Float64).contiguous();
  const int64_t cols = d.size(-1), rows = d.numel() / cols;
  Tensor out = empty_like(d);
  const double* in = d.data_ptr<double>();
  double* o = out.data_ptr<double>();
  const Tensor wd = w.defined() ? w.to(DType::Float64).contiguous() : Tensor();
  const Tensor bd = b.defined() ? b.to(DType::Float64).contiguous() : Tensor();
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < cols; ++j) mean += in[r * cols + j] / cols;
    for (int64_t j = 0; j < cols; ++j) var += std::pow(in[r * cols + j] - mean, 2) / cols;
    for (int64_t j = 0; j < cols; ++j) {
      double y = (in[r * cols + j] - mean) / std::sqrt(var + eps);
      if (wd.defined()) y *= wd.data_ptr<double>()[j];
      if (bd.defined()) y += bd.data_ptr<double>()[j];
      o[r * cols + j] = y;
    }
  }
  return out;
}
}  // namespace

TEST(RowKernels, LayerNormOverTheLastDimMatchesEagerAndFloat64) {
  struct LnCase {
    std::string name;
    Dims shape;
    bool weight, bias;
    DType dtype;
    Dims normalized;  // the last dim: generated; more: the runtime's kernel
  };
  const std::vector<LnCase> cases = {
      {"weight and bias", {3, 5, 33}, true, true, DType::Float32, {33}},
      {"no affine", {4, 7}, false, false, DType::Float32, {7}},
      {"weight only, float64", {6, 10}, true, false, DType::Float64, {10}},
      {"bias only", {5, 9}, false, true, DType::Float32, {9}},
      {"rows over threads", {256, 768}, true, true, DType::Float32, {768}},
      {"over two dims (the runtime's kernel)", {3, 4, 6}, true, true, DType::Float32, {4, 6}},
  };
  const double eps = 1e-5;
  for (int bits : kVectorWidths)
    for (const LnCase& c : cases) {
      SCOPED_TRACE("vector_bits " + std::to_string(bits));
      const Dims pshape = c.normalized;
      Tensor w = c.weight ? rnd(pshape, 21).to(c.dtype) : Tensor();
      Tensor b = c.bias ? rnd(pshape, 22).to(c.dtype) : Tensor();
      auto tree = [](const Tensor& x) { return x * 3.0 + 0.5; };  // computed inside the kernel
      auto fn = [&](const TensorList& t) {
        return TensorList{layer_norm(tree(t[0]), pshape, w, b, eps)};
      };
      const Tensor example = rnd(c.shape, 23, 2.0).to(c.dtype);
      jit::CompiledFunction f = jit::compile(jit::trace(fn, {example}), at_vector_width(bits));
      for (const Tensor& x : {example, rnd(c.shape, 24, 5.0).to(c.dtype)}) {
        const Tensor got = f({x})[0];
        const double tol = c.dtype == DType::Float64 ? 1e-12 : 2e-5;
        expect_matches(got, fn({x})[0], tol, c.name + " vs eager");
        if (pshape.size() == 1)
          expect_matches(got, layer_norm_reference(tree(x), w, b, eps), tol,
                         c.name + " vs float64");
      }
    }
}

namespace {
// logsumexp over the last dim in float64 with PyTorch's shift: the maximum, or 0 where it is
// infinite (a row of -inf gives -inf, a row with +inf gives +inf); NaN propagates.
Tensor logsumexp_reference(const Tensor& x) {
  Tensor d = x.to(DType::Float64).contiguous();
  const int64_t cols = d.size(-1), rows = d.numel() / cols;
  Tensor out = zeros({rows}).to(DType::Float64);
  const double* in = d.data_ptr<double>();
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int64_t j = 0; j < cols; ++j)
      m = std::isnan(in[r * cols + j]) || std::isnan(m) ? NAN : std::max(m, in[r * cols + j]);
    const double shift = std::isinf(m) ? 0.0 : m;
    double s = 0;
    for (int64_t j = 0; j < cols; ++j) s += std::exp(in[r * cols + j] - shift);
    out.data_ptr<double>()[r] = shift + std::log(s);
  }
  return out;
}
}  // namespace

TEST(RowKernels, LogsumexpOverTheLastDimMatchesEagerAndFloat64) {
  struct LseCase {
    std::string name;
    Tensor x;
    int64_t dim;  // the last (generated) or another (the runtime's kernel)
    bool keepdim;
    bool transposed = false;  // reads its argument's dims 1 and 2 swapped (strided rows)
  };
  Tensor special = rnd({6, 5}, 31);
  float* sp = special.data_ptr<float>();
  for (int j = 0; j < 5; ++j) sp[j] = -INFINITY;  // a row of -inf
  sp[5 + 2] = -INFINITY;                          // one -inf
  sp[10 + 1] = INFINITY;                          // one +inf
  sp[15 + 3] = NAN;                               // a NaN
  sp[20 + 4] = 1e4f;                              // exp would overflow unshifted
  sp[25] = sp[26] = INFINITY;                     // two +inf
  const std::vector<LseCase> cases = {
      {"a tree over [3, 5, 17]", rnd({3, 5, 17}, 32, 3.0), -1, false},
      {"keepdim, dim given as rank - 1", rnd({4, 9}, 33, 3.0), 1, true},
      {"-inf, +inf, NaN and large values", special, -1, false},
      {"one dimension (a scalar result)", rnd({33}, 34), 0, false},
      {"float64", rnd({6, 11}, 35).to(DType::Float64), -1, true},
      {"rows over threads", rnd({512, 1000}, 36, 2.0), -1, false},
      {"strided rows (a transposed argument)", rnd({3, 7, 9}, 38, 3.0), -1, true, true},
      {"over another dim (the runtime's kernel)", rnd({6, 5}, 37), 0, false},
  };
  for (int bits : kVectorWidths)
    for (const LseCase& c : cases) {
      SCOPED_TRACE("vector_bits " + std::to_string(bits));
      auto tree = [&](const Tensor& x) {  // computed inside the kernel
        return (c.transposed ? x.transpose(1, 2) : x) * 0.5 + 0.25;
      };
      const int64_t dims[] = {c.dim};
      auto fn = [&](const TensorList& t) {
        return TensorList{logsumexp(tree(t[0]), dims, c.keepdim)};
      };
      jit::CompiledFunction f = jit::compile(jit::trace(fn, {c.x}), at_vector_width(bits));
      for (const Tensor& x : {c.x, c.x * 1.5 - 0.5}) {
        const Tensor got = f({x})[0];
        const double tol = x.dtype() == DType::Float64 ? 1e-12 : 2e-6;
        expect_matches(got, fn({x})[0], tol, c.name + " vs eager");
        if (c.dim == -1 || c.dim == x.dim() - 1)
          expect_matches(got.reshape({-1}), logsumexp_reference(tree(x)), tol,
                         c.name + " vs float64");
      }
    }
}

namespace {
// sum, mean, amax, amin or var (unbiased; "var_biased") over the last dim in float64, NaN
// propagating through all of them.
Tensor reduction_reference(const Tensor& x, const std::string& op) {
  Tensor d = x.to(DType::Float64).contiguous();
  const int64_t cols = d.size(-1), rows = d.numel() / cols;
  Tensor out = zeros({rows}).to(DType::Float64);
  const double* in = d.data_ptr<double>();
  for (int64_t r = 0; r < rows; ++r) {
    if (op == "var" || op == "var_biased") {
      double mean = 0, sq = 0;
      for (int64_t j = 0; j < cols; ++j) mean += in[r * cols + j] / cols;
      for (int64_t j = 0; j < cols; ++j)
        sq += (in[r * cols + j] - mean) * (in[r * cols + j] - mean);
      out.data_ptr<double>()[r] = sq / std::max<double>(0, cols - (op == "var" ? 1 : 0));
      continue;
    }
    double acc = op == "amax" ? -INFINITY : op == "amin" ? INFINITY : 0.0;
    for (int64_t j = 0; j < cols; ++j) {
      const double v = in[r * cols + j];
      if (std::isnan(v) || std::isnan(acc))
        acc = NAN;
      else if (op == "amax")
        acc = std::max(acc, v);
      else if (op == "amin")
        acc = std::min(acc, v);
      else
        acc += v;
    }
    out.data_ptr<double>()[r] = op == "mean" ? acc / cols : acc;
  }
  return out;
}
}  // namespace

TEST(RowKernels, SumMeanAmaxAminVarOverTheLastDimMatchEagerAndFloat64) {
  // Each reduction of a tree (x * x - 0.25: mean(x * x) is RMSNorm's) over the last dim, one
  // value per row computed in the kernel without storing the tree; rows of 1000 (whole tiles and
  // a remainder), 37, a 1-D input reduced whole, keepdim, NaN and infinite values, float64, rows
  // over threads; one row too long for one thread, the runtime's kernel.
  Tensor special = rnd({5, 40}, 41);
  float* sp = special.data_ptr<float>();
  sp[3] = NAN;             // row 0: NaN
  sp[40 + 7] = INFINITY;   // row 1: +inf
  sp[80 + 9] = -INFINITY;  // row 2: -inf (x * x: +inf)
  sp[120 + 1] = 1e20f;     // row 3: a value whose square overflows float32
  struct RedCase {
    std::string name;
    Tensor x;
    int64_t dim;  // INT64_MIN: none given (all dims)
    bool keepdim;
  };
  const std::vector<RedCase> cases = {
      {"rows of 1000 over threads", rnd({256, 1000}, 42, 2.0), -1, false},
      {"rows of 37, keepdim", rnd({3, 7, 37}, 43), 2, true},
      {"NaN and infinite values", special, -1, false},
      {"one dimension reduced whole", rnd({301}, 44), INT64_MIN, false},
      {"float64", rnd({6, 50}, 45).to(DType::Float64), -1, true},
      {"rows of one (an unbiased variance: 0 / 0)", rnd({5, 1}, 48), -1, false},
      {"over another dim (a column kernel; var: the runtime's)", rnd({6, 5}, 46), 0, false},
      {"one row of 140000 (the runtime's, split over threads)", rnd({140000}, 47), -1, false},
  };
  for (const char* op : {"sum", "mean", "amax", "amin", "var", "var_biased"}) {
    for (int bits : kVectorWidths) {
      for (const RedCase& c : cases) {
        SCOPED_TRACE(std::string(op) + " " + c.name + ", vector_bits " + std::to_string(bits));
        const std::string name = op;
        auto fn = [&](const TensorList& t) {
          Tensor tree = t[0] * t[0] - 0.25;  // computed inside the kernel
          std::vector<int64_t> dims;
          if (c.dim != INT64_MIN) dims.push_back(c.dim);
          Tensor r = name == "sum"    ? sum(tree, dims, c.keepdim)
                     : name == "mean" ? mean(tree, dims, c.keepdim)
                     : name == "amax" ? amax(tree, dims, c.keepdim)
                     : name == "amin" ? amin(tree, dims, c.keepdim)
                     : name == "var"  ? var(tree, dims, true, c.keepdim)
                                      : var(tree, dims, false, c.keepdim);
          return TensorList{r};
        };
        jit::CompiledFunction f = jit::compile(jit::trace(fn, {c.x}), at_vector_width(bits));
        for (const Tensor& x : {c.x, c.x * 0.5 + 0.125}) {
          const Tensor got = f({x})[0];
          const double tol = x.dtype() == DType::Float64 ? 1e-12 : 2e-6;
          expect_matches(got, fn({x})[0], tol, c.name + " vs eager");
          if (c.dim == -1 || c.dim == x.dim() - 1 || (c.dim == INT64_MIN && x.dim() == 1)) {
            // The tree in the input's dtype (where x * x overflows float32, so does the kernel),
            // reduced in float64.
            const Tensor tree = (x * x - 0.25).to(DType::Float64);
            Tensor want = reduction_reference(tree, name);
            if (x.dtype() == DType::Float32) want = want.to(DType::Float32);  // its rounding
            expect_matches(got.reshape({-1}), want, tol, c.name + " vs float64");
          }
        }
      }
    }
  }
}

namespace {
// sum / mean / amax / amin of t over the consecutive dims [first, last] in float64: the input
// as [A, R, I], each column of I reduced over R.
Tensor column_reference(const Tensor& t, int64_t first, int64_t last, const std::string& op) {
  const Tensor d = t.to(DType::Float64).contiguous();
  int64_t A = 1, R = 1, I = 1;
  for (int64_t k = 0; k < d.dim(); ++k) (k < first ? A : k <= last ? R : I) *= d.size(k);
  Tensor out = kiln::empty({A * I}, DType::Float64);
  const double* in = d.data_ptr<double>();
  double* o = out.data_ptr<double>();
  for (int64_t a = 0; a < A; ++a)
    for (int64_t i = 0; i < I; ++i) {
      double acc = op == "amax" ? -INFINITY : op == "amin" ? INFINITY : 0.0;
      for (int64_t r = 0; r < R; ++r) {
        const double v = in[(a * R + r) * I + i];
        acc = op == "amax"   ? (std::isnan(v) || std::isnan(acc) ? NAN : std::max(acc, v))
              : op == "amin" ? (std::isnan(v) || std::isnan(acc) ? NAN : std::min(acc, v))
                             : acc + v;
      }
      o[a * I + i] = op == "mean" ? acc / double(R) : acc;
    }
  return out;
}
}  // namespace

TEST(RowKernels, ColumnReductionsMatchEagerAndFloat64) {
  // sum / mean / amax / amin of a tree (x * x + b, the broadcast b along the kept last dim) over
  // consecutive leading dims that keep the last: generated column kernels, the tree computed in
  // the pass. A bias gradient's [N, F] over N, a sequence mean of [B, T, D] over T with keepdim,
  // two dims at once, columns in several chunks with a ragged last one (900 = 3 x 256 + 132),
  // units over threads, NaN and infinities, a transposed (strided) input, float64; and an input
  // whose reduced dims do not merge (a permute inside the block), which the runtime reduces.
  Tensor special = rnd({40, 6}, 51);
  special.data_ptr<float>()[7] = NAN;
  special.data_ptr<float>()[13] = INFINITY;
  struct ColCase {
    std::string name;
    Tensor x;  // the input's values (their layout: `view` below)
    std::vector<int64_t> dims;
    bool keepdim;
    int view;  // 0: as is, 1: transposed (last two dims), 2: the first two dims permuted
  };
  const std::vector<ColCase> cases = {
      {"[512, 37] over 0", rnd({512, 37}, 52), {0}, false, 0},
      {"[4, 50, 37] over 1, keepdim", rnd({4, 50, 37}, 53), {1}, true, 0},
      {"[3, 5, 40] over 0 and 1", rnd({3, 5, 40}, 54), {0, -2}, false, 0},
      {"[2, 7, 900] over 1: chunks", rnd({2, 7, 900}, 55, 2.0), {1}, false, 0},
      {"NaN and infinity", special, {0}, true, 0},
      {"transposed [37, 64] read as [64, 37]", rnd({37, 64}, 56), {0}, false, 1},
      {"float64", rnd({30, 11}, 57).to(DType::Float64), {0}, false, 0},
      {"reduced dims that do not merge (the runtime's)", rnd({5, 6, 7}, 58), {0, 1}, false, 2},
  };
  for (const char* op : {"sum", "mean", "amax", "amin"}) {
    for (int bits : {-1, 512}) {
      for (const ColCase& c : cases) {
        SCOPED_TRACE(std::string(op) + " " + c.name + ", vector_bits " + std::to_string(bits));
        const std::string name = op;
        auto fn = [&](const TensorList& t) {
          Tensor x = c.view == 1   ? t[0].transpose(0, 1)
                     : c.view == 2 ? t[0].permute({1, 0, 2})
                                   : t[0];
          Tensor tree = x * x + t[1];  // computed inside the kernel
          Tensor r = name == "sum"    ? sum(tree, c.dims, c.keepdim)
                     : name == "mean" ? mean(tree, c.dims, c.keepdim)
                     : name == "amax" ? amax(tree, c.dims, c.keepdim)
                                      : amin(tree, c.dims, c.keepdim);
          return TensorList{r};
        };
        const int64_t last = c.view == 1 ? c.x.size(0) : c.x.size(-1);
        const Tensor b = rnd({last}, 59).to(c.x.dtype());
        jit::CompileOptions o = at_vector_width(bits);
        o.parallel_min_elements = 64;  // units over the threads even for these sizes
        jit::CompiledFunction f = jit::compile(jit::trace(fn, {c.x, b}), o);
        const Tensor got = f({c.x, b})[0];
        const double tol = c.x.dtype() == DType::Float64 ? 1e-12 : 2e-6;
        expect_matches(got, fn({c.x, b})[0], tol, c.name + " vs eager");
        // The tree in the input's dtype, reduced in float64.
        const Tensor x = c.view == 1   ? c.x.transpose(0, 1)
                         : c.view == 2 ? c.x.permute({1, 0, 2})
                                       : c.x;
        std::vector<int64_t> d;
        for (int64_t v : c.dims) d.push_back(v < 0 ? v + x.dim() : v);
        std::sort(d.begin(), d.end());
        Tensor want = column_reference((x * x + b).to(DType::Float64), d.front(), d.back(), name);
        if (c.x.dtype() == DType::Float32) want = want.to(DType::Float32);  // its rounding
        expect_matches(got.reshape({-1}), want, tol, c.name + " vs float64");
      }
    }
  }
}

// The generated epilogue of GEMM-based kernels (kernels::BlockEpilogue): every output element
// passes through it exactly once, after the fixed epilogue, at the offset its block reports,
// whichever GEMM driver or convolution algorithm runs.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/kernels/linalg.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/runtime/views.h"
#include "nn_test_util.h"

using namespace kiln;
using namespace kiln::kernels;
using namespace nn_test;

namespace {

// The stand-in for generated code: c = tanh(c) * 0.5 + aux[i] at output element i, counting
// visits (blocks are disjoint, so threads never count the same element).
struct Aux {
  const float* aux;
  int* visits;
};

void test_epilogue(const void* ctx, float* c, int64_t offset, int64_t ldc, int64_t rows,
                   int64_t cols) {
  const Aux& a = *static_cast<const Aux*>(ctx);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = offset + r * ldc + j;
      float& v = c[r * ldc + j];
      v = std::tanh(v) * 0.5f + a.aux[i];
      ++a.visits[i];
    }
}

// What test_epilogue makes of `plain` (the same kernel's output without it).
void expect_epilogue_applied(const std::vector<float>& plain, const float* got,
                             const std::vector<float>& aux, const std::vector<int>& visits) {
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_EQ(visits[i], 1) << "element " << i;
    ASSERT_EQ(got[i], std::tanh(plain[i]) * 0.5f + aux[i]) << "element " << i;
  }
}

std::string shape_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::vector<float> rand_floats(int64_t n) {
  std::vector<double> v = rand_vec(n);
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace

// Every sgemm driver (a vector product, few rows, the blocked product with packed or unpacked
// operands, K = 0), with and without the fixed epilogue, on one and two threads.
TEST(BlockEpilogue, SgemmAppliesItOnceToEveryElement) {
  const int saved = num_threads();
  struct Shape {
    int64_t M, N, K;
  };
  const Shape shapes[] = {{1, 67, 33}, {3, 50, 17}, {37, 53, 19}, {130, 300, 150},
                          {64, 1, 40}, {20, 24, 0}, {9, 700, 64}};
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Shape& s : shapes) {
      for (int variant = 0; variant < 4; ++variant) {  // plain, packed A, packed B, + bias/gelu
        SCOPED_TRACE(testing::Message() << "M" << s.M << " N" << s.N << " K" << s.K << " variant "
                                        << variant << " threads " << nt);
        const std::vector<float> A = rand_floats(s.M * s.K), B = rand_floats(s.K * s.N);
        const std::vector<float> bias = rand_floats(s.N), aux = rand_floats(s.M * s.N);
        Epilogue e;
        if (variant == 3) {
          e.bias_kind = Epilogue::Bias::PerCol;
          e.bias = bias.data();
          e.activation = Activation::Gelu;
        }
        auto run = [&](float* C, const Epilogue& ep) {
          if (variant == 1 && s.K > 0) {
            sgemm_packed_a(*sgemm_pack_a(false, s.M, s.K, A.data(), s.K), false, s.N, 1.0f,
                           B.data(), s.N, 0.0f, C, s.N, ep);
          } else if (variant == 2 && s.K > 0) {
            sgemm_packed_b(false, s.M, 1.0f, A.data(), s.K,
                           *sgemm_pack_b(false, s.K, s.N, B.data(), s.N), 0.0f, C, s.N, ep);
          } else {
            sgemm(false, false, s.M, s.N, s.K, 1.0f, A.data(), std::max<int64_t>(s.K, 1), B.data(),
                  s.N, 0.0f, C, s.N, ep);
          }
        };
        std::vector<float> plain(s.M * s.N), got(s.M * s.N);
        run(plain.data(), e);
        std::vector<int> visits(s.M * s.N, 0);
        Aux ctx{aux.data(), visits.data()};
        e.block.fn = test_epilogue;
        e.block.ctx = &ctx;
        e.block.origin = got.data();
        run(got.data(), e);
        expect_epilogue_applied(plain, got.data(), aux, visits);
      }
    }
  }
  set_num_threads(saved);
}

// conv2d_out with the generated epilogue, prepared and not, on one and two threads: the shapes
// send it down every algorithm the heuristics choose among (Winograd, direct, depthwise, 1x1,
// im2col with positions or channels across the lanes), which the test does not name.
TEST(BlockEpilogue, Conv2dAppliesItOnceToEveryElement) {
  const int saved = num_threads();
  struct Case {
    int64_t N, C, H, W, O, K, stride, pad, groups;
  };
  const Case cases[] = {
      {2, 16, 20, 20, 24, 3, 1, 1, 1},   // 3x3 stride 1 on a large map
      {2, 20, 13, 11, 14, 3, 1, 1, 1},   // 3x3 stride 1, a height not a multiple of 4
      {2, 256, 30, 30, 12, 3, 1, 1, 1},  // 3x3 stride 1, several blocks of rows
      {1, 3, 40, 41, 32, 3, 2, 1, 1},    // few input channels (a stem)
      {2, 12, 14, 14, 12, 3, 1, 1, 12},  // depthwise, a narrow map
      {1, 8, 30, 50, 8, 5, 1, 2, 8},     // depthwise 5x5, a wide map
      {2, 40, 9, 9, 70, 1, 1, 0, 1},     // 1x1
      {2, 24, 7, 7, 96, 3, 1, 1, 1},     // a small map, many channels
      {1, 8, 11, 13, 10, 5, 2, 2, 2},    // grouped, strided
  };
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Case& c : cases) {
      for (bool prepare : {false, true}) {
        for (bool fused : {false, true}) {
          SCOPED_TRACE(testing::Message()
                       << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W << " O" << c.O
                       << " k" << c.K << " g" << c.groups << " prepared " << prepare
                       << " relu+residual " << fused << " threads " << nt);
          Conv2dParams p;
          p.stride_h = p.stride_w = c.stride;
          p.pad_h = p.pad_w = c.pad;
          p.groups = c.groups;
          const Dims xs{c.N, c.C, c.H, c.W};
          auto x = rand_tensor(xs), w = rand_tensor(Dims{c.O, c.C / c.groups, c.K, c.K});
          auto b = rand_tensor(Dims{c.O});
          const Dims ys = conv2d_output_shape(xs, w->sizes(), p);
          auto res = rand_tensor(ys);
          auto prepared = prepare ? prepare_conv2d_weight(*w, p, xs) : nullptr;
          ConvEpilogue ep;
          if (fused) {
            ep.residual = res.get();
            ep.activation = Activation::Relu;
          }
          auto plain = empty(ys, DType::Float32), got = empty(ys, DType::Float32);
          conv2d_out(*x, *w, b.get(), p, *plain, ep, prepared.get());
          const std::vector<float> aux = rand_floats(got->numel());
          std::vector<int> visits(got->numel(), 0);
          Aux ctx{aux.data(), visits.data()};
          ep.block.fn = test_epilogue;
          ep.block.ctx = &ctx;
          conv2d_out(*x, *w, b.get(), p, *got, ep, prepared.get());
          const float* pp = plain->data_ptr<float>();
          expect_epilogue_applied(std::vector<float>(pp, pp + plain->numel()),
                                  got->data_ptr<float>(), aux, visits);
        }
      }
    }
  }
  set_num_threads(saved);
}

// linear_fused_out: the GEMM path, and the unfused steps a zero-width input takes.
TEST(BlockEpilogue, LinearAppliesItOnceToEveryElement) {
  for (int64_t K : {0, 24}) {
    SCOPED_TRACE(testing::Message() << "K " << K);
    auto x = rand_tensor(Dims{3, 5, K}), w = rand_tensor(Dims{33, K}), b = rand_tensor(Dims{33});
    auto plain = empty(Dims{3, 5, 33}, DType::Float32), got = empty(Dims{3, 5, 33}, DType::Float32);
    Epilogue e;
    e.activation = Activation::Silu;
    linear_fused_out(*x, *w, b.get(), nullptr, e, *plain, nullptr);
    const std::vector<float> aux = rand_floats(got->numel());
    std::vector<int> visits(got->numel(), 0);
    Aux ctx{aux.data(), visits.data()};
    e.block.fn = test_epilogue;
    e.block.ctx = &ctx;
    linear_fused_out(*x, *w, b.get(), nullptr, e, *got, nullptr);
    const float* pp = plain->data_ptr<float>();
    expect_epilogue_applied(std::vector<float>(pp, pp + plain->numel()), got->data_ptr<float>(),
                            aux, visits);
  }
}

// matmul_epilogue_out on each of torch.matmul's shape rules: one GEMM (b as it lies or a
// transposed view), a batch folded into the rows, broadcast batches (one product per thread, and
// products that use every thread), a vector times a matrix, a right operand packed once, and the
// products no GEMM runs (matrix x vector, a dot), where it runs over the whole result after it.
TEST(BlockEpilogue, MatmulAppliesItOnceToEveryElement) {
  const int saved = num_threads();
  struct Case {
    Dims a, b;
    bool b_transposed = false;  // b a transposed view (the GEMM reads it as such: small-M dots)
  };
  const Case cases[] = {
      {{37, 20}, {20, 45}},
      {{3, 20}, {20, 45}, true},
      {{37, 20}, {20, 45}, true},
      {{3, 17, 20}, {20, 45}},
      {{4, 17, 20}, {4, 20, 45}},
      {{2, 1, 9, 20}, {3, 20, 7}},
      {{2, 130, 128}, {128, 140}},
      {{2, 128, 130}, {2, 130, 140}},
      {{20}, {20, 45}},
      {{37, 20}, {20}},
      {{20}, {20}},
      {{5, 0}, {0, 6}},
      {{2, 3, 17, 20}, {1, 20, 1}},
  };
  for (int nt : {1, 2}) {
    set_num_threads(nt);
    for (const Case& c : cases) {
      for (bool pack : {false, true}) {
        SCOPED_TRACE(testing::Message() << "a " << shape_str(c.a) << " b " << shape_str(c.b)
                                        << (c.b_transposed ? " transposed" : "")
                                        << (pack ? " packed" : "") << " threads " << nt);
        auto a = rand_tensor(c.a);
        auto b = c.b_transposed ? views::transpose(*rand_tensor(Dims{c.b[1], c.b[0]}), 0, 1)
                                : rand_tensor(c.b);
        const Dims shape = matmul_shape(*a, *b);
        auto plain = empty(shape, DType::Float32), got = empty(shape, DType::Float32);
        auto packed = pack ? prepare_matmul_operand(*b) : nullptr;
        // (The packed product's own rounding where it applies.)
        if (!packed || !matmul_packed_out(*a, *b, *packed, *plain)) matmul_out(*a, *b, *plain);
        const std::vector<float> aux = rand_floats(got->numel());
        std::vector<int> visits(got->numel(), 0);
        Aux ctx{aux.data(), visits.data()};
        BlockEpilogue block;
        block.fn = test_epilogue;
        block.ctx = &ctx;
        matmul_epilogue_out(*a, *b, *got, block, packed.get());
        const float* pp = plain->data_ptr<float>();
        expect_epilogue_applied(std::vector<float>(pp, pp + plain->numel()), got->data_ptr<float>(),
                                aux, visits);
      }
    }
  }
  set_num_threads(saved);
  // A strided output has no flat offsets to report.
  auto a = rand_tensor(Dims{4, 3}), b = rand_tensor(Dims{3, 5});
  auto t = empty(Dims{5, 4}, DType::Float32);
  BlockEpilogue block;
  block.fn = test_epilogue;
  EXPECT_NE(error_of([&] {
              matmul_epilogue_out(*a, *b, *views::transpose(*t, 0, 1), block);
            }).find("matmul: expected a dense float32 out on the CPU for a generated epilogue"),
            std::string::npos);
}

namespace {

// The stand-in for a generated prologue: x[i] = src[i] * 2 - 1 at input element i, counting
// visits, and checking that no element is filled twice.
struct Source {
  const float* src;
  int* visits;
};
void fill_nothing(const void*, float*, int64_t, int64_t, int64_t, int64_t) {}
BlockEpilogue prologue_of_nothing() {
  BlockEpilogue b;
  b.fn = fill_nothing;
  return b;
}

void test_prologue(const void* ctx, float* c, int64_t offset, int64_t ldc, int64_t rows,
                   int64_t cols) {
  const Source& s = *static_cast<const Source*>(ctx);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = offset + r * ldc + j;
      c[r * ldc + j] = s.src[i] * 2.0f - 1.0f;
      ++s.visits[i];
    }
}

// The input test_prologue writes from `src` (src * 2 - 1), for the reference product.
TensorImplPtr prologue_input(const TensorImpl& src) {
  auto x = empty(src.sizes(), DType::Float32);
  for (int64_t i = 0; i < x->numel(); ++i)
    x->data_ptr<float>()[i] = src.data_ptr<float>()[i] * 2.0f - 1.0f;
  return x;
}

// Every input element written once; the result the reference's to rounding (blocks of rows may
// take another GEMM driver than the whole: another summation order); each output element through
// the generated epilogue once where one ran.
void expect_prologue_ran(const std::vector<int>& visits, const TensorImpl& got,
                         const TensorImpl& plain, const std::vector<int>* epilogue_visits) {
  for (size_t i = 0; i < visits.size(); ++i) ASSERT_EQ(visits[i], 1) << "input element " << i;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float want = plain.data_ptr<float>()[i];
    ASSERT_NEAR(got.data_ptr<float>()[i], want, 1e-5f * (1.0f + std::fabs(want)))
        << "element " << i;
    if (epilogue_visits) ASSERT_EQ((*epilogue_visits)[i], 1) << "element " << i;
  }
}

// fn(spec, threads) under the host's description (one block of rows) and one with small caches
// (many, the last partial), on one and two threads; both restored after.
void on_each_target(const std::function<void(const char*, int)>& fn) {
  const int saved = num_threads();
  const rt::TargetDescription saved_target = rt::active_target();
  for (const char* spec : {"host", "host,l1d=4K,l2=8K,l3=64K"}) {
    rt::set_active_target(rt::parse_target(spec));
    for (int nt : {1, 2}) {
      set_num_threads(nt);
      fn(spec, nt);
    }
  }
  rt::set_active_target(saved_target);
  set_num_threads(saved);
}

}  // namespace

// linear_prologue_out: each input element computed by the prologue once, before the product
// reads it (the results are the product of that input, to rounding); on one block of rows
// and, under a description with small caches, on many (the last one partial), with a bias, a
// residual, the fixed and the generated epilogue, a packed weight, one and two threads; and K = 0.
TEST(BlockEpilogue, LinearPrologueFillsTheInputOnceBeforeTheProduct) {
  on_each_target([](const char* spec, int nt) {
    struct Shape {
      Dims x;
      int64_t N;
    };
    for (const Shape& sh : {Shape{{3, 50, 40}, 33}, Shape{{301, 64}, 70}, Shape{{1, 24}, 9},
                            Shape{{24}, 9}, Shape{{7, 0}, 5}, Shape{{0, 16}, 5}}) {
      for (int variant = 0; variant < 3; ++variant) {  // plain; residual + relu; packed + block
        SCOPED_TRACE(testing::Message() << spec << " x " << shape_str(sh.x) << " N " << sh.N
                                        << " variant " << variant << " threads " << nt);
        const int64_t K = sh.x.back();
        auto w = rand_tensor(Dims{sh.N, K}), b = rand_tensor(Dims{sh.N});
        auto src = rand_tensor(sh.x);
        Dims out_shape = sh.x;
        out_shape.back() = sh.N;
        // The residual strided (a transpose) where the shape allows.
        TensorImplPtr res;
        if (variant == 1 && out_shape.size() >= 2) {
          Dims swapped = out_shape;
          std::swap(swapped[swapped.size() - 1], swapped[swapped.size() - 2]);
          res = views::transpose(*rand_tensor(swapped), -1, -2);
        } else if (variant == 1) {
          res = rand_tensor(out_shape);
        }
        Epilogue e;
        if (variant == 1) e.activation = Activation::Relu;
        auto packed = variant == 2 ? prepare_linear_weight(*w) : nullptr;
        // The reference: the filled input computed first, then the same product.
        auto x_ref = prologue_input(*src);
        // `got` a dense view 5 elements into its storage.
        auto plain = empty(out_shape, DType::Float32);
        int64_t out_numel = 1;
        for (int64_t d : out_shape) out_numel *= d;
        Dims out_strides(out_shape.size(), 1);
        for (size_t d = out_shape.size() - 1; d > 0; --d)
          out_strides[d - 1] = out_strides[d] * out_shape[d];
        auto got =
            make_view(*empty(Dims{out_numel + 5}, DType::Float32), out_shape, out_strides, 5);
        const std::vector<float> aux = rand_floats(plain->numel());
        std::vector<int> epilogue_visits(plain->numel(), 0);
        Aux actx{aux.data(), epilogue_visits.data()};
        if (variant == 2) {
          e.block.fn = test_epilogue;
          e.block.ctx = &actx;
        }
        std::vector<int> ref_visits(plain->numel(), 0);
        Aux ref_ctx{aux.data(), ref_visits.data()};
        Epilogue e_ref = e;
        if (variant == 2) e_ref.block.ctx = &ref_ctx;
        linear_fused_out(*x_ref, *w, b.get(), res.get(), e_ref, *plain, packed.get());
        std::vector<int> visits(x_ref->numel(), 0);
        Source sctx{src->data_ptr<float>(), visits.data()};
        BlockEpilogue prologue;
        prologue.fn = test_prologue;
        prologue.ctx = &sctx;
        linear_prologue_out(sh.x, prologue, *w, b.get(), res.get(), e, *got, packed.get());
        expect_prologue_ran(visits, *got, *plain, variant == 2 ? &epilogue_visits : nullptr);
      }
    }
  });
  // Shapes from generated code are checked like linear's; a residual must be shaped like out.
  EXPECT_NE(error_of([&] {
              auto b = rand_tensor(Dims{4});
              linear_prologue_out(Dims{5, 6}, prologue_of_nothing(), *rand_tensor(Dims{4, 6}),
                                  nullptr, b.get(), {}, *empty(Dims{5, 4}, DType::Float32));
            }).find("linear: expected a residual shaped like out"),
            std::string::npos);
  auto w = rand_tensor(Dims{4, 6});
  auto out = empty(Dims{5, 4}, DType::Float32), t = empty(Dims{4, 5}, DType::Float32);
  BlockEpilogue prologue;
  prologue.fn = test_prologue;
  EXPECT_NE(error_of([&] {
              linear_prologue_out(Dims{5, 7}, prologue, *w, nullptr, nullptr, {}, *out);
            }).find("linear: expected input [..., 6] for weight"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              linear_prologue_out(Dims{5, 6}, prologue, *w, nullptr, nullptr, {},
                                  *views::transpose(*t, 0, 1));
            }).find("linear: expected a dense float32 out on the CPU for a generated prologue"),
            std::string::npos);
}

// matmul_prologue_out: the same for a matmul by a [K, N] matrix (rank-1 and 3-D inputs, the
// right operand packed or not, with and without the generated epilogue), one block and many.
TEST(BlockEpilogue, MatmulPrologueFillsTheInputOnceBeforeTheProduct) {
  on_each_target([](const char* spec, int nt) {
    struct Shape {
      Dims x;
      int64_t N;
    };
    for (const Shape& sh :
         {Shape{{3, 50, 40}, 33}, Shape{{301, 64}, 70}, Shape{{24}, 9}, Shape{{7, 0}, 5}}) {
      for (int variant = 0; variant < 2; ++variant) {  // plain; packed + epilogue
        SCOPED_TRACE(testing::Message() << spec << " x " << shape_str(sh.x) << " N " << sh.N
                                        << " variant " << variant << " threads " << nt);
        const int64_t K = sh.x.back();
        auto b = rand_tensor(Dims{K, sh.N}), src = rand_tensor(sh.x);
        auto x_ref = prologue_input(*src);
        const Dims shape = matmul_shape(*x_ref, *b);
        auto plain = empty(shape, DType::Float32), got = empty(shape, DType::Float32);
        auto packed = variant == 1 ? prepare_matmul_operand(*b) : nullptr;
        const std::vector<float> aux = rand_floats(plain->numel());
        std::vector<int> ref_visits(plain->numel(), 0), visits_out(plain->numel(), 0);
        Aux ref_ctx{aux.data(), ref_visits.data()}, out_ctx{aux.data(), visits_out.data()};
        BlockEpilogue ref_block, block;
        if (variant == 1) {
          ref_block.fn = block.fn = test_epilogue;
          ref_block.ctx = &ref_ctx;
          block.ctx = &out_ctx;
        }
        matmul_epilogue_out(*x_ref, *b, *plain, ref_block, packed.get());
        std::vector<int> visits(x_ref->numel(), 0);
        Source sctx{src->data_ptr<float>(), visits.data()};
        BlockEpilogue prologue;
        prologue.fn = test_prologue;
        prologue.ctx = &sctx;
        matmul_prologue_out(sh.x, prologue, *b, *got, block, packed.get());
        expect_prologue_ran(visits, *got, *plain, variant == 1 ? &visits_out : nullptr);
      }
    }
  });
  EXPECT_NE(error_of([&] {
              matmul_prologue_out(Dims{5, 6}, prologue_of_nothing(), *rand_tensor(Dims{2, 6, 4}),
                                  *empty(Dims{5, 4}, DType::Float32));
            }).find("matmul: expected a [K, N] right operand with K = 6"),
            std::string::npos);
}

// Kernels that cannot run it say so instead of skipping it.
TEST(BlockEpilogue, RefusedWhereItCannotRun) {
  auto x = rand_tensor(Dims{1, 2, 5, 5}, DType::Float64),
       w = rand_tensor(Dims{3, 2, 3, 3}, DType::Float64);
  auto y = empty(Dims{1, 3, 3, 3}, DType::Float64);
  ConvEpilogue ep;
  ep.block.fn = test_epilogue;
  EXPECT_NE(error_of([&] {
              conv2d_out(*x, *w, nullptr, Conv2dParams{}, *y, ep);
            }).find("expected a float32 convolution for a generated epilogue, got float64"),
            std::string::npos);
}

// Eager tensors on the device: copies, every unary and binary op against float64 references,
// broadcasting and strided views, matmul through cuBLASLt, gradients, streams and events, the
// device allocator, the kernel cache, and the errors (mixed devices, missing kernels, out of
// memory). Every test here skips without a device.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "cuda_test_util.h"
#include "kiln/runtime/cuda/matmul.h"
#include "kiln/runtime/cuda/pointwise.h"
#include "kiln/runtime/kernels/elementwise.h"

namespace kiln {
namespace {

using cuda_test::values;
using cuda_test::worst_error;
using kernels::BinaryOp;
using kernels::UnaryOp;

Tensor random_tensor(std::initializer_list<int64_t> sizes, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(static_cast<float>(lo), static_cast<float>(hi));
  Tensor t = empty(Dims(sizes));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = u(rng);
  return t;
}

std::vector<double> as_double(const Tensor& t) {
  std::vector<float> f = values(t);
  return std::vector<double>(f.begin(), f.end());
}

TEST(CudaEager, RoundTripIsExactAndKeepsShape) {
  KILN_REQUIRE_CUDA_DEVICE();
  for (int64_t n : {0, 1, 3, 1000, 1 << 20}) {
    Tensor x = random_tensor({n}, -5, 5, 1);
    Tensor d = x.cuda();
    EXPECT_TRUE(d.is_cuda());
    EXPECT_EQ(d.sizes(), x.sizes());
    Tensor back = d.cpu();
    EXPECT_FALSE(back.is_cuda());
    EXPECT_EQ(values(back), values(x)) << n;
  }
  // A transposed view copies out in its logical order.
  Tensor m = random_tensor({37, 19}, -1, 1, 2);
  EXPECT_EQ(values(m.cuda().transpose(0, 1).cpu()), values(m.transpose(0, 1).contiguous()));
}

TEST(CudaEager, UnaryOpsMatchFloat64) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor x = random_tensor({4099}, -4, 4, 3);
  Tensor pos = random_tensor({4099}, 0.01, 8, 4);  // log, sqrt, rsqrt domains
  const Tensor dx = x.cuda(), dpos = pos.cuda();
  for (int op = 0; op <= static_cast<int>(UnaryOp::Hardtanh); ++op) {
    const auto u = static_cast<UnaryOp>(op);
    const std::string_view name = kernels::unary_op_name(u);
    const bool positive = name == "log" || name == "sqrt" || name == "rsqrt";
    const Tensor& in = positive ? pos : x;
    const Tensor& din = positive ? dpos : dx;
    Tensor got(kernels::unary(u, *din.impl()));
    ASSERT_TRUE(got.is_cuda());
    // The CPU kernel in float64 is the reference (its formulas are the ones NVRTC compiled).
    Tensor want(kernels::unary(u, *in.to(DType::Float64).impl()));
    const double* w = want.data_ptr<double>();
    std::vector<double> ref(w, w + want.numel());
    // CUDA's float functions are within a few ulp (erf, tanh, exp: <= 2 ulp in CUDA's tables).
    EXPECT_LE(worst_error(values(got), ref, 4e-6, 1e-6), 1.0) << name;
  }
}

TEST(CudaEager, BinaryOpsBroadcastScalarsAndAlpha) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor a = random_tensor({3, 1, 257}, -3, 3, 5);
  Tensor b = random_tensor({5, 257}, 0.5, 3, 6);
  const Tensor da = a.cuda(), db = b.cuda();
  const Tensor a64 = a.to(DType::Float64), b64 = b.to(DType::Float64);
  auto check = [](const Tensor& got, const Tensor& want, const char* what) {
    ASSERT_TRUE(got.is_cuda()) << what;
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    const double* w = want.data_ptr<double>();
    EXPECT_LE(worst_error(values(got), std::vector<double>(w, w + want.numel()), 2e-6, 1e-6), 1.0)
        << what;
  };
  check(da + db, a64 + b64, "add");
  check(add(da, db, 2.5), add(a64, b64, 2.5), "add alpha");
  check(da - db, a64 - b64, "sub");
  check(da * db, a64 * b64, "mul");
  check(da / db, a64 / b64, "div");
  check(pow(db, da), pow(b64, a64), "pow");
  check(maximum(da, db), maximum(a64, b64), "maximum");
  check(minimum(da, db), minimum(a64, b64), "minimum");
  check(da * 3.0, a64 * 3.0, "mul scalar");
  check(da - 0.25, a64 - 0.25, "sub scalar");
  // A strided (transposed) operand.
  Tensor m = random_tensor({64, 48}, -1, 1, 7), n = random_tensor({48, 64}, -1, 1, 8);
  check(m.cuda().transpose(0, 1) * n.cuda(),
        m.to(DType::Float64).transpose(0, 1) * n.to(DType::Float64), "strided");
  // Maximum propagates NaN as on the CPU.
  Tensor nan = full({4}, std::nan(""));
  std::vector<float> r = values(maximum(nan.cuda(), ones({4}).cuda()));
  for (float v : r) EXPECT_TRUE(std::isnan(v));
}

TEST(CudaEager, FusedChainIsOnePassAndMatches) {
  KILN_REQUIRE_CUDA_DEVICE();
  // relu(x * a + b) * c with a, b, c tensors broadcast along rows.
  Tensor x = random_tensor({333, 129}, -2, 2, 9);
  Tensor a = random_tensor({129}, -2, 2, 10), b = random_tensor({129}, -1, 1, 11);
  Tensor c = random_tensor({333, 1}, 0, 3, 12);
  cuda::PointwiseExpr e;
  auto t = e.binary(BinaryOp::Add, e.binary(BinaryOp::Mul, e.input(0), e.input(1)), e.input(2));
  e.binary(BinaryOp::Mul, e.unary(UnaryOp::Relu, t), e.input(3));
  Tensor out(empty(x.sizes(), DType::Float32, Device::CUDA));
  cuda::fill32(reinterpret_cast<uintptr_t>(out.impl()->raw_data()), 0x7fc00000u, out.numel() * 4,
               cuda::current_stream());
  const Tensor dx = x.cuda(), da = a.cuda(), db = b.cuda(), dc = c.cuda();
  const TensorImpl* in[] = {dx.impl(), da.impl(), db.impl(), dc.impl()};
  cuda::pointwise_out("chain", e, in, *out.impl(), cuda::current_stream());
  Tensor want = relu(x.to(DType::Float64) * a.to(DType::Float64) + b.to(DType::Float64)) *
                c.to(DType::Float64);
  const double* w = want.data_ptr<double>();
  EXPECT_LE(worst_error(values(out), std::vector<double>(w, w + want.numel()), 2e-6, 1e-6), 1.0);
}

std::vector<double> matmul_reference(const Tensor& a, const Tensor& b) {
  Tensor c = matmul(a.to(DType::Float64), b.to(DType::Float64)).contiguous();
  const double* p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

TEST(CudaEager, MatmulMatchesFloat64AcrossLayouts) {
  KILN_REQUIRE_CUDA_DEVICE();
  for (auto [m, k, n] : {std::tuple{1, 1, 1}, {7, 13, 5}, {128, 256, 64}, {300, 129, 257}}) {
    Tensor a = random_tensor({m, k}, -1, 1, 20 + m), b = random_tensor({k, n}, -1, 1, 30 + n);
    const std::vector<double> want = matmul_reference(a, b);
    const double tol = 1e-5 * std::sqrt(static_cast<double>(k));
    EXPECT_LE(worst_error(values(matmul(a.cuda(), b.cuda())), want, 0, tol), 1.0) << m << k << n;
    // Transposed views (x @ w.t()) read in place.
    Tensor bt = b.transpose(0, 1).contiguous().cuda().transpose(0, 1);
    Tensor at = a.transpose(0, 1).contiguous().cuda().transpose(0, 1);
    EXPECT_LE(worst_error(values(matmul(at, bt)), want, 0, tol), 1.0) << "transposed";
  }
}

TEST(CudaEager, MatmulBiasReluEpilogueAndTf32) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor a = random_tensor({96, 200}, -1, 1, 40), b = random_tensor({200, 72}, -1, 1, 41);
  Tensor bias = random_tensor({72}, -3, 3, 42);
  Tensor want64 =
      relu(matmul(a.to(DType::Float64), b.to(DType::Float64)) + bias.to(DType::Float64));
  const double* w = want64.data_ptr<double>();
  const std::vector<double> want(w, w + want64.numel());
  Tensor out(kiln::empty(Dims{96, 72}, DType::Float32, Device::CUDA));
  const Tensor da = a.cuda(), db = b.cuda(), dbias = bias.cuda();
  cuda::matmul_out(*da.impl(), *db.impl(), dbias.impl(), true, *out.impl(), {},
                   cuda::current_stream());
  EXPECT_LE(worst_error(values(out), want, 0, 2e-4), 1.0);
  // TF32: 10-bit mantissas, about 1e-3 relative per product, so a looser bound but not float16's.
  cuda::matmul_out(*da.impl(), *db.impl(), dbias.impl(), true, *out.impl(), {.allow_tf32 = true},
                   cuda::current_stream());
  EXPECT_LE(worst_error(values(out), want, 0, 5e-2), 1.0);
  // An empty reduction: bias, then relu.
  Tensor e0 = kiln::empty(Dims{96, 0}).cuda(), e1 = kiln::empty(Dims{0, 72}).cuda();
  cuda::matmul_out(*e0.impl(), *e1.impl(), dbias.impl(), true, *out.impl(), {},
                   cuda::current_stream());
  std::vector<double> want_bias;
  for (int i = 0; i < 96; ++i) {
    for (float v : values(bias)) want_bias.push_back(std::max(v, 0.0f));
  }
  EXPECT_LE(worst_error(values(out), want_bias, 0, 1e-7), 1.0);
  // A large product (past the autotuning size) matches too.
  Tensor big_a = random_tensor({1024, 1024}, -1, 1, 43),
         big_b = random_tensor({1024, 512}, -1, 1, 44);
  EXPECT_LE(worst_error(values(matmul(big_a.cuda(), big_b.cuda())), matmul_reference(big_a, big_b),
                        0, 1e-5 * 32),
            1.0);
}

TEST(CudaEager, GradientsFlowThroughDeviceOps) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor x = random_tensor({16, 32}, -1, 1, 50), w = random_tensor({32, 8}, -1, 1, 51);
  Tensor g = random_tensor({16, 8}, -1, 1, 52);
  auto run = [&](bool on_cuda, Tensor& gx, Tensor& gw) {
    Tensor xv = (on_cuda ? x.cuda() : x.clone()).requires_grad_(true);
    Tensor wv = (on_cuda ? w.cuda() : w.clone()).requires_grad_(true);
    // Two paths into x and w: the gradients accumulate on the device.
    Tensor y = tanh(matmul(xv, wv)) * 2.0 + matmul(xv * xv, wv);
    y.backward(on_cuda ? g.cuda() : g);
    gx = xv.grad().cpu();
    gw = wv.grad().cpu();
  };
  Tensor gx_cpu, gw_cpu, gx_gpu, gw_gpu;
  run(false, gx_cpu, gw_cpu);
  run(true, gx_gpu, gw_gpu);
  EXPECT_LE(worst_error(values(gx_gpu), as_double(gx_cpu), 1e-4, 1e-5), 1.0);
  EXPECT_LE(worst_error(values(gw_gpu), as_double(gw_cpu), 1e-4, 1e-5), 1.0);
  // The gradient of a device move returns to the CPU tensor.
  Tensor c = x.clone().requires_grad_(true);
  (c.cuda() * 3.0).backward(full({16, 32}, 1.0).cuda());
  for (float v : values(c.grad())) EXPECT_EQ(v, 3.0f);
}

TEST(CudaEager, MixedDevicesAndMissingKernelsAreErrors) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor a = ones({4, 4}), b = ones({4, 4}).cuda();
  try {
    (void)(a + b);
    FAIL();
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cpu"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda"), std::string::npos) << what;
  }
  EXPECT_THROW((void)matmul(a, b), Error);
  // An op with no CUDA kernel refuses the device tensor instead of reading device memory.
  try {
    (void)cumsum(b, 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no cuda kernel"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)b.to(DType::Int64), Error);
}

TEST(CudaEager, OutOfMemoryIsAnErrorAndTheAllocatorRecovers) {
  KILN_REQUIRE_CUDA_DEVICE();
  const size_t total = cuda::device_info().total_memory;
  try {
    Tensor huge(kiln::empty(Dims{static_cast<int64_t>(total / 2)}, DType::Float32, Device::CUDA));
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(total / 2 * 4)), std::string::npos) << what;
  }
  EXPECT_EQ(values((ones({3}).cuda() + 1.0)), std::vector<float>({2, 2, 2}));
}

TEST(CudaEager, AllocatorReusesAndReportsStats) {
  KILN_REQUIRE_CUDA_DEVICE();
  cuda::CachingAllocator& alloc = cuda::device_allocator();
  { Tensor t(kiln::empty(Dims{1 << 20}, DType::Float32, Device::CUDA)); }
  alloc.reset_peak();
  const cuda::CachingAllocatorStats before = alloc.stats();
  for (int i = 0; i < 10; ++i) Tensor t(kiln::empty(Dims{1 << 20}, DType::Float32, Device::CUDA));
  const cuda::CachingAllocatorStats after = alloc.stats();
  EXPECT_EQ(after.source_allocations, before.source_allocations);  // served from the cache
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  // One 4 MiB tensor at a time: the peak rose by exactly that over what was live.
  EXPECT_EQ(after.peak_allocated_bytes, before.allocated_bytes + (4 << 20));
  alloc.empty_cache();
  EXPECT_LE(alloc.stats().reserved_bytes, before.reserved_bytes);
}

TEST(CudaEager, StreamsEventsAndPinnedCopies) {
  KILN_REQUIRE_CUDA_DEVICE();
  cuda::Stream s;
  const size_t n = 1 << 22;
  auto* host = static_cast<float*>(cuda::allocate_pinned(n * 4));
  auto* back = static_cast<float*>(cuda::allocate_pinned(n * 4));
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 1000) * 0.5f;
  const cuda::DevicePtr d = cuda::device_allocator().allocate(n * 4, s.id());
  cuda::Event start, end;
  start.record(s.id());
  cuda::copy_to_device_async(d, host, n * 4, s.id());
  cuda::copy_to_host_async(back, d, n * 4, s.id());
  end.record(s.id());
  end.synchronize();
  EXPECT_GT(start.elapsed_ms(end), 0.0f);
  EXPECT_EQ(std::memcmp(host, back, n * 4), 0);
  cuda::device_allocator().free(d);
  cuda::free_pinned(host);
  cuda::free_pinned(back);
}

TEST(CudaEager, KernelsAreCachedInMemoryAndOnDisk) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor x = ones({10}).cuda();
  const cuda::KernelCacheStats before = cuda::kernel_cache_stats();
  // An expression no other test runs: one new module, compiled or read from the disk cache.
  cuda::PointwiseExpr e;
  const auto in = e.input(0);
  e.binary(BinaryOp::Mul, e.unary(UnaryOp::Sin, e.unary(UnaryOp::Cos, in)), in);
  Tensor y(kiln::empty(Dims{10}, DType::Float32, Device::CUDA));
  const TensorImpl* inputs[] = {x.impl()};
  cuda::pointwise_out("test", e, inputs, *y.impl(), cuda::current_stream());
  EXPECT_EQ(values(y), std::vector<float>(10, static_cast<float>(std::sin(std::cos(1.0)))));
  const cuda::KernelCacheStats first = cuda::kernel_cache_stats();
  EXPECT_GE((first.compiled + first.from_disk) - (before.compiled + before.from_disk), 1);
  EXPECT_EQ(values(x * 7.0), std::vector<float>(10, 7.0f));
  const cuda::KernelCacheStats second = cuda::kernel_cache_stats();
  // Another number is an argument of the same kernel: nothing is compiled or loaded again.
  EXPECT_EQ(values(x * -2.5), std::vector<float>(10, -2.5f));
  const cuda::KernelCacheStats third = cuda::kernel_cache_stats();
  EXPECT_EQ(third.compiled, second.compiled);
  EXPECT_EQ(third.from_disk, second.from_disk);
  // The disk cache holds cubins named <hash>-<arch>-nvrtc<version>.cubin.
  if (const char* dir = std::getenv("KILN_CACHE_DIR")) {
    bool found = false;
    for (auto& f : std::filesystem::directory_iterator(std::filesystem::path(dir) / "cuda")) {
      found = found || f.path().extension() == ".cubin";
    }
    EXPECT_TRUE(found);
  }
}

TEST(CudaEager, ActivationGradientsUseTheSharedFormulas) {
  KILN_REQUIRE_CUDA_DEVICE();
  Tensor x = random_tensor({1000}, -3, 3, 60), g = random_tensor({1000}, -1, 1, 61);
  for (int which = 0; which < 5; ++which) {
    auto f = [which](const Tensor& t) {
      switch (which) {
        case 0:
          return relu(t);
        case 1:
          return sigmoid(t);
        case 2:
          return gelu(t, false);
        case 3:
          return silu(t);
        default:
          return leaky_relu(t, 0.2);
      }
    };
    Tensor xc = x.clone().requires_grad_(true), xd = x.cuda().requires_grad_(true);
    f(xc).backward(g);
    f(xd).backward(g.cuda());
    EXPECT_LE(worst_error(values(xd.grad()), as_double(xc.grad()), 1e-5, 1e-6), 1.0) << which;
  }
}

}  // namespace
}  // namespace kiln

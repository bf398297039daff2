// The generated kernels compile with NVRTC for sm_90 without a device (CI); NVRTC's refusals
// name the op and show the log; and a machine without a device says so instead of crashing.

#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "kiln/runtime/cuda/eager.h"
#include "kiln/runtime/cuda/pointwise.h"

namespace kiln {
namespace {

using kernels::BinaryOp;
using kernels::UnaryOp;

TEST(CudaCompile, PointwiseChainCompilesForSm90) {
  KILN_REQUIRE_NVRTC();
  // relu(x * a + b) * c, the chain the bandwidth benchmark runs.
  cuda::PointwiseExpr e;
  auto x = e.input(0);
  auto y = e.binary(BinaryOp::Add, e.binary(BinaryOp::Mul, x, e.input(1)), e.input(2));
  e.binary(BinaryOp::Mul, e.unary(UnaryOp::Relu, y), e.input(3));
  EXPECT_EQ(e.num_inputs(), 4);
  const std::string source = cuda::pointwise_source(e);
  const cuda::CompiledCode code = cuda::compile("pointwise test", source, "sm_90");
  EXPECT_NE(code.ptx.find(".entry kiln_pointwise_flat"), std::string::npos);
  EXPECT_NE(code.ptx.find(".entry kiln_pointwise_strided"), std::string::npos);
  EXPECT_NE(code.ptx.find(".target sm_90"), std::string::npos);
  // The contiguous kernel moves 16 bytes per load and store.
  EXPECT_NE(code.ptx.find("ld.global.nc.v4.f32"), std::string::npos) << code.ptx;
  EXPECT_NE(code.ptx.find("st.global.v4.f32"), std::string::npos);
  ASSERT_GT(code.cubin.size(), 64u);
  EXPECT_EQ(code.cubin.compare(0, 4,
                               "\x7f"
                               "ELF"),
            0);
}

// Every unary op of the schema (the CPU's formulas, compiled as device code) and every float
// binary op compile.
TEST(CudaCompile, EveryUnaryAndBinaryOpCompiles) {
  KILN_REQUIRE_NVRTC();
  cuda::PointwiseExpr e;
  auto v = e.input(0);
  for (int op = 0; op <= static_cast<int>(UnaryOp::Hardtanh); ++op) {
    v = e.unary(static_cast<UnaryOp>(op), v);
  }
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Pow,
                      BinaryOp::Maximum, BinaryOp::Minimum}) {
    v = e.binary(op, v, e.input(1));
  }
  const cuda::CompiledCode code =
      cuda::compile("pointwise test", cuda::pointwise_source(e), "sm_90");
  EXPECT_GT(code.cubin.size(), 64u);
}

// The activations' backward formulas (formula_out's calls), with their parameters.
TEST(CudaCompile, BackwardFormulasCompile) {
  KILN_REQUIRE_NVRTC();
  cuda::PointwiseExpr e;
  const auto g = e.input(0), x = e.input(1), a = e.constant(0.1), b = e.constant(2.0);
  using V = cuda::PointwiseExpr::Value;
  V v = e.call("threshold_backward", std::vector<V>{g, x, a});
  v = e.call("leaky_relu_backward", std::vector<V>{v, x, a});
  v = e.call("hardtanh_backward", std::vector<V>{v, x, a, b});
  for (const char* f : {"sigmoid_backward", "tanh_backward", "silu_backward", "gelu_backward",
                        "gelu_tanh_backward"}) {
    v = e.call(f, std::vector<V>{v, x});
  }
  const cuda::CompiledCode code = cuda::compile("backward", cuda::pointwise_source(e), "sm_90");
  EXPECT_NE(code.ptx.find(".entry kiln_pointwise_strided"), std::string::npos);
}

TEST(CudaCompile, ReductionKernelCompilesForSm90) {
  KILN_REQUIRE_NVRTC();
  const cuda::CompiledCode code = cuda::compile("sum", cuda::reduce_source(), "sm_90");
  EXPECT_NE(code.ptx.find(".entry kiln_reduce_sum"), std::string::npos);
  EXPECT_NE(code.ptx.find("shfl.sync.down"), std::string::npos);  // the warp-shuffle tree
}

TEST(CudaCompile, NvrtcErrorNamesTheOpAndShowsTheLog) {
  KILN_REQUIRE_NVRTC();
  try {
    cuda::compile("my_fused_op", "extern \"C\" __global__ void k() { undefined_name = 1; }",
                  "sm_90");
    FAIL() << "expected NVRTC to refuse";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.op(), "my_fused_op");
    EXPECT_NE(what.find("NVRTC could not compile"), std::string::npos) << what;
    EXPECT_NE(what.find("undefined_name"), std::string::npos) << what;  // the log
  }
}

TEST(CudaCompile, ComparisonsHaveNoFloatPointwiseForm) {
  cuda::PointwiseExpr e;
  auto x = e.input(0);
  EXPECT_THROW(e.binary(BinaryOp::Lt, x, x), Error);
  EXPECT_THROW(e.unary(UnaryOp::Relu, 5), Error);  // value 5 is not defined
}

TEST(CudaDevice, WithoutADeviceTheErrorSaysSo) {
  if (cuda::is_available()) GTEST_SKIP() << "this machine has a CUDA device";
  const std::string why = cuda::unavailable_reason();
  EXPECT_NE(why.find("no CUDA device"), std::string::npos) << why;
  Tensor x = ones({2, 3});
  try {
    (void)x.cuda();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln

// The quantization ops through every backend: eager against hand-computed values, fake_quantize's
// straight-through gradient through autograd, and a trace (quantize -> dequantize per tensor,
// fake_quantize per channel) run by the interpreter, the JIT and a saved artifact on an input the
// trace did not see, each equal to eager.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

using test::max_abs_diff;
using test::rnd;

Tensor from(const std::vector<double>& v, DType dtype = DType::Float32) {
  Tensor t = kiln::empty({static_cast<int64_t>(v.size())}, TensorOptions(DType::Float64));
  for (size_t i = 0; i < v.size(); ++i) t.data_ptr<double>()[i] = v[i];
  return t.to(dtype);
}

std::vector<double> values(const Tensor& t) {
  const Tensor d = t.to(DType::Float64).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

TEST(QuantizeOps, EagerPerTensorAndPerChannel) {
  // scale 0.1, zero point 10, uint8: x / 0.1 = -1.5 -> -2 (+10 = 8), 0.5 -> 0 (10), 26 -> 36.
  const Tensor q = quantize_per_tensor(from({-0.15, 0.05, 2.6}), 0.1, 10, DType::UInt8);
  EXPECT_EQ(q.dtype(), DType::UInt8);
  EXPECT_EQ(values(q), (std::vector<double>{8, 10, 36}));
  // Per channel along dim 0: row 0 scale 1 zero point 0, row 1 scale 0.5 zero point -1.
  const Tensor x = from({1.4, -2.5, 3.0, 1.4, -2.5, 3.0}).reshape({2, 3});
  const Tensor s = from({1.0, 0.5}), z = from({0, -1}, DType::Int64);
  const Tensor qc = quantize_per_channel(x, s, z, 0, DType::Int8);
  EXPECT_EQ(values(qc), (std::vector<double>{1, -2, 3, 2, -6, 5}));
  EXPECT_EQ(values(dequantize(qc, s, z, 0)), (std::vector<double>{1, -2, 3, 1.5, -2.5, 3}));
  EXPECT_THROW(quantize_per_tensor(x, 0.1, 0, DType::Float32), Error);
}

// d/dx sum(w * fake_quantize(x)) = w where x / s + zp rounds into [quant_min, quant_max], else 0.
TEST(QuantizeOps, FakeQuantizeGradientThroughAutograd) {
  const Tensor x = (rnd({5, 7}, 1) * 3.0).requires_grad_();
  const Tensor w = rnd({5, 7}, 2);
  const double s = 0.02;
  const int64_t zp = 5, lo = -100, hi = 90;
  sum(fake_quantize_per_tensor_affine(x, s, zp, lo, hi) * w).backward();
  const std::vector<double> xv = values(x.detach()), wv = values(w), g = values(x.grad());
  int passed = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double q = std::nearbyint(double(float(xv[i]) / float(s))) + zp;
    const double want = q >= lo && q <= hi ? wv[i] : 0.0;
    passed += want != 0.0;
    EXPECT_EQ(g[i], want) << "element " << i << " x " << xv[i];
  }
  EXPECT_GT(passed, 0);
  EXPECT_LT(passed, static_cast<int>(xv.size()));  // some were clamped
}

// The trace run by the interpreter, the JIT and a saved artifact on `x`: each output of eager's
// dtype and values.
void expect_every_backend_equals(const jit::TracedFunction& t, const TensorList& eager,
                                 const Tensor& x) {
  jit::CompileOptions o;
  o.disk_cache = false;
  rt::Session session(rt::Model::from_bytes(jit::save_to_bytes(t)));
  const TensorList interpreted = t({x}), compiled = jit::compile(t, o)({x});
  auto saved = session.run({x.impl()});
  ASSERT_EQ(saved.size(), eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    for (const Tensor& got : {interpreted[i], compiled[i], Tensor(saved[i])}) {
      EXPECT_EQ(got.dtype(), eager[i].dtype()) << "output " << i;
      EXPECT_EQ(max_abs_diff(got, eager[i]), 0.0) << "output " << i;
    }
  }
}

// Parameters made inside the trace by kiln ops: the trace records them as constants.
TensorList quant_chain(const TensorList& in) {
  const Tensor s = tensor({0.05, 0.1, 0.02}), z = tensor({0.0, 3.0, -4.0}).to(DType::Int64);
  Tensor q = quantize_per_tensor(in[0] * 2.0, 0.03, -7, DType::Int8);
  Tensor back = dequantize(q, full({}, 0.03), full({}, -7, TensorOptions(DType::Int32)));
  Tensor fq = fake_quantize_per_channel_affine(in[0], s, z, 1, -128, 127);
  return TensorList{back + fq, q};
}

TEST(QuantizeOps, TraceRunsInEveryBackend) {
  const Tensor x = rnd({4, 3, 5}, 3), x2 = rnd({4, 3, 5}, 4, 4.0);
  jit::TracedFunction t = jit::trace(quant_chain, {x});
  for (const char* op : {"kiln.quantize", "kiln.dequantize", "kiln.fake_quantize"})
    EXPECT_NE(t.str().find(op), std::string::npos) << op << "\n" << t.str();
  expect_every_backend_equals(t, quant_chain({x2}), x2);
}

// An int8 network piece: quantize, qconv2d (per-channel weights, bias, relu, padding, stride),
// qlinear over the last dim (per-tensor weights, int8 output), dequantize. Weights and parameters
// are made by kiln ops inside the trace (recorded as constants).
Tensor scalar_of(double v, DType dtype) {
  return full(Dims{}, v, TensorOptions(dtype));
}
// Weights drawn once outside any trace (rnd writes through data_ptr): constants to the trace.
Tensor int8_weight(Dims sizes, uint32_t seed, double scale) {
  static std::map<uint32_t, Tensor> made;
  auto [it, fresh] = made.try_emplace(seed);
  if (fresh) {
    it->second = (rnd(sizes, seed) * scale).to(DType::Int8);
    jit::mark_constant(it->second);
  }
  return it->second;
}
QuantizedWeight conv_weight() {
  return {int8_weight({4, 3, 3, 3}, 11, 100.0), tensor({0.01, 0.02, 0.015, 0.03}),
          zeros({4}, TensorOptions(DType::Int32))};
}
QuantizedWeight linear_weight() {
  return {int8_weight({5, 3}, 12, 120.0), scalar_of(0.02, DType::Float32),
          scalar_of(0, DType::Int32)};
}
TensorList int8_chain(const TensorList& in) {
  const Tensor xs = scalar_of(0.04, DType::Float32), xz = scalar_of(120, DType::Int32);
  const Tensor q = quantize(in[0], xs, xz, DType::UInt8);
  const Tensor bias = tensor({100.0, -200.0, 0.0, 50.0}, TensorOptions(DType::Int32));
  const QuantizedOutput conv_out{scalar_of(0.05, DType::Float32), scalar_of(3, DType::Int32),
                                 DType::UInt8, true};
  const Tensor c = qconv2d(q, xs, xz, conv_weight(), bias, conv_out, {2, 2}, {1, 1});
  const QuantizedOutput lin_out{scalar_of(0.03, DType::Float32), scalar_of(-5, DType::Int32),
                                DType::Int8, false};
  const Tensor l =
      qlinear(c, conv_out.scale, conv_out.zero_point, linear_weight(), Tensor(), lin_out);
  return TensorList{dequantize(l, lin_out.scale, lin_out.zero_point), c};
}

// The integer ops agree in every backend, and the int8 convolution is the float one to within
// its output's quantization step: dequantize(qconv2d) vs conv2d(dequantized operands) +
// bias * x_scale * w_scale clamped to the output's range, each within half a step (plus float
// rounding).
TEST(QuantizeOps, IntegerConvAndLinearInEveryBackend) {
  conv_weight(), linear_weight();  // drawn before tracing
  const Tensor x = rnd({2, 3, 5, 6}, 13, 3.0), x2 = rnd({2, 3, 5, 6}, 14, 3.0);
  jit::TracedFunction t = jit::trace(int8_chain, {x});
  for (const char* op : {"kiln.qconv2d", "kiln.qlinear"})
    EXPECT_NE(t.str().find(op), std::string::npos) << op << "\n" << t.str();
  const TensorList eager = int8_chain({x2});
  expect_every_backend_equals(t, eager, x2);
  // The float reference of the convolution.
  const QuantizedWeight w = conv_weight();
  const Tensor xq = dequantize(
      quantize(x2, scalar_of(0.04, DType::Float32), scalar_of(120, DType::Int32), DType::UInt8),
      scalar_of(0.04, DType::Float32), scalar_of(120, DType::Int32));
  const Tensor wf = dequantize(w.weight, w.scale, w.zero_point, 0);
  const Tensor bf = tensor({100.0, -200.0, 0.0, 50.0}) * w.scale * 0.04;
  // relu, and the uint8 output's top: (255 - 3) * 0.05.
  const Tensor want = clamp(conv2d(xq, wf, bf, {2, 2}, {1, 1}), 0.0, (255 - 3) * 0.05);
  const Tensor got =
      dequantize(eager[1], scalar_of(0.05, DType::Float32), scalar_of(3, DType::Int32));
  EXPECT_LE(max_abs_diff(got, want), 0.05 * 0.5 + 1e-4);
  EXPECT_GT(max_abs_diff(want, zeros_like(want)), 0.5);  // not all clamped to zero
}

// The integer add, average pool and dynamic quantization's linear, traced: eager, the interpreter,
// the JIT and a saved artifact agree, and qadd gives the bytes of dequantize -> add -> relu ->
// quantize.
QuantizedWeight dynamic_weight() {
  return {int8_weight({5, 6}, 15, 100.0), tensor({0.01, 0.02, 0.015, 0.03, 0.005}),
          zeros({5}, TensorOptions(DType::Int32))};
}
const QuantizedOutput& add_out() {
  static const QuantizedOutput out{scalar_of(0.05, DType::Float32), scalar_of(10, DType::Int32),
                                   DType::UInt8, true};
  return out;
}
TensorList add_and_dynamic_chain(const TensorList& in) {
  const Tensor as = scalar_of(0.04, DType::Float32), az = scalar_of(120, DType::Int32);
  const Tensor bs = scalar_of(0.03, DType::Float32), bz = scalar_of(-3, DType::Int32);
  const Tensor a = quantize(in[0], as, az, DType::UInt8);
  const Tensor b = quantize(in[0] * -0.7, bs, bz, DType::Int8);
  const Tensor sum = qadd(a, as, az, b, bs, bz, add_out());
  const Tensor y = qlinear_dynamic(in[0], dynamic_weight(), tensor({0.5, -0.25, 0.0, 1.0, 2.0}));
  const QuantizedOutput pool_out{scalar_of(0.02, DType::Float32), scalar_of(-5, DType::Int32),
                                 DType::Int8};
  const Tensor pooled = qavg_pool2d(sum, add_out().scale, add_out().zero_point, pool_out, {3, 3},
                                    {2, 2}, {1, 1}, true, false);
  return TensorList{sum, y, a, b, pooled};
}

TEST(QuantizeOps, IntegerAddPoolAndDynamicLinearInEveryBackend) {
  dynamic_weight(), add_out();  // made before tracing
  const Tensor x = rnd({2, 3, 5, 6}, 16, 3.0), x2 = rnd({2, 3, 5, 6}, 17, 3.0);
  jit::TracedFunction t = jit::trace(add_and_dynamic_chain, {x});
  for (const char* op : {"kiln.qadd", "kiln.qlinear_dynamic", "kiln.qavg_pool2d"})
    EXPECT_NE(t.str().find(op), std::string::npos) << op << "\n" << t.str();
  const TensorList eager = add_and_dynamic_chain({x2});
  expect_every_backend_equals(t, eager, x2);
  const Tensor fa =
      dequantize(eager[2], scalar_of(0.04, DType::Float32), scalar_of(120, DType::Int32));
  const Tensor fb =
      dequantize(eager[3], scalar_of(0.03, DType::Float32), scalar_of(-3, DType::Int32));
  const Tensor want = quantize(relu(fa + fb), add_out().scale, add_out().zero_point, DType::UInt8);
  EXPECT_EQ(max_abs_diff(eager[0], want), 0.0);
  EXPECT_GT(max_abs_diff(want, full_like(want, 10.0)), 0.0);  // not all at the zero point
  // The dynamic linear within quantization noise of the float one.
  const QuantizedWeight w = dynamic_weight();
  const Tensor wf = dequantize(w.weight, w.scale, w.zero_point, 0);
  const Tensor ref = linear(x2, wf, tensor({0.5, -0.25, 0.0, 1.0, 2.0}));
  EXPECT_GT(quant::sqnr(ref, eager[1]), 30.0);
  // The integer average pool within one step of the float pool of the dequantized sum.
  const Tensor pooled_ref = quantize(
      avg_pool2d(dequantize(eager[0], add_out().scale, add_out().zero_point), 3, 2, 1, true, false),
      scalar_of(0.02, DType::Float32), scalar_of(-5, DType::Int32), DType::Int8);
  EXPECT_EQ(eager[4].sizes(), pooled_ref.sizes());
  EXPECT_LE(max_abs_diff(eager[4], pooled_ref), 1.0);
  EXPECT_GT(max_abs_diff(eager[4], full_like(eager[4], -5.0)), 0.0);
}

// A residual block's int8 convolution and add, traced as two ops: the inference pipeline fuses
// them (--kiln-fuse-qconv-add) in the JIT and the saved artifact, whose bytes stay those of
// eager's two kernels; the interpreter runs the trace as recorded.
TensorList conv_add_chain(const TensorList& in) {
  const Tensor xs = scalar_of(0.04, DType::Float32), xz = scalar_of(120, DType::Int32);
  const Tensor q = quantize(in[0], xs, xz, DType::UInt8);
  const QuantizedOutput conv_out{scalar_of(0.05, DType::Float32), scalar_of(3, DType::Int32),
                                 DType::UInt8, false};
  const Tensor c = qconv2d(q, xs, xz, conv_weight(), Tensor(), conv_out, {1, 1}, {1, 1});
  const Tensor rs = scalar_of(0.03, DType::Float32), rz = scalar_of(-3, DType::Int32);
  const Tensor residual =
      quantize(in[0].slice(1, 0, 1).expand({-1, 4, -1, -1}) * -0.7, rs, rz, DType::Int8);
  const Tensor sum = qadd(c, conv_out.scale, conv_out.zero_point, residual, rs, rz, add_out());
  return TensorList{sum};
}

TEST(QuantizeOps, ConvolutionAndResidualAddFuseInEveryBackend) {
  conv_weight(), add_out();  // made before tracing
  const Tensor x = rnd({2, 3, 5, 6}, 18, 3.0), x2 = rnd({2, 3, 5, 6}, 19, 3.0);
  jit::TracedFunction t = jit::trace(conv_add_chain, {x});
  const TensorList eager = conv_add_chain({x2});
  expect_every_backend_equals(t, eager, x2);
  const auto model = rt::Model::from_bytes(jit::save_to_bytes(t));
  std::map<std::string, size_t> ops;
  for (const auto& [name, n] : model->stats().op_counts) ops[name] = n;
  EXPECT_EQ(ops["qconv2d_add"], 1u);
  EXPECT_EQ(ops["qadd"] + ops["qconv2d"], 0u);
  EXPECT_GT(max_abs_diff(eager[0], full_like(eager[0], 10.0)), 0.0);  // not all at the zero point
}

}  // namespace
}  // namespace kiln

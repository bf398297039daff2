// Registry entries of the quantization ops (kernels/quantize.h): quantize, dequantize,
// fake_quantize and its gradient. Operands: input (grad, input for the gradient), scale,
// zero_point.

#include "kiln/runtime/kernels/quantize.h"
#include "common.h"
#include "kiln/runtime/kernels/qgemm.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln::rt::ops {
namespace {

struct FakeQuant : KernelParams {
  kernels::FakeQuantParams p;
};

std::unique_ptr<KernelParams> decode_axis(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("axis");
  return p;
}
std::unique_ptr<KernelParams> decode_fake(const AttrMap& a) {
  auto p = std::make_unique<FakeQuant>();
  p->p.axis = a.i("axis");
  p->p.quant_min = a.i("quant_min");
  p->p.quant_max = a.i("quant_max");
  return p;
}

// quantize's dtype attribute is the result's element type, which the kernel reads from `out`.
std::unique_ptr<KernelParams> decode_quantize(const AttrMap& a) {
  auto p = decode_axis(a);
  (void)a.i("dtype");
  return p;
}

void run_quantize(const KernelCall& c) {
  kernels::quantize_out(in(c, 0), in(c, 1), in(c, 2), {params<IntParams>(c).v[0]}, out(c));
}
void run_dequantize(const KernelCall& c) {
  kernels::dequantize_out(in(c, 0), in(c, 1), in(c, 2), {params<IntParams>(c).v[0]}, out(c));
}
void run_fake_quantize(const KernelCall& c) {
  kernels::fake_quantize_out(in(c, 0), in(c, 1), in(c, 2), params<FakeQuant>(c).p, out(c));
}
void run_fake_quantize_backward(const KernelCall& c) {
  kernels::fake_quantize_backward_out(in(c, 0), in(c, 1), in(c, 2), in(c, 3),
                                      params<FakeQuant>(c).p, out(c));
}

// A linear's input rows (elements / in_features; 0 when the weight is not [out, in]).
int64_t input_rows(const TensorImpl& x, const TensorImpl& w) {
  return w.dim() == 2 && w.size(1) > 0 ? x.numel() / w.size(1) : 0;
}

// qlinear / qconv2d: operands input, input_scale, input_zero_point, weight, weight_scale,
// weight_zero_point, bias (optional), output_scale, output_zero_point.
struct QGemm : KernelParams {
  kernels::Conv2dParams conv;
  DType out_dtype = DType::UInt8;  // the result's (the kernels read it from `out`)
  bool relu = false;
};
std::unique_ptr<KernelParams> decode_qgemm(const AttrMap& a) {
  auto p = std::make_unique<QGemm>();
  if (a.op() == "qconv2d") {
    p->conv = conv2d_params(a);
    p->conv.channels_last = a.b("channels_last");
  }
  p->out_dtype = static_cast<DType>(a.i("dtype"));
  p->relu = a.b("relu");
  return p;
}
kernels::QuantizedOperands qoperands(const KernelCall& c, bool relu) {
  return {&in(c, 1), &in(c, 2), &in(c, 4), &in(c, 5), opt_in(c, 6), &in(c, 7), &in(c, 8), relu};
}
const kernels::PreparedQWeight* prepared(const KernelCall& c) {
  return static_cast<const kernels::PreparedQWeight*>(c.prepared);
}
void run_qlinear(const KernelCall& c) {
  kernels::qlinear_out(in(c, 0), in(c, 3), qoperands(c, params<QGemm>(c).relu), out(c),
                       prepared(c));
}
void run_qconv2d(const KernelCall& c) {
  const auto& p = params<QGemm>(c);
  kernels::qconv2d_out(in(c, 0), in(c, 3), qoperands(c, p.relu), p.conv, out(c), prepared(c));
}
// Constant weights and quantization parameters (operands 1-5, 7, 8; the bias may vary) are packed
// once for the model.
template <bool kConv>
PreparedInputs prepare_qgemm(const KernelCall& c, uint32_t constant_inputs) {
  parallel_for(0, num_threads(), 1, [](int64_t, int64_t) {});  // start the pool's workers now
  constexpr uint32_t kNeeded = 0b110111110u;
  if ((constant_inputs & kNeeded) != kNeeded) return {};
  const auto& p = params<QGemm>(c);
  const kernels::QuantizedOperands q = qoperands(c, p.relu);
  kernels::PreparedQWeightPtr w =
      kConv ? kernels::prepare_qconv2d_weight(in(c, 3), q, p.conv, in(c, 0).dtype(), p.out_dtype)
            : kernels::prepare_qlinear_weight(in(c, 3), q, in(c, 0).dtype(), p.out_dtype,
                                              input_rows(in(c, 0), in(c, 3)));
  const size_t bytes = kernels::prepared_nbytes(*w);
  const char* family = kernels::prepared_family(*w);
  return {std::move(w), bytes, family};
}

// qconv2d_add: qconv2d's operands (its output_scale / output_zero_point the convolution's, 7 and
// 8), then other, other_scale, other_zero_point, output_scale, output_zero_point (9-13);
// attributes conv2d's, conv_dtype, relu (the convolution's), dtype (the result's), add_relu,
// channels_last.
struct QConvAdd : QGemm {
  DType conv_dtype = DType::UInt8;
  bool add_relu = false;
};
std::unique_ptr<KernelParams> decode_qconv2d_add(const AttrMap& a) {
  auto p = std::make_unique<QConvAdd>();
  p->conv = conv2d_params(a);
  p->conv.channels_last = a.b("channels_last");
  p->conv_dtype = static_cast<DType>(a.i("conv_dtype"));
  p->relu = a.b("relu");
  p->out_dtype = static_cast<DType>(a.i("dtype"));
  p->add_relu = a.b("add_relu");
  return p;
}
void run_qconv2d_add(const KernelCall& c) {
  const auto& p = params<QConvAdd>(c);
  kernels::qconv2d_add_out(in(c, 0), in(c, 3), qoperands(c, p.relu), p.conv, p.conv_dtype, in(c, 9),
                           {&in(c, 10), &in(c, 11), &in(c, 12), &in(c, 13), p.add_relu}, out(c),
                           prepared(c));
}
// The convolution's weights packed once, as qconv2d's (for its result's dtype, conv_dtype).
PreparedInputs prepare_qconv2d_add(const KernelCall& c, uint32_t constant_inputs) {
  parallel_for(0, num_threads(), 1, [](int64_t, int64_t) {});  // start the pool's workers now
  constexpr uint32_t kNeeded = 0b110111110u;
  if ((constant_inputs & kNeeded) != kNeeded) return {};
  const auto& p = params<QConvAdd>(c);
  kernels::PreparedQWeightPtr w = kernels::prepare_qconv2d_weight(
      in(c, 3), qoperands(c, p.relu), p.conv, in(c, 0).dtype(), p.conv_dtype);
  const size_t bytes = kernels::prepared_nbytes(*w);
  const char* family = kernels::prepared_family(*w);
  return {std::move(w), bytes, family};
}

// qadd: operands input, input_scale, input_zero_point, other, other_scale, other_zero_point,
// output_scale, output_zero_point; attributes dtype (the result's, read from `out`), relu.
std::unique_ptr<KernelParams> decode_qadd(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  (void)a.i("dtype");
  p->flag = a.b("relu");
  return p;
}
void run_qadd(const KernelCall& c) {
  kernels::qadd_out(
      in(c, 0), in(c, 3),
      {&in(c, 1), &in(c, 2), &in(c, 4), &in(c, 5), &in(c, 6), &in(c, 7), params<IntParams>(c).flag},
      out(c));
}

// qavg_pool2d: operands input, input_scale, input_zero_point, output_scale, output_zero_point;
// avg_pool2d's attributes and dtype (the result's, read from `out`).
std::unique_ptr<KernelParams> decode_qavg_pool2d(const AttrMap& a) {
  auto p = std::make_unique<PoolParams>();
  p->p = pool2d_params(a);
  (void)a.i("dtype");
  return p;
}
void run_qavg_pool2d(const KernelCall& c) {
  kernels::qavg_pool2d_out(in(c, 0), {&in(c, 1), &in(c, 2), &in(c, 3), &in(c, 4)},
                           params<PoolParams>(c).p, out(c));
}

// qlinear_dynamic: operands input, weight, weight_scale, weight_zero_point, bias (optional); the
// constant weight and its parameters are packed once for the model.
void run_qlinear_dynamic(const KernelCall& c) {
  kernels::qlinear_dynamic_out(in(c, 0), in(c, 1), in(c, 2), in(c, 3), opt_in(c, 4), out(c),
                               prepared(c));
}
PreparedInputs prepare_qlinear_dynamic(const KernelCall& c, uint32_t constant_inputs) {
  parallel_for(0, num_threads(), 1, [](int64_t, int64_t) {});  // start the pool's workers now
  constexpr uint32_t kNeeded = 0b1110u;
  if ((constant_inputs & kNeeded) != kNeeded) return {};
  kernels::PreparedQWeightPtr w = kernels::prepare_qlinear_dynamic_weight(
      in(c, 1), in(c, 2), in(c, 3), input_rows(in(c, 0), in(c, 1)));
  const size_t bytes = kernels::prepared_nbytes(*w);
  const char* family = kernels::prepared_family(*w);
  return {std::move(w), bytes, family};
}

}  // namespace

void register_quantize(Registry& r) {
  r.add(with_signature(
      {.name = "qlinear_dynamic", .run = run_qlinear_dynamic, .prepare = prepare_qlinear_dynamic}));
  r.add(with_signature({.name = "qadd", .decode = decode_qadd, .run = run_qadd}));
  r.add(with_signature({.name = "qconv2d_add",
                        .decode = decode_qconv2d_add,
                        .run = run_qconv2d_add,
                        .prepare = prepare_qconv2d_add}));
  r.add(with_signature(
      {.name = "qavg_pool2d", .decode = decode_qavg_pool2d, .run = run_qavg_pool2d}));
  r.add(with_signature({.name = "qlinear",
                        .decode = decode_qgemm,
                        .run = run_qlinear,
                        .prepare = prepare_qgemm<false>}));
  r.add(with_signature({.name = "qconv2d",
                        .decode = decode_qgemm,
                        .run = run_qconv2d,
                        .prepare = prepare_qgemm<true>}));
  r.add(with_signature({.name = "quantize", .decode = decode_quantize, .run = run_quantize}));
  r.add(with_signature({.name = "dequantize", .decode = decode_axis, .run = run_dequantize}));
  r.add(with_signature({.name = "fake_quantize", .decode = decode_fake, .run = run_fake_quantize}));
  r.add(with_signature({.name = "fake_quantize_backward",
                        .decode = decode_fake,
                        .run = run_fake_quantize_backward}));
}

}  // namespace kiln::rt::ops

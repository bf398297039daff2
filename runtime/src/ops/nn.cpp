// Registry entries of the neural-network ops: convolutions (plain and fused), linear (plain and
// fused), matmul, pooling, normalization, embedding, dropout, softmax.

#include <cmath>

#include "common.h"
#include "kiln/runtime/kernels/attention.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/elementwise.h"
#include "kiln/runtime/kernels/embedding.h"
#include "kiln/runtime/kernels/gemm.h"
#include "kiln/runtime/kernels/interpolate.h"
#include "kiln/runtime/kernels/linalg.h"
#include "kiln/runtime/kernels/mbconv.h"
#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/kernels/reduce.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln::rt::ops {
namespace {

using kernels::Activation;

// Fused epilogue shared by conv2d_fused and linear_fused: act(op + bias + residual).
struct Fusion {
  Activation activation = Activation::None;
  float clamp_min = 0, clamp_max = 0;
};
// `prefix`: mbconv's three steps name theirs expand_activation, dw_activation, ...
Fusion decode_fusion(const AttrMap& a, const std::string& prefix = "") {
  Fusion f;
  const std::string act_name = prefix + "activation";
  const int64_t act = a.i(act_name);
  KILN_CHECK(act >= 0 && act <= static_cast<int64_t>(Activation::Tanh), a.op(), "attribute '",
             act_name, "': expected 0..8, got ", act);
  f.activation = static_cast<Activation>(act);
  f.clamp_min = static_cast<float>(a.f(prefix + "clamp_min"));
  f.clamp_max = static_cast<float>(a.f(prefix + "clamp_max"));
  return f;
}
kernels::ConvEpilogue conv_epilogue(const Fusion& f) {
  kernels::ConvEpilogue e;
  e.activation = f.activation, e.clamp_min = f.clamp_min, e.clamp_max = f.clamp_max;
  return e;
}

struct FusedConvParams : ConvParams {
  Fusion fusion;
};
std::unique_ptr<KernelParams> decode_conv2d(const AttrMap& a) {
  auto p = std::make_unique<FusedConvParams>();
  p->p = conv2d_params(a);
  if (a.op() == "conv2d_fused" || a.op() == "conv2d_avgpool") p->fusion = decode_fusion(a);
  return p;
}
// The generated chain an artifact's code runs on each finished block (KernelCall::block_fn).
kernels::BlockEpilogue block_epilogue(const KernelCall& c) {
  kernels::BlockEpilogue b;
  b.fn = c.block_fn;
  b.ctx = c.block_ctx;
  return b;
}
// The generated chain computing input 0 block by block (KernelCall::prologue_fn).
kernels::BlockEpilogue block_prologue(const KernelCall& c) {
  kernels::BlockEpilogue b;
  b.fn = c.prologue_fn;
  b.ctx = c.prologue_ctx;
  return b;
}
void run_conv2d(const KernelCall& c) {
  const auto& p = params<FusedConvParams>(c);
  kernels::ConvEpilogue ep;
  ep.residual = opt_in(c, 3);
  ep.activation = p.fusion.activation;
  ep.clamp_min = p.fusion.clamp_min;
  ep.clamp_max = p.fusion.clamp_max;
  ep.block = block_epilogue(c);
  kernels::conv2d_out(in(c, 0), in(c, 1), opt_in(c, 2), p.p, out(c), ep,
                      static_cast<const kernels::PreparedConv2dWeight*>(c.prepared));
}
void run_conv2d_avgpool(const KernelCall& c) {
  const auto& p = params<FusedConvParams>(c);
  kernels::conv2d_avgpool_out(in(c, 0), in(c, 1), opt_in(c, 2), p.p, out(c),
                              conv_epilogue(p.fusion),
                              static_cast<const kernels::PreparedConv2dWeight*>(c.prepared));
}
// A constant weight is packed (or Winograd-transformed) once for the model.
PreparedInputs prepare_conv2d(const KernelCall& c, uint32_t constant_inputs) {
  // The conv kernels run on the thread pool: start its workers now rather than in the first run
  // (the executor core itself has no pool).
  parallel_for(0, num_threads(), 1, [](int64_t, int64_t) {});
  if ((constant_inputs & 0b10u) == 0) return {};
  kernels::PreparedConv2dWeightPtr w =
      kernels::prepare_conv2d_weight(in(c, 1), params<FusedConvParams>(c).p, in(c, 0).sizes());
  if (!w) return {};
  const size_t bytes = w->nbytes();
  const char* algorithm = w->algorithm();
  return {std::move(w), bytes, algorithm};
}

// The fused inverted-residual block (kernels/mbconv.h). Operands: input, expand_weight?,
// expand_bias?, dw_weight, dw_bias?, project_weight, project_bias?, residual?.
struct MBConvParams : KernelParams {
  kernels::MBConvParams p;
};
std::unique_ptr<KernelParams> decode_mbconv(const AttrMap& a) {
  auto p = std::make_unique<MBConvParams>();
  const auto stride = a.ints("stride", 2), padding = a.ints("padding", 2);
  p->p.stride_h = stride[0], p->p.stride_w = stride[1];
  p->p.pad_h = padding[0], p->p.pad_w = padding[1];
  p->p.expand = conv_epilogue(decode_fusion(a, "expand_"));
  p->p.dw = conv_epilogue(decode_fusion(a, "dw_"));
  p->p.project = conv_epilogue(decode_fusion(a, "project_"));
  p->p.input_channels_last = a.b("channels_last_in");
  p->p.output_channels_last = a.b("channels_last_out");
  p->p.strategy = kernels::mbconv_strategy(a.i("strategy"), "mbconv");
  return p;
}
kernels::MBConvOperands mbconv_operands(const KernelCall& c) {
  kernels::MBConvOperands o;
  o.input = &in(c, 0), o.expand_weight = opt_in(c, 1), o.expand_bias = opt_in(c, 2);
  o.dw_weight = &in(c, 3), o.dw_bias = opt_in(c, 4), o.project_weight = &in(c, 5);
  o.project_bias = opt_in(c, 6), o.residual = opt_in(c, 7);
  return o;
}
void run_mbconv(const KernelCall& c) {
  kernels::mbconv_out(mbconv_operands(c), params<MBConvParams>(c).p, out(c),
                      static_cast<const kernels::PreparedMBConv*>(c.prepared));
}
// Constant weights (the 1x1s and the depthwise) are packed once for the model.
PreparedInputs prepare_mbconv(const KernelCall& c, uint32_t constant_inputs) {
  const bool expand = opt_in(c, 1) != nullptr;
  if ((constant_inputs & 0b101000u) != 0b101000u || (expand && (constant_inputs & 0b10u) == 0))
    return {};
  auto p = kernels::prepare_mbconv(mbconv_operands(c),
                                   kernels::mbconv_run_strategy(params<MBConvParams>(c).p));
  const size_t bytes = p->nbytes();
  const char* algorithm = p->algorithm();
  return {std::move(p), bytes, algorithm};
}

std::unique_ptr<KernelParams> decode_conv1d(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("stride");
  p->v[1] = a.i("padding");
  p->v[2] = a.i("dilation");
  p->v[3] = a.i("groups");
  return p;
}
// Operands (grad, input, weight) -> (grad_input, grad_weight, grad_bias).
void run_conv1d_backward(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::conv1d_backward_out(in(c, 0), in(c, 1), in(c, 2), {p.v[0], p.v[1], p.v[2], p.v[3]},
                               c.outputs[0], c.outputs[1], c.outputs[2]);
}
void run_conv1d(const KernelCall& c) {
  const auto& p = params<IntParams>(c);
  kernels::conv1d_out(in(c, 0), in(c, 1), opt_in(c, 2), {p.v[0], p.v[1], p.v[2], p.v[3]}, out(c));
}

// A constant operand 1 (linear's weight, matmul's right operand) packed once for the model by
// `pack` (kernels::prepare_linear_weight / prepare_matmul_operand).
PreparedInputs prepare_gemm_operand(
    const KernelCall& c, uint32_t constant_inputs,
    std::shared_ptr<const kernels::SgemmPacked> (*pack)(const TensorImpl&)) {
  parallel_for(0, num_threads(), 1, [](int64_t, int64_t) {});  // start the pool's workers now
  if ((constant_inputs & 0b10u) == 0) return {};
  std::shared_ptr<const kernels::SgemmPacked> w = pack(in(c, 1));
  if (!w) return {};
  const size_t bytes = w->nbytes();
  return {std::move(w), bytes, "gemm"};
}
PreparedInputs prepare_linear(const KernelCall& c, uint32_t constant_inputs) {
  return prepare_gemm_operand(c, constant_inputs, kernels::prepare_linear_weight);
}

// act(x W^T + bias + residual) as one GEMM with its epilogue on the weight packed at preparation
// when there is one (kernels::linear_fused_out): the operands' own memory, no view objects,
// nothing allocated per call.
// linear and linear_fused: the input read, or computed by a generated prologue.
void linear_or_prologue(const KernelCall& c, const TensorImpl* residual,
                        const kernels::Epilogue& e) {
  const auto* packed = static_cast<const kernels::SgemmPacked*>(c.prepared);
  if (c.prologue_fn)
    kernels::linear_prologue_out(in(c, 0).sizes(), block_prologue(c), in(c, 1), opt_in(c, 2),
                                 residual, e, out(c), packed);
  else
    kernels::linear_fused_out(in(c, 0), in(c, 1), opt_in(c, 2), residual, e, out(c), packed);
}
void run_linear(const KernelCall& c) {
  kernels::Epilogue e;
  e.block = block_epilogue(c);
  linear_or_prologue(c, nullptr, e);
}

struct LinearParams : KernelParams {
  Fusion fusion;
};
std::unique_ptr<KernelParams> decode_linear_fused(const AttrMap& a) {
  auto p = std::make_unique<LinearParams>();
  p->fusion = decode_fusion(a);
  return p;
}
void run_linear_fused(const KernelCall& c) {
  const Fusion& f = params<LinearParams>(c).fusion;
  kernels::Epilogue e;
  e.activation = f.activation;
  e.clamp_min = f.clamp_min;
  e.clamp_max = f.clamp_max;
  e.block = block_epilogue(c);
  linear_or_prologue(c, opt_in(c, 3), e);
}

struct AttentionParams : KernelParams {
  double scale = 1.0;
  bool seq_first = false;
};
std::unique_ptr<KernelParams> decode_attention(const AttrMap& a) {
  auto p = std::make_unique<AttentionParams>();
  p->scale = a.f("scale");
  p->seq_first = a.b("seq_first");
  return p;
}
void run_attention(const KernelCall& c) {
  const auto& p = params<AttentionParams>(c);
  kernels::attention_out(in(c, 0), in(c, 1), in(c, 2), opt_in(c, 3), p.scale, p.seq_first, out(c));
}

void run_matmul(const KernelCall& c) {
  if (c.prologue_fn) {
    kernels::matmul_prologue_out(in(c, 0).sizes(), block_prologue(c), in(c, 1), out(c),
                                 block_epilogue(c),
                                 static_cast<const kernels::SgemmPacked*>(c.prepared));
    return;
  }
  if (c.block_fn) {
    kernels::matmul_epilogue_out(in(c, 0), in(c, 1), out(c), block_epilogue(c),
                                 static_cast<const kernels::SgemmPacked*>(c.prepared));
    return;
  }
  if (c.prepared &&
      kernels::matmul_packed_out(in(c, 0), in(c, 1),
                                 *static_cast<const kernels::SgemmPacked*>(c.prepared), out(c)))
    return;
  kernels::matmul_out(in(c, 0), in(c, 1), out(c));
}
PreparedInputs prepare_matmul(const KernelCall& c, uint32_t constant_inputs) {
  return prepare_gemm_operand(c, constant_inputs, kernels::prepare_matmul_operand);
}

std::unique_ptr<KernelParams> decode_pool(const AttrMap& a) {
  auto p = std::make_unique<PoolParams>();
  p->p = pool2d_params(a);
  return p;
}
void run_max_pool2d(const KernelCall& c) {
  TensorImpl* indices = c.outputs.size() > 1 ? c.outputs[1] : nullptr;  // null: discarded
  kernels::max_pool2d_out(in(c, 0), params<PoolParams>(c).p, out(c), indices);
}
void run_avg_pool2d(const KernelCall& c) {
  kernels::avg_pool2d_out(in(c, 0), params<PoolParams>(c).p, out(c));
}
void run_adaptive_avg_pool2d(const KernelCall& c) {
  kernels::adaptive_avg_pool2d_out(in(c, 0), out(c));
}

std::unique_ptr<KernelParams> decode_batch_norm(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f("eps");
  p->v[1] = a.f("momentum");
  p->k = a.b("training") ? 1 : 0;
  return p;
}
void run_batch_norm(const KernelCall& c) {
  // Operands: input, running_mean, running_var, weight, bias. An artifact never mutates its
  // operands: in training mode the batch statistics are used and the running ones left alone.
  const auto& p = params<FloatParams>(c);
  const bool training = p.k != 0;
  kernels::batch_norm_out(in(c, 0), opt_in(c, 3), opt_in(c, 4), training ? nullptr : c.inputs[1],
                          training ? nullptr : c.inputs[2], training, p.v[1], p.v[0], out(c),
                          nullptr, nullptr);
}

std::unique_ptr<KernelParams> decode_layer_norm(const AttrMap& a) {
  auto p = std::make_unique<DimsParams>();
  auto s = a.ints("normalized_shape");
  KILN_CHECK(s.size() <= 6, "layer_norm", "expected at most 6 normalized dims, got ", s.size());
  p->dims = Dims(std::vector<int64_t>(s.begin(), s.end()));
  p->f = a.f("eps");
  return p;
}
// (grad, input, weight?) -> (grad_input, grad_weight, grad_bias); statistics recomputed.
void run_layer_norm_backward(const KernelCall& c) {
  const auto& p = params<DimsParams>(c);
  kernels::layer_norm_backward_recompute_out(in(c, 0), in(c, 1), p.dims, opt_in(c, 2), p.f,
                                             c.outputs[0], c.outputs[1], c.outputs[2]);
}
void run_layer_norm(const KernelCall& c) {
  const auto& p = params<DimsParams>(c);
  kernels::layer_norm_out(in(c, 0), p.dims, opt_in(c, 1), opt_in(c, 2), p.f, out(c), nullptr,
                          nullptr);
}

std::unique_ptr<KernelParams> decode_group_norm(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->k = a.i("num_groups");
  p->v[0] = a.f("eps");
  return p;
}
void run_group_norm_backward(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  kernels::group_norm_backward_recompute_out(in(c, 0), in(c, 1), p.k, opt_in(c, 2), p.v[0],
                                             c.outputs[0], c.outputs[1], c.outputs[2]);
}
void run_group_norm(const KernelCall& c) {
  const auto& p = params<FloatParams>(c);
  kernels::group_norm_out(in(c, 0), p.k, opt_in(c, 1), opt_in(c, 2), p.v[0], out(c), nullptr,
                          nullptr);
}

struct ConvTransposeParams : KernelParams {
  kernels::ConvTranspose2dParams p;
};
std::unique_ptr<KernelParams> decode_conv_transpose2d(const AttrMap& a) {
  auto p = std::make_unique<ConvTransposeParams>();
  auto s = a.ints("stride", 2), pad = a.ints("padding", 2), op = a.ints("output_padding", 2);
  auto d = a.ints("dilation", 2);
  p->p = {s[0], s[1], pad[0], pad[1], op[0], op[1], d[0], d[1], a.i("groups")};
  return p;
}
void run_conv_transpose2d_backward(const KernelCall& c) {
  kernels::conv_transpose2d_backward_out(in(c, 0), in(c, 1), in(c, 2),
                                         params<ConvTransposeParams>(c).p, c.outputs[0],
                                         c.outputs[1], c.outputs[2]);
}
void run_conv_transpose2d(const KernelCall& c) {
  kernels::conv_transpose2d_out(in(c, 0), in(c, 1), opt_in(c, 2), params<ConvTransposeParams>(c).p,
                                out(c));
}

struct InterpolateParams : KernelParams {
  kernels::InterpolateParams p;
};
std::unique_ptr<KernelParams> decode_interpolate(const AttrMap& a) {
  auto p = std::make_unique<InterpolateParams>();
  p->p.mode = static_cast<kernels::InterpolateMode>(a.i("mode"));  // the kernel checks it
  p->p.align_corners = a.b("align_corners");
  p->p.scale_h = a.f("scale_h");
  p->p.scale_w = a.f("scale_w");
  return p;
}
void run_interpolate(const KernelCall& c) {
  kernels::interpolate_out(in(c, 0), params<InterpolateParams>(c).p, out(c));
}
void run_interpolate_backward(const KernelCall& c) {
  kernels::interpolate_backward_out(in(c, 0), params<InterpolateParams>(c).p, out(c));
}

std::unique_ptr<KernelParams> decode_embedding_backward(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("padding_idx");
  return p;
}
// (grad, indices) -> grad_weight; padding_idx -1: none.
void run_embedding_backward(const KernelCall& c) {
  const int64_t pad = params<IntParams>(c).v[0];
  kernels::embedding_backward_out(
      in(c, 0), in(c, 1), pad < 0 ? std::nullopt : std::optional<int64_t>(pad), false, out(c));
}
void run_embedding(const KernelCall& c) {
  kernels::embedding_out(in(c, 0), in(c, 1), out(c));
}

std::unique_ptr<KernelParams> decode_p(const AttrMap& a) {
  auto p = std::make_unique<FloatParams>();
  p->v[0] = a.f("p");
  return p;
}
void run_dropout(const KernelCall& c) {
  kernels::dropout_out(in(c, 0), in(c, 1), params<FloatParams>(c).v[0], out(c));
}

std::unique_ptr<KernelParams> decode_dim(const AttrMap& a) {
  auto p = std::make_unique<IntParams>();
  p->v[0] = a.i("dim");
  return p;
}
void run_softmax(const KernelCall& c) {
  kernels::softmax_out(in(c, 0), params<IntParams>(c).v[0], out(c));
}
void run_log_softmax(const KernelCall& c) {
  kernels::log_softmax_out(in(c, 0), params<IntParams>(c).v[0], out(c));
}

}  // namespace

kernels::Conv2dParams conv2d_params(const AttrMap& a) {
  auto s = a.ints("stride", 2), pad = a.ints("padding", 2), d = a.ints("dilation", 2);
  return {s[0], s[1], pad[0], pad[1], d[0], d[1], a.i("groups")};
}

kernels::Pool2dParams pool2d_params(const AttrMap& a) {
  kernels::Pool2dParams p;
  auto k = a.ints("kernel", 2), s = a.ints("stride", 2), pad = a.ints("padding", 2);
  p.kernel_h = k[0];
  p.kernel_w = k[1];
  p.stride_h = s[0];
  p.stride_w = s[1];
  p.pad_h = pad[0];
  p.pad_w = pad[1];
  if (a.op() == "max_pool2d") {
    auto d = a.ints("dilation", 2);
    p.dilation_h = d[0];
    p.dilation_w = d[1];
  } else {
    p.count_include_pad = a.b("count_include_pad");
  }
  p.ceil_mode = a.b("ceil_mode");
  return p;
}

void register_nn(Registry& r) {
  r.add(with_signature({.name = "conv2d",
                        .decode = decode_conv2d,
                        .run = run_conv2d,
                        .prepare = prepare_conv2d,
                        .block_epilogue = true}));
  r.add(with_signature({.name = "conv2d_fused",
                        .decode = decode_conv2d,
                        .run = run_conv2d,
                        .prepare = prepare_conv2d,
                        .block_epilogue = true}));
  r.add(with_signature({.name = "conv2d_avgpool",
                        .decode = decode_conv2d,
                        .run = run_conv2d_avgpool,
                        .prepare = prepare_conv2d}));
  // Optional: expand_weight, expand_bias, dw_bias, project_bias, residual.
  r.add(with_signature(
      {.name = "mbconv", .decode = decode_mbconv, .run = run_mbconv, .prepare = prepare_mbconv}));
  r.add(with_signature({.name = "conv1d", .decode = decode_conv1d, .run = run_conv1d}));
  r.add(with_signature(
      {.name = "conv1d_backward", .decode = decode_conv1d, .run = run_conv1d_backward}));
  r.add(with_signature({.name = "conv_transpose2d_backward",
                        .decode = decode_conv_transpose2d,
                        .run = run_conv_transpose2d_backward}));
  r.add(with_signature({.name = "layer_norm_backward",
                        .decode = decode_layer_norm,
                        .run = run_layer_norm_backward}));
  r.add(with_signature({.name = "group_norm_backward",
                        .decode = decode_group_norm,
                        .run = run_group_norm_backward}));
  r.add(with_signature({.name = "embedding_backward",
                        .decode = decode_embedding_backward,
                        .run = run_embedding_backward}));
  r.add(with_signature({.name = "conv_transpose2d",
                        .decode = decode_conv_transpose2d,
                        .run = run_conv_transpose2d}));
  r.add(with_signature(
      {.name = "interpolate", .decode = decode_interpolate, .run = run_interpolate}));
  r.add(with_signature({.name = "interpolate_backward",
                        .decode = decode_interpolate,
                        .run = run_interpolate_backward}));
  r.add(with_signature({.name = "linear",
                        .run = run_linear,
                        .prepare = prepare_linear,
                        .block_epilogue = true,
                        .block_prologue = true}));
  r.add(with_signature({.name = "linear_fused",
                        .decode = decode_linear_fused,
                        .run = run_linear_fused,
                        .prepare = prepare_linear,
                        .block_epilogue = true,
                        .block_prologue = true}));
  r.add(with_signature({.name = "matmul",
                        .run = run_matmul,
                        .prepare = prepare_matmul,
                        .block_epilogue = true,
                        .block_prologue = true}));
  r.add(with_signature({.name = "attention", .decode = decode_attention, .run = run_attention}));
  // Indices are only computed when something reads them (training); inference discards them.
  r.add(with_signature({.name = "max_pool2d",
                        .decode = decode_pool,
                        .run = run_max_pool2d,
                        .optional_outputs = 0b10}));
  r.add(with_signature({.name = "avg_pool2d", .decode = decode_pool, .run = run_avg_pool2d}));
  r.add(with_signature({.name = "adaptive_avg_pool2d", .run = run_adaptive_avg_pool2d}));
  r.add(with_signature({.name = "batch_norm", .decode = decode_batch_norm, .run = run_batch_norm}));
  r.add(with_signature({.name = "layer_norm", .decode = decode_layer_norm, .run = run_layer_norm}));
  r.add(with_signature({.name = "group_norm", .decode = decode_group_norm, .run = run_group_norm}));
  r.add(with_signature({.name = "embedding", .run = run_embedding}));
  r.add(with_signature({.name = "dropout", .decode = decode_p, .run = run_dropout}));
  r.add(with_signature({.name = "softmax", .decode = decode_dim, .run = run_softmax}));
  r.add(with_signature({.name = "log_softmax", .decode = decode_dim, .run = run_log_softmax}));
}

}  // namespace kiln::rt::ops

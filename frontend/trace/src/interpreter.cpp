// The reference interpreter: runs @forward op by op through the eager ops (and so the same runtime
// kernels eager mode uses). Slow but simple; it is the oracle passes and codegen are checked
// against.

#include <functional>

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"

#include "interpreter_kernels.h"
#include "kiln/autograd.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/nn_ops.h"
#include "kiln/ops.h"
#include "kiln/quant.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/embedding.h"
#include "kiln/runtime/kernels/guard.h"
#include "kiln/runtime/kernels/interpolate.h"
#include "kiln/runtime/kernels/loss.h"
#include "kiln/runtime/kernels/mbconv.h"
#include "kiln/runtime/kernels/norm.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/kernels/random.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "types.h"

namespace kiln::jit {
using namespace interp;
namespace {

// A frozen weight (dense resource blob): read in place, no copy. The blob's owner (the caller of
// freeze, or the module for folded weights) keeps the bytes alive while the module runs.
Tensor resource_value(mlir::Operation* op, mlir::DenseResourceElementsAttr attr) {
  mlir::AsmResourceBlob* blob = attr.getRawHandle().getBlob();
  KILN_CHECK(blob, "kiln.constant", "resource '", attr.getRawHandle().getKey().str(),
             "' has no data (the module was printed or parsed without its resources)");
  Tensor like = result_like(op, 0);
  const size_t want = static_cast<size_t>(like.numel()) * like.element_size();
  KILN_CHECK(blob->getData().size() == want, "kiln.constant", "resource '",
             attr.getRawHandle().getKey().str(), "' holds ", blob->getData().size(),
             " bytes, expected ", want, " for ", like.sizes(), " ", dtype_short_name(like.dtype()));
  return from_blob(const_cast<char*>(blob->getData().data()), like.sizes(),
                   TensorOptions(like.dtype()));
}

// A random op: draws into a fresh result from the (seed, offset) state operand and returns the
// advanced state, exactly as the eager op advanced the default generator.
template <typename Draw>
TensorList draw(const Tensor& state, mlir::Operation* op, Draw&& fill) {
  KILN_CHECK(state.numel() == 2 && state.dtype() == DType::Int64,
             op->getName().getStringRef().str(), "expected a [2] i64 generator state, got ",
             state.sizes(), " ", dtype_short_name(state.dtype()));
  Tensor s = state.contiguous();
  Generator gen(static_cast<uint64_t>(s.data_ptr<int64_t>()[0]),
                static_cast<uint64_t>(s.data_ptr<int64_t>()[1]));
  Tensor out = result_like(op, 0);
  fill(*out.impl(), gen);
  Tensor next = s.clone();
  next.data_ptr<int64_t>()[1] = static_cast<int64_t>(gen.offset());
  return TensorList{out, next};
}

// The runtime's kernels::Activation on eager ops (linear_fused's epilogue).
Tensor activate(const Tensor& x, const Attrs& a) {
  switch (static_cast<kernels::Activation>(a.i("activation"))) {
    case kernels::Activation::None:
      return x;
    case kernels::Activation::Relu:
      return relu(x);
    case kernels::Activation::Relu6:
      return clamp(x, 0.0, 6.0);
    case kernels::Activation::Clamp:
      return clamp(x, a.f("clamp_min"), a.f("clamp_max"));
    case kernels::Activation::Gelu:
      return gelu(x, false);
    case kernels::Activation::GeluTanh:
      return gelu(x, true);
    case kernels::Activation::Silu:
      return silu(x);
    case kernels::Activation::Sigmoid:
      return sigmoid(x);
    case kernels::Activation::Tanh:
      return tanh(x);
  }
  fail(a.op_name(), "unknown activation ", a.i("activation"));
}

// conv2d_fused's and conv2d_avgpool's attributes: the convolution and its activation.
kernels::Conv2dParams conv2d_attrs(const Attrs& a, kernels::ConvEpilogue& e) {
  const int64_t act = a.i("activation");
  KILN_CHECK(act >= 0 && act <= static_cast<int64_t>(kernels::Activation::Tanh), a.op_name(),
             "activation must be in [0, 8], got ", act);
  kernels::Conv2dParams p;
  Pair2 stride = a.pair("stride"), padding = a.pair("padding"), dilation = a.pair("dilation");
  p.stride_h = stride.h, p.stride_w = stride.w;
  p.pad_h = padding.h, p.pad_w = padding.w;
  p.dilation_h = dilation.h, p.dilation_w = dilation.w;
  p.groups = a.i("groups");
  e.activation = static_cast<kernels::Activation>(act);
  e.clamp_min = static_cast<float>(a.f("clamp_min"));
  e.clamp_max = static_cast<float>(a.f("clamp_max"));
  return p;
}

// act(conv2d(x, w) + bias + residual) in one runtime kernel call, as the artifact executor runs it.
Tensor conv2d_fused(const TensorList& x, const Attrs& a, mlir::Operation* op) {
  kernels::ConvEpilogue e;
  const kernels::Conv2dParams p = conv2d_attrs(a, e);
  Tensor out = result_like(op, 0);
  KILN_CHECK(out.sizes() == Dims(kernels::conv2d_output_shape(x[0].sizes(), x[1].sizes(), p)),
             a.op_name(), "result type ", out.sizes(), " does not match the convolution");
  e.residual = x[3].defined() ? x[3].impl() : nullptr;
  kernels::conv2d_out(*x[0].impl(), *x[1].impl(), x[2].defined() ? x[2].impl() : nullptr, p,
                      *out.impl(), e);
  return out;
}

// The mean over each output plane of act(conv2d(x, w) + bias), as the executor runs it.
Tensor conv2d_avgpool(const TensorList& x, const Attrs& a, mlir::Operation* op) {
  kernels::ConvEpilogue e;
  const kernels::Conv2dParams p = conv2d_attrs(a, e);
  Tensor out = result_like(op, 0);
  KILN_CHECK(
      out.sizes() == Dims(kernels::conv2d_avgpool_output_shape(x[0].sizes(), x[1].sizes(), p)),
      a.op_name(), "result type ", out.sizes(), " does not match the pooled convolution");
  kernels::conv2d_avgpool_out(*x[0].impl(), *x[1].impl(), x[2].defined() ? x[2].impl() : nullptr, p,
                              *out.impl(), e, nullptr);
  return out;
}

// The fused inverted-residual block through the runtime kernel the executor and compiled code
// call (kernels/mbconv.h); operands as kiln.mbconv lists them.
Tensor mbconv(const TensorList& x, const Attrs& a, mlir::Operation* op) {
  kernels::MBConvParams p;
  const Pair2 stride = a.pair("stride"), padding = a.pair("padding");
  p.stride_h = stride.h, p.stride_w = stride.w, p.pad_h = padding.h, p.pad_w = padding.w;
  auto epilogue = [&](const std::string& step) {
    const int64_t act = a.i((step + "_activation").c_str());
    KILN_CHECK(act >= 0 && act <= static_cast<int64_t>(kernels::Activation::Tanh), a.op_name(),
               step, "_activation must be in [0, 8], got ", act);
    kernels::ConvEpilogue e;
    e.activation = static_cast<kernels::Activation>(act);
    e.clamp_min = static_cast<float>(a.f((step + "_clamp_min").c_str()));
    e.clamp_max = static_cast<float>(a.f((step + "_clamp_max").c_str()));
    return e;
  };
  p.expand = epilogue("expand"), p.dw = epilogue("dw"), p.project = epilogue("project");
  p.input_channels_last = a.b("channels_last_in");
  p.output_channels_last = a.b("channels_last_out");
  // Absent (modules written before kiln.mbconv recorded it): the enum's first value, banded.
  const auto strategy = mlir::cast<ir::MbconvOp>(op).getStrategy();
  p.strategy =
      kernels::mbconv_strategy(strategy ? static_cast<int64_t>(*strategy) : 0, a.op_name());
  auto opt = [&](size_t i) { return x[i].defined() ? x[i].impl() : nullptr; };
  kernels::MBConvOperands o;
  o.input = x[0].impl(), o.expand_weight = opt(1), o.expand_bias = opt(2);
  o.dw_weight = x[3].impl(), o.dw_bias = opt(4), o.project_weight = x[5].impl();
  o.project_bias = opt(6), o.residual = opt(7);
  Tensor out = result_like(op, 0);
  KILN_CHECK(out.sizes() == kernels::mbconv_output_shape(o, p), a.op_name(), "result type ",
             out.sizes(), " does not match the block");
  kernels::mbconv_out(o, p, *out.impl());
  return out;
}

// act(x W^T + bias + residual): float32 through one sgemm call with the runtime's epilogue (the
// kernel the compiled code calls), other dtypes through the eager ops.
Tensor linear_fused(const TensorList& x, const Attrs& a, mlir::Operation* op) {
  const int64_t act = a.i("activation");
  KILN_CHECK(act >= 0 && act <= static_cast<int64_t>(kernels::Activation::Tanh), a.op_name(),
             "activation must be in [0, 8], got ", act);
  const bool f32 = x[0].dtype() == DType::Float32 && x[1].dtype() == DType::Float32 &&
                   (!x[2].defined() || x[2].dtype() == DType::Float32) &&
                   (!x[3].defined() || x[3].dtype() == DType::Float32);
  if (!f32) {
    Tensor y = linear(x[0], x[1], x[2]);
    if (x[3].defined()) y = y + x[3];
    return activate(y, a);
  }
  Tensor out = result_like(op, 0);
  Tensor input = x[0].contiguous(), weight = x[1].contiguous();
  const int64_t K = weight.size(1), N = weight.size(0), M = N == 0 ? 0 : out.numel() / N;
  KILN_CHECK(input.size(-1) == K && out.size(-1) == N, a.op_name(), "input ", input.sizes(),
             " and weight ", weight.sizes(), " do not give the result ", out.sizes());
  Tensor bias = x[2].defined() ? x[2].contiguous() : Tensor();
  Tensor residual = x[3].defined() ? x[3].contiguous() : Tensor();
  kernels::Epilogue e;
  if (bias.defined()) {
    e.bias_kind = kernels::Epilogue::Bias::PerCol;
    e.bias = bias.data_ptr<float>();
  }
  if (residual.defined()) {
    e.residual = residual.data_ptr<float>();
    e.ld_residual = N;
  }
  e.activation = static_cast<kernels::Activation>(act);
  e.clamp_min = static_cast<float>(a.f("clamp_min"));
  e.clamp_max = static_cast<float>(a.f("clamp_max"));
  kernels::sgemm(false, true, M, N, K, 1.0f, input.data_ptr<float>(), K, weight.data_ptr<float>(),
                 K, 0.0f, out.data_ptr<float>(), N, e);
  return out;
}

// softmax(scale · q kᵀ + mask) · v through the eager ops (the fused kernel's reference).
Tensor attention(const TensorList& x, const Attrs& a) {
  const bool seq_first = a.b("seq_first");
  // seq_first: the sequence dim before the (inner) batch dim, the third and second from last.
  auto batch_major = [&](const Tensor& t) { return seq_first ? t.transpose(-3, -2) : t; };
  Tensor scores = matmul(batch_major(x[0]), batch_major(x[1]).transpose(-2, -1)) * a.f("scale");
  if (x[3].defined()) scores = scores + x[3];
  Tensor out = matmul(softmax(scores, -1), batch_major(x[2]));
  return seq_first ? out.transpose(-3, -2).contiguous() : out;
}

const KernelTable& kernels();

// kiln.fused: the body runs op by op on the region's arguments, exactly as if inlined.
using Env = llvm::DenseMap<mlir::Value, Tensor>;
TensorList run_block(mlir::Block& block, Env& env);

TensorList run_fused(const TensorList& x, mlir::Operation* op) {
  mlir::Block& body = op->getRegion(0).front();
  Env env;  // isolated from above: the body sees only its arguments
  for (unsigned i = 0; i < body.getNumArguments(); ++i) env[body.getArgument(i)] = x[i];
  return run_block(body, env);
}

const KernelTable& kernels() {
  using L = const TensorList&;
  using A = const Attrs&;
  using O = mlir::Operation*;
  static const KernelTable table = [] {
    KernelTable t = {
      {id<ir::AddOp>(), [](L x, A a, O) { return TensorList{add(x[0], x[1], a.f("alpha", 1.0))}; }},
      {id<ir::SubOp>(), [](L x, A a, O) { return TensorList{sub(x[0], x[1], a.f("alpha", 1.0))}; }},
      {id<ir::MulOp>(), [](L x, A, O) { return TensorList{mul(x[0], x[1])}; }},
      {id<ir::DivOp>(), [](L x, A, O) { return TensorList{div(x[0], x[1])}; }},
      {id<ir::PowOp>(), [](L x, A, O) { return TensorList{pow(x[0], x[1])}; }},
      {id<ir::MaximumOp>(), [](L x, A, O) { return TensorList{maximum(x[0], x[1])}; }},
      {id<ir::MinimumOp>(), [](L x, A, O) { return TensorList{minimum(x[0], x[1])}; }},
      {id<ir::EqOp>(), [](L x, A, O) { return TensorList{eq(x[0], x[1])}; }},
      {id<ir::NeOp>(), [](L x, A, O) { return TensorList{ne(x[0], x[1])}; }},
      {id<ir::LtOp>(), [](L x, A, O) { return TensorList{lt(x[0], x[1])}; }},
      {id<ir::LeOp>(), [](L x, A, O) { return TensorList{le(x[0], x[1])}; }},
      {id<ir::GtOp>(), [](L x, A, O) { return TensorList{gt(x[0], x[1])}; }},
      {id<ir::GeOp>(), [](L x, A, O) { return TensorList{ge(x[0], x[1])}; }},
      {id<ir::LogicalAndOp>(), [](L x, A, O) { return TensorList{logical_and(x[0], x[1])}; }},
      {id<ir::LogicalOrOp>(), [](L x, A, O) { return TensorList{logical_or(x[0], x[1])}; }},
    // The unary family: the eager function of each op's name (generated from ir/ops.toml).
#include "kiln/ir/KilnInterpreterUnary.inc"
      {id<ir::GeluOp>(), [](L x, A a, O) { return TensorList{gelu(x[0], a.b("approximate"))}; }},
      {id<ir::LeakyReluOp>(),
       [](L x, A a, O) { return TensorList{leaky_relu(x[0], a.f("negative_slope"))}; }},
      {id<ir::ClampOp>(),
       [](L x, A a, O) {
         const double lo = a.f("min", -INFINITY), hi = a.f("max", INFINITY);
         return TensorList{clamp(x[0], std::isinf(lo) ? std::nullopt : std::optional(lo),
                                 std::isinf(hi) ? std::nullopt : std::optional(hi))};
       }},
      {id<ir::ToOp>(), [](L x, A, O op) { return TensorList{x[0].to(result_like(op, 0).dtype())}; }},
      {id<ir::WhereOp>(), [](L x, A, O) { return TensorList{where(x[0], x[1], x[2])}; }},
      {id<ir::FillOp>(),
       [](L x, A a, O) { return TensorList{full_like(x[0], a.f("value"))}; }},
      {id<ir::CopyOp>(),
       [](L x, A, O) {
         Tensor out = x[0].clone();
         copy_(out, x[1]);
         return TensorList{out};
       }},
      {id<ir::SumOp>(), [](L x, A a, O) { return TensorList{sum(x[0], a.dims("dims"), a.b("keepdim"))}; }},
      {id<ir::MeanOp>(), [](L x, A a, O) { return TensorList{mean(x[0], a.dims("dims"), a.b("keepdim"))}; }},
      {id<ir::ProdOp>(), [](L x, A a, O) { return TensorList{prod(x[0], a.dims("dims"), a.b("keepdim"))}; }},
      {id<ir::AmaxOp>(), [](L x, A a, O) { return TensorList{amax(x[0], a.dims("dims"), a.b("keepdim"))}; }},
      {id<ir::AminOp>(), [](L x, A a, O) { return TensorList{amin(x[0], a.dims("dims"), a.b("keepdim"))}; }},
      {id<ir::MaxOp>(),
       [](L x, A a, O) {
         auto [v, i] = max(x[0], a.i("dim"), a.b("keepdim"));
         return TensorList{v, i};
       }},
      {id<ir::MinOp>(),
       [](L x, A a, O) {
         auto [v, i] = min(x[0], a.i("dim"), a.b("keepdim"));
         return TensorList{v, i};
       }},
      {id<ir::ArgmaxOp>(),
       [](L x, A a, O) {
         const int64_t d = a.i("dim");
         return TensorList{argmax(x[0], d == INT64_MIN ? std::nullopt : std::optional(d),
                                  a.b("keepdim"))};
       }},
      {id<ir::ArgminOp>(),
       [](L x, A a, O) {
         const int64_t d = a.i("dim");
         return TensorList{argmin(x[0], d == INT64_MIN ? std::nullopt : std::optional(d),
                                  a.b("keepdim"))};
       }},
      {id<ir::VarOp>(),
       [](L x, A a, O) {
         return TensorList{var(x[0], a.dims("dims"), a.b("unbiased"), a.b("keepdim"))};
       }},
      {id<ir::NormOp>(),
       [](L x, A a, O) { return TensorList{norm(x[0], a.f("p"), a.dims("dims"), a.b("keepdim"))}; }},
      {id<ir::LogsumexpOp>(),
       [](L x, A a, O) { return TensorList{logsumexp(x[0], a.dims("dims"), a.b("keepdim"))}; }},
      {id<ir::SoftmaxOp>(), [](L x, A a, O) { return TensorList{softmax(x[0], a.i("dim"))}; }},
      {id<ir::LogSoftmaxOp>(), [](L x, A a, O) { return TensorList{log_softmax(x[0], a.i("dim"))}; }},
      {id<ir::GuardOp>(),
       [](L x, A a, O) {
         kernels::guard(*x[0].impl(), a.f("value"), a.s("where"));
         return TensorList{};
       }},
      {id<ir::CumsumOp>(), [](L x, A a, O) { return TensorList{cumsum(x[0], a.i("dim"))}; }},
      {id<ir::ViewOp>(), [](L x, A a, O) { return TensorList{x[0].reshape(a.dims("shape"))}; }},
      {id<ir::ReshapeOp>(), [](L x, A a, O) { return TensorList{x[0].reshape(a.dims("shape"))}; }},
      {id<ir::TransposeOp>(),
       [](L x, A a, O) { return TensorList{x[0].transpose(a.i("dim0"), a.i("dim1"))}; }},
      {id<ir::PermuteOp>(), [](L x, A a, O) { return TensorList{x[0].permute(a.dims("dims"))}; }},
      {id<ir::SliceOp>(),
       [](L x, A a, O) {
         return TensorList{x[0].slice(a.i("dim"), a.i("start"), a.i("end"), a.i("step"))};
       }},
      {id<ir::SelectOp>(), [](L x, A a, O) { return TensorList{x[0].select(a.i("dim"), a.i("index"))}; }},
      {id<ir::ExpandOp>(), [](L x, A a, O) { return TensorList{x[0].expand(a.dims("shape"))}; }},
      {id<ir::AsStridedOp>(),
       [](L x, A a, O) {
         Tensor c = x[0].contiguous();
         return TensorList{c.as_strided(a.dims("sizes"), a.dims("strides"),
                                        c.storage_offset() + a.i("offset"))};
       }},
      {id<ir::MatmulOp>(), [](L x, A, O) { return TensorList{matmul(x[0], x[1])}; }},
      {id<ir::LinearOp>(), [](L x, A, O) { return TensorList{linear(x[0], x[1], x[2])}; }},
      {id<ir::Conv2dOp>(),
       [](L x, A a, O) {
         return TensorList{conv2d(x[0], x[1], x[2], a.pair("stride"), a.pair("padding"),
                                  a.pair("dilation"), a.i("groups"))};
       }},
      {id<ir::Conv1dOp>(),
       [](L x, A a, O) {
         return TensorList{conv1d(x[0], x[1], x[2], a.i("stride"), a.i("padding"),
                                  a.i("dilation"), a.i("groups"))};
       }},
      {id<ir::ConvTranspose2dOp>(),
       [](L x, A a, O) {
         return TensorList{conv_transpose2d(x[0], x[1], x[2], a.pair("stride"), a.pair("padding"),
                                            a.pair("output_padding"), a.i("groups"),
                                            a.pair("dilation"))};
       }},
      {id<ir::MaxPool2dOp>(),
       [](L x, A a, O) {
         auto [v, i] = max_pool2d_with_indices(x[0], a.pair("kernel"), a.pair("stride"),
                                               a.pair("padding"), a.pair("dilation"),
                                               a.b("ceil_mode"));
         return TensorList{v, i};
       }},
      {id<ir::AvgPool2dOp>(),
       [](L x, A a, O) {
         return TensorList{avg_pool2d(x[0], a.pair("kernel"), a.pair("stride"), a.pair("padding"),
                                      a.b("ceil_mode"), a.b("count_include_pad"))};
       }},
      {id<ir::AdaptiveAvgPool2dOp>(),
       [](L x, A a, O) { return TensorList{adaptive_avg_pool2d(x[0], a.pair("output_size"))}; }},
      {id<ir::BatchNormOp>(),
       [](L x, A a, O) {
         // Running statistics are updated on copies: interpreting never mutates its arguments.
         Tensor rm = x[1].defined() ? x[1].clone() : Tensor();
         Tensor rv = x[2].defined() ? x[2].clone() : Tensor();
         return TensorList{batch_norm(x[0], rm, rv, x[3], x[4], a.b("training"),
                                      a.f("momentum"), a.f("eps"))};
       }},
      {id<ir::BatchNormUpdateStatsOp>(),
       [](L x, A a, O op) {
         Tensor rm = result_like(op, 0), rv = result_like(op, 1);
         kernels::batch_norm_update_stats_out(*x[0].impl(), *x[1].impl(), *x[2].impl(),
                                              a.f("momentum"), *rm.impl(), *rv.impl());
         return TensorList{rm, rv};
       }},
      {id<ir::InterpolateOp>(),
       [](L x, A a, O op) {
         // The result type's size, or the scale factors it came from (same size, same step).
         const auto shape = mlir::cast<mlir::RankedTensorType>(op->getResult(0).getType()).getShape();
         InterpolateOptions o;
         o.mode(a.i("mode") == 1 ? InterpolateMode::Bilinear : InterpolateMode::Nearest);
         if (a.b("align_corners")) o.align_corners(true);
         const double sh = a.f("scale_h"), sw = a.f("scale_w");
         if (sh > 0 && sw > 0) {
           o.scale_factor({sh, sw});
         } else {
           KILN_CHECK(shape.size() == 4, "kiln.interpolate", "expected a 4-d result, got rank ",
                      shape.size());
           o.size({shape[2], shape[3]});
         }
         Tensor y = interpolate(x[0], o);
         KILN_CHECK(y.sizes() == Dims(std::vector<int64_t>(shape.begin(), shape.end())),
                    "kiln.interpolate", "the result type's shape differs from the computed ",
                    y.sizes());
         return TensorList{y};
       }},
      {id<ir::LayerNormOp>(),
       [](L x, A a, O) {
         return TensorList{layer_norm(x[0], a.dims("normalized_shape"), x[1], x[2], a.f("eps"))};
       }},
      {id<ir::GroupNormOp>(),
       [](L x, A a, O) {
         return TensorList{group_norm(x[0], a.i("num_groups"), x[1], x[2], a.f("eps"))};
       }},
      {id<ir::EmbeddingOp>(),
       [](L x, A a, O) {
         const int64_t p = a.i("padding_idx");
         return TensorList{embedding(x[0], x[1], p < 0 ? std::nullopt : std::optional(p))};
       }},
      {id<ir::CrossEntropyOp>(),
       [](L x, A a, O) {
         return TensorList{cross_entropy(x[0], x[1], x[2], a.i("ignore_index"), reduction(a),
                                         a.f("label_smoothing"))};
       }},
      {id<ir::NllLossOp>(),
       [](L x, A a, O) {
         return TensorList{nll_loss(x[0], x[1], x[2], a.i("ignore_index"), reduction(a))};
       }},
      {id<ir::MseLossOp>(), [](L x, A a, O) { return TensorList{mse_loss(x[0], x[1], reduction(a))}; }},
      {id<ir::SmoothL1LossOp>(),
       [](L x, A a, O) {
         return TensorList{smooth_l1_loss(x[0], x[1], reduction(a), a.f("beta"))};
       }},
      {id<ir::BinaryCrossEntropyWithLogitsOp>(),
       [](L x, A a, O) {
         return TensorList{
             binary_cross_entropy_with_logits(x[0], x[1], x[2], x[3], reduction(a))};
       }},
      {id<ir::IndexSelectOp>(),
       [](L x, A a, O) { return TensorList{index_select(x[0], a.i("dim"), x[1])}; }},
      {id<ir::IndexAddOp>(),
       [](L x, A a, O) {
         return TensorList{index_add(x[0], a.i("dim"), x[1], x[2], a.f("alpha", 1.0))};
       }},
      {id<ir::IndexCopyOp>(),
       [](L x, A a, O) { return TensorList{index_copy(x[0], a.i("dim"), x[1], x[2])}; }},
      {id<ir::GatherOp>(), [](L x, A a, O) { return TensorList{gather(x[0], a.i("dim"), x[1])}; }},
      {id<ir::ScatterOp>(),
       [](L x, A a, O) { return TensorList{scatter(x[0], a.i("dim"), x[1], x[2])}; }},
      {id<ir::ScatterValueOp>(),
       [](L x, A a, O) { return TensorList{scatter(x[0], a.i("dim"), x[1], a.f("value"))}; }},
      {id<ir::ScatterAddOp>(),
       [](L x, A a, O) { return TensorList{scatter_add(x[0], a.i("dim"), x[1], x[2])}; }},
      {id<ir::MaskedFillOp>(),
       [](L x, A a, O) { return TensorList{masked_fill(x[0], x[1], a.f("value"))}; }},
      {id<ir::PadOp>(),
       [](L x, A a, O) {
         return TensorList{pad(x[0], a.dims("pad"), static_cast<PadMode>(a.i("mode")),
                               a.f("value"))};
       }},
      {id<ir::OneHotOp>(), [](L x, A a, O) { return TensorList{one_hot(x[0], a.i("num_classes"))}; }},
      {id<ir::TopkOp>(),
       [](L x, A a, O) {
         auto [v, i] = topk(x[0], a.i("k"), a.i("dim"), a.b("largest"), a.b("sorted"));
         return TensorList{v, i};
       }},
      {id<ir::SortOp>(),
       [](L x, A a, O) {
         auto [v, i] = sort(x[0], a.i("dim"), a.b("descending"));
         return TensorList{v, i};
       }},
      {id<ir::ArgsortOp>(),
       [](L x, A a, O) { return TensorList{argsort(x[0], a.i("dim"), a.b("descending"))}; }},
      {id<ir::QuantizeOp>(),
       [](L x, A a, O) {
         return TensorList{
             quantize(x[0], x[1], x[2], static_cast<DType>(a.i("dtype")), a.i("axis"))};
       }},
      {id<ir::DequantizeOp>(),
       [](L x, A a, O) { return TensorList{dequantize(x[0], x[1], x[2], a.i("axis"))}; }},
      {id<ir::FakeQuantizeOp>(),
       [](L x, A a, O) {
         return TensorList{fake_quantize(x[0], x[1], x[2], a.i("quant_min"), a.i("quant_max"),
                                         a.i("axis"))};
       }},
      {id<ir::QlinearOp>(),
       [](L x, A a, O) {
         const QuantizedOutput y{x[7], x[8], static_cast<DType>(a.i("dtype")), a.b("relu")};
         return TensorList{qlinear(x[0], x[1], x[2], {x[3], x[4], x[5]}, x[6], y)};
       }},
      {id<ir::QlinearDynamicOp>(),
       [](L x, A, O) { return TensorList{qlinear_dynamic(x[0], {x[1], x[2], x[3]}, x[4])}; }},
      {id<ir::QaddOp>(),
       [](L x, A a, O) {
         const QuantizedOutput y{x[6], x[7], static_cast<DType>(a.i("dtype")), a.b("relu")};
         return TensorList{qadd(x[0], x[1], x[2], x[3], x[4], x[5], y)};
       }},
      {id<ir::QavgPool2dOp>(),
       [](L x, A a, O) {
         const QuantizedOutput y{x[3], x[4], static_cast<DType>(a.i("dtype"))};
         const Pair2 k = a.pair("kernel"), s = a.pair("stride"), p = a.pair("padding");
         return TensorList{qavg_pool2d(x[0], x[1], x[2], y, Dims{k.h, k.w}, Dims{s.h, s.w},
                                       Dims{p.h, p.w}, a.b("ceil_mode"),
                                       a.b("count_include_pad"))};
       }},
      {id<ir::Qconv2dOp>(),
       [](L x, A a, O) {  // channels-last: the NCHW op between permutes
         const QuantizedOutput y{x[7], x[8], static_cast<DType>(a.i("dtype")), a.b("relu")};
         const Pair2 s = a.pair("stride"), p = a.pair("padding"), d = a.pair("dilation");
         const bool nhwc = a.b("channels_last");
         const Tensor in = nhwc ? x[0].permute({0, 3, 1, 2}) : x[0];
         const Tensor conv = qconv2d(in, x[1], x[2], {x[3], x[4], x[5]}, x[6], y, Dims{s.h, s.w},
                                     Dims{p.h, p.w}, Dims{d.h, d.w}, a.i("groups"));
         return TensorList{nhwc ? conv.permute({0, 2, 3, 1}).contiguous() : conv};
       }},
      {id<ir::Qconv2dAddOp>(),
       [](L x, A a, O) {  // the two ops it fuses
         const QuantizedOutput c{x[7], x[8], static_cast<DType>(a.i("conv_dtype")), a.b("relu")};
         const Pair2 s = a.pair("stride"), p = a.pair("padding"), d = a.pair("dilation");
         const bool nhwc = a.b("channels_last");
         const Tensor in = nhwc ? x[0].permute({0, 3, 1, 2}) : x[0];
         Tensor conv = qconv2d(in, x[1], x[2], {x[3], x[4], x[5]}, x[6], c, Dims{s.h, s.w},
                               Dims{p.h, p.w}, Dims{d.h, d.w}, a.i("groups"));
         if (nhwc) conv = conv.permute({0, 2, 3, 1}).contiguous();
         const QuantizedOutput y{x[12], x[13], static_cast<DType>(a.i("dtype")), a.b("add_relu")};
         return TensorList{qadd(conv, x[7], x[8], x[9], x[10], x[11], y)};
       }},
      {id<ir::DropoutOp>(),
       [](L x, A a, O) {
         const double p = a.f("p");
         return TensorList{p >= 1.0 ? zeros_like(x[0]) : x[0] * x[1].to(x[0].dtype()) / (1.0 - p)};
       }},
      {id<ir::UniformOp>(),
       [](L x, A a, O op) {
         return draw(x[0], op, [&](TensorImpl& t, Generator& g) {
           kernels::uniform_(t, a.f("low"), a.f("high"), &g);
         });
       }},
      {id<ir::NormalOp>(),
       [](L x, A a, O op) {
         return draw(x[0], op, [&](TensorImpl& t, Generator& g) {
           kernels::normal_(t, a.f("mean"), a.f("std"), &g);
         });
       }},
      {id<ir::RandintOp>(),
       [](L x, A a, O op) {
         return draw(x[0], op, [&](TensorImpl& t, Generator& g) {
           kernels::randint_(t, a.i("low"), a.i("high"), &g);
         });
       }},
      {id<ir::DropoutMaskOp>(),
       [](L x, A a, O op) {
         return draw(x[0], op,
                     [&](TensorImpl& t, Generator& g) { kernels::dropout_mask_out(a.f("p"), t, &g); });
       }},
      {id<ir::CatOp>(), [](L x, A a, O) { return TensorList{cat(x, a.i("dim"))}; }},
      {id<ir::StackOp>(), [](L x, A a, O) { return TensorList{stack(x, a.i("dim"))}; }},
      // ops made by the optimization passes
      {id<ir::Conv2dFusedOp>(), [](L x, A a, O op) { return TensorList{conv2d_fused(x, a, op)}; }},
      {id<ir::Conv2dAvgpoolOp>(),
       [](L x, A a, O op) { return TensorList{conv2d_avgpool(x, a, op)}; }},
      {id<ir::LinearFusedOp>(), [](L x, A a, O op) { return TensorList{linear_fused(x, a, op)}; }},
      {id<ir::MbconvOp>(), [](L x, A a, O op) { return TensorList{mbconv(x, a, op)}; }},
      {id<ir::AttentionOp>(), [](L x, A a, O) { return TensorList{attention(x, a)}; }},
      {id<ir::FusedOp>(), [](L x, A, O op) { return run_fused(x, op); }},
    };
    add_gradient_kernels(t);
    return t;
  }();
  return table;
}

// Scalars of the upstream dialects (index, i64, i1 from arith/tensor ops) live in the
// environment as 0-dim tensors, like everything else.
int64_t scalar_int(const Env& env, mlir::Value v) {
  return static_cast<int64_t>(env.lookup(v).item_double());
}

TensorList values_of(const Env& env, mlir::ValueRange range) {
  TensorList out;
  for (mlir::Value v : range) out.push_back(env.lookup(v));
  return out;
}

// Runs the ops the upstream dialects contribute (control flow and scalar glue). Returns false when
// `op` is not one of them.
bool run_upstream_op(mlir::Operation& op, Env& env) {
  if (mlir::isa<mlir::arith::ConstantOp>(op)) {
    auto attr = mlir::dyn_cast<mlir::IntegerAttr>(op.getAttr("value"));
    KILN_CHECK(attr, "interpret", "only integer arith.constant is supported");
    env[op.getResult(0)] =
        scalar_tensor(static_cast<double>(attr.getInt()), TensorOptions(DType::Int64));
    return true;
  }
  if (mlir::isa<mlir::arith::IndexCastOp>(op)) {
    env[op.getResult(0)] = env.lookup(op.getOperand(0));
    return true;
  }
  if (mlir::isa<mlir::tensor::FromElementsOp>(op)) {
    KILN_CHECK(op.getNumOperands() == 1, "interpret", "tensor.from_elements: only 0-dim results");
    env[op.getResult(0)] = env.lookup(op.getOperand(0)).to(result_like(&op, 0).dtype());
    return true;
  }
  if (mlir::isa<mlir::tensor::ExtractOp>(op)) {
    KILN_CHECK(op.getNumOperands() == 1, "interpret", "tensor.extract: only 0-dim operands");
    env[op.getResult(0)] = env.lookup(op.getOperand(0)).reshape(Dims{});
    return true;
  }
  if (mlir::isa<mlir::scf::IfOp>(op)) {
    const bool taken = env.lookup(op.getOperand(0)).item_double() != 0.0;
    mlir::Region& region = op.getRegion(taken ? 0 : 1);
    KILN_CHECK(!region.empty(), "interpret", "scf.if: missing branch");
    TensorList results = run_block(region.front(), env);
    for (unsigned i = 0; i < op.getNumResults(); ++i) env[op.getResult(i)] = results[i];
    return true;
  }
  if (mlir::isa<mlir::scf::ForOp>(op)) {
    const int64_t lb = scalar_int(env, op.getOperand(0)), ub = scalar_int(env, op.getOperand(1)),
                  step = scalar_int(env, op.getOperand(2));
    KILN_CHECK(step > 0, "interpret", "scf.for: step must be positive, got ", step);
    TensorList carry = values_of(env, op.getOperands().drop_front(3));
    mlir::Block& body = op.getRegion(0).front();
    for (int64_t i = lb; i < ub; i += step) {
      env[body.getArgument(0)] = scalar_tensor(static_cast<double>(i), TensorOptions(DType::Int64));
      for (size_t k = 0; k < carry.size(); ++k) env[body.getArgument(k + 1)] = carry[k];
      carry = run_block(body, env);
    }
    for (unsigned i = 0; i < op.getNumResults(); ++i) env[op.getResult(i)] = carry[i];
    return true;
  }
  return false;
}

// Runs `block` and returns the values its terminator (func.return / scf.yield) hands back.
TensorList run_block(mlir::Block& block, Env& env) {
  for (mlir::Operation& op : block) {
    if (mlir::isa<mlir::func::ReturnOp, mlir::scf::YieldOp, ir::YieldOp>(op)) {
      return values_of(env, op.getOperands());
    }
    if (mlir::isa<ir::NoneOp>(op)) {
      env[op.getResult(0)] = Tensor();
      continue;
    }
    if (mlir::isa<ir::ConstantOp>(op)) {
      env[op.getResult(0)] = constant_value(&op);
      continue;
    }
    if (run_upstream_op(op, env)) continue;
    const std::string name = op.getName().getStringRef().str();
    auto it = kernels().find(op.getName().getTypeID());
    KILN_CHECK(it != kernels().end(), "interpret", "no interpreter kernel for op '", name, "'");
    TensorList inputs = values_of(env, op.getOperands());
    TensorList results = it->second(inputs, Attrs{&op}, &op);
    KILN_CHECK(results.size() == op.getNumResults(), name, "produced ", results.size(),
               " results, the op declares ", op.getNumResults());
    for (unsigned i = 0; i < op.getNumResults(); ++i) env[op.getResult(i)] = results[i];
  }
  fail("interpret", "block has no terminator");
}

}  // namespace

Tensor constant_value(mlir::Operation* op) {
  if (auto resource = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(op->getAttr("value")))
    return resource_value(op, resource);
  auto attr = mlir::cast<mlir::DenseElementsAttr>(op->getAttr("value"));
  Tensor out = result_like(op, 0);
  const int64_t n = out.numel();
  if (is_floating(out.dtype())) {
    std::vector<double> v;
    for (const llvm::APFloat& f : attr.getValues<llvm::APFloat>()) v.push_back(f.convertToDouble());
    if (attr.isSplat()) v.assign(n, v.empty() ? 0.0 : v[0]);
    Tensor src = from_blob(v.data(), out.sizes(), TensorOptions(DType::Float64));
    copy_(out, src);
  } else {
    std::vector<int64_t> v;
    const bool is_bool = out.dtype() == DType::Bool;
    for (const llvm::APInt& x : attr.getValues<llvm::APInt>()) {
      v.push_back(is_bool ? static_cast<int64_t>(x.getZExtValue()) : x.getSExtValue());
    }
    if (attr.isSplat()) v.assign(n, v.empty() ? 0 : v[0]);
    Tensor src = from_blob(v.data(), out.sizes(), TensorOptions(DType::Int64));
    copy_(out, src);
  }
  return out;
}

bool interpreter_supports(std::string_view op_name) {
  static const std::unique_ptr<mlir::MLIRContext> ctx = [] {
    auto c = make_context();
    c->disableMultithreading();
    return c;
  }();
  auto name = mlir::RegisteredOperationName::lookup(op_name, ctx.get());
  if (!name) return false;
  const mlir::TypeID id = name->getTypeID();
  static const mlir::TypeID kStructural[] = {jit::id<ir::NoneOp>(),
                                             jit::id<ir::ConstantOp>(),
                                             jit::id<ir::YieldOp>(),
                                             jit::id<mlir::func::ReturnOp>(),
                                             jit::id<mlir::scf::YieldOp>(),
                                             jit::id<mlir::scf::IfOp>(),
                                             jit::id<mlir::scf::ForOp>(),
                                             jit::id<mlir::arith::ConstantOp>(),
                                             jit::id<mlir::arith::IndexCastOp>(),
                                             jit::id<mlir::tensor::ExtractOp>(),
                                             jit::id<mlir::tensor::FromElementsOp>()};
  for (mlir::TypeID s : kStructural)
    if (s == id) return true;
  return kernels().count(id) != 0;
}

TensorList interpret(mlir::ModuleOp module, const TensorList& args) {
  auto fn = module.lookupSymbol<mlir::func::FuncOp>("forward");
  KILN_CHECK(fn, "interpret", "the module has no func.func @forward");
  mlir::Block& block = fn.getBody().front();
  KILN_CHECK(block.getNumArguments() == args.size(), "interpret", "@forward takes ",
             block.getNumArguments(), " arguments, got ", args.size());
  autograd::NoGradGuard no_grad;
  Env env;
  for (size_t i = 0; i < args.size(); ++i) {
    auto type = mlir::cast<mlir::RankedTensorType>(block.getArgument(i).getType());
    Dims want(std::vector<int64_t>(type.getShape().begin(), type.getShape().end()));
    KILN_CHECK(
        args[i].sizes() == want && args[i].dtype() == dtype_of_element(type.getElementType()),
        "interpret", "argument ", i, ": expected ", want, " ",
        dtype_short_name(dtype_of_element(type.getElementType())), ", got ", args[i].sizes(), " ",
        dtype_short_name(args[i].dtype()));
    env[block.getArgument(i)] = args[i];
  }
  return run_block(block, env);
}

}  // namespace kiln::jit

// kiln_abi_* wrappers for linear algebra, convolution, pooling, normalization and embedding.

#include <atomic>

#include "decode.h"
#include "kiln/runtime/kernels/attention.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/interpolate.h"
#include "kiln/runtime/kernels/linalg.h"
#include "kiln/runtime/kernels/mbconv.h"
#include "kiln/runtime/kernels/nn.h"

using namespace kiln;
using namespace kiln::kernels;

namespace {

using abi::conv2d_params;

ConvEpilogue conv_epilogue(abi::Args& a, const TensorImpl* residual) {
  ConvEpilogue e;
  e.residual = residual;
  e.activation = static_cast<Activation>(a.i());
  e.clamp_min = static_cast<float>(a.f());
  e.clamp_max = static_cast<float>(a.f());
  return e;
}

// A contiguous copy when t is strided (GEMM operands of the fused linear are row-major).
TensorImplPtr contiguous(TensorImpl& t) {
  if (t.is_contiguous()) return TensorImplPtr(&t);
  TensorImplPtr c = empty(t.sizes(), t.dtype());
  copy_(*c, t);
  return c;
}

// linear: x, w, bias?, out. The weight packed in `packed` (a prepared call site) or per call.
// `block`: an epilogue the compiler generated (none: fn null).
void linear(abi::Args& a, const SgemmPacked* packed, const BlockEpilogue& block = {}) {
  Epilogue e;
  e.block = block;
  linear_fused_out(a.t(0), a.t(1), a.opt(2), nullptr, e, a.t(3), packed);
}

// linear_fused: x, w, bias?, residual?, out; activation, clamp_min, clamp_max. Strided operands
// are copied so that the fused GEMM takes them.
void linear_fused(abi::Args& a, const SgemmPacked* packed, const BlockEpilogue& block = {}) {
  TensorImplPtr x = contiguous(a.t(0)), w = contiguous(a.t(1));
  TensorImplPtr b = a.opt(2) ? contiguous(*a.opt(2)) : TensorImplPtr();
  TensorImplPtr residual = a.opt(3) ? contiguous(*a.opt(3)) : TensorImplPtr();
  TensorImpl& out = a.t(4);
  Epilogue e;
  e.activation = static_cast<Activation>(a.i());
  e.clamp_min = static_cast<float>(a.f());
  e.clamp_max = static_cast<float>(a.f());
  e.block = block;
  linear_fused_out(*x, *w, b.get(), residual.get(), e, out, packed);
}

}  // namespace

KILN_ABI_OP(matmul, matmul_out(a.t(0), a.t(1), a.t(2)))
KILN_ABI_OP(linear, linear(a, nullptr))
KILN_ABI_OP(linear_fused, linear_fused(a, nullptr))

KILN_ABI_OP(attention, {
  const double scale = a.f();
  const bool seq_first = a.b();
  attention_out(a.t(0), a.t(1), a.t(2), a.opt(3), scale, seq_first, a.t(4));
})

KILN_ABI_OP(conv2d, {
  Conv2dParams p = conv2d_params(a);
  conv2d_out(a.t(0), a.t(1), a.opt(2), p, a.t(3));
})

KILN_ABI_OP(conv2d_fused, {
  Conv2dParams p = conv2d_params(a);
  ConvEpilogue e = conv_epilogue(a, a.opt(3));
  conv2d_out(a.t(0), a.t(1), a.opt(2), p, a.t(4), e);
})

namespace {

// The slot generated code keeps per call site: null until the first call stores a heap-held
// pointer to what was prepared from the constant weights (or to nullptr when preparing gains
// nothing). Several threads may make the first call at once: one wins, the others are dropped.
struct PreparedSlot {
  std::shared_ptr<const void> prepared;
};

template <typename T, typename Make>
const T* prepared_in_slot(void** slot, Make&& make) {
  std::atomic_ref<void*> ref(*slot);
  void* held = ref.load(std::memory_order_acquire);
  if (held == nullptr) {
    auto* fresh = new PreparedSlot{std::shared_ptr<const T>(make())};
    void* expected = nullptr;
    if (ref.compare_exchange_strong(expected, fresh, std::memory_order_acq_rel)) {
      held = fresh;
    } else {
      delete fresh;
      held = expected;
    }
  }
  return static_cast<const T*>(static_cast<PreparedSlot*>(held)->prepared.get());
}

const PreparedConv2dWeight* prepared_weight(void** slot, const TensorImpl& x, const TensorImpl& w,
                                            const Conv2dParams& p) {
  return prepared_in_slot<PreparedConv2dWeight>(
      slot, [&] { return prepare_conv2d_weight(w, p, x.sizes()); });
}

// mbconv: input, expand_weight?, expand_bias?, dw_weight, dw_bias?, project_weight,
// project_bias?, residual?, out; stride[], padding[], then activation, clamp_min, clamp_max of
// the expand, dw and project steps, then channels_last_in, channels_last_out, strategy.
MBConvOperands mbconv_operands(abi::Args& a) {
  MBConvOperands o;
  o.input = &a.t(0), o.expand_weight = a.opt(1), o.expand_bias = a.opt(2), o.dw_weight = &a.t(3);
  o.dw_bias = a.opt(4), o.project_weight = &a.t(5), o.project_bias = a.opt(6);
  o.residual = a.opt(7);
  return o;
}
MBConvParams mbconv_params(abi::Args& a) {
  MBConvParams p;
  auto s = a.arr();
  auto pad = a.arr();
  p.stride_h = s[0], p.stride_w = s[1], p.pad_h = pad[0], p.pad_w = pad[1];
  p.expand = conv_epilogue(a, nullptr);
  p.dw = conv_epilogue(a, nullptr);
  p.project = conv_epilogue(a, nullptr);
  p.input_channels_last = a.b();
  p.output_channels_last = a.b();
  p.strategy = mbconv_strategy(a.i(), "mbconv");
  return p;
}

}  // namespace

extern "C" void kiln_abi_release_prepared(void** slot) {
  if (slot == nullptr) return;
  delete static_cast<PreparedSlot*>(*slot);
  *slot = nullptr;
}

extern "C" void kiln_abi_matmul_prepared(void* const* data, const int64_t* desc, void** slot) {
  abi::guarded("matmul", [&] {
    abi::Args a(data, desc, "matmul");
    const SgemmPacked* packed =
        prepared_in_slot<SgemmPacked>(slot, [&] { return prepare_matmul_operand(a.t(1)); });
    if (packed && matmul_packed_out(a.t(0), a.t(1), *packed, a.t(2))) return;
    matmul_out(a.t(0), a.t(1), a.t(2));
  });
}

extern "C" void kiln_abi_linear_prepared(void* const* data, const int64_t* desc, void** slot) {
  abi::guarded("linear", [&] {
    abi::Args a(data, desc, "linear");
    linear(a, prepared_in_slot<SgemmPacked>(slot, [&] { return prepare_linear_weight(a.t(1)); }));
  });
}

extern "C" void kiln_abi_linear_fused_prepared(void* const* data, const int64_t* desc,
                                               void** slot) {
  abi::guarded("linear_fused", [&] {
    abi::Args a(data, desc, "linear_fused");
    const SgemmPacked* packed =
        prepared_in_slot<SgemmPacked>(slot, [&] { return prepare_linear_weight(a.t(1)); });
    linear_fused(a, packed);
  });
}

extern "C" void kiln_abi_conv2d_prepared(void* const* data, const int64_t* desc, void** slot) {
  abi::guarded("conv2d", [&] {
    abi::Args a(data, desc, "conv2d");
    const Conv2dParams p = conv2d_params(a);
    conv2d_out(a.t(0), a.t(1), a.opt(2), p, a.t(3), {}, prepared_weight(slot, a.t(0), a.t(1), p));
  });
}

extern "C" void kiln_abi_conv2d_fused_prepared(void* const* data, const int64_t* desc,
                                               void** slot) {
  abi::guarded("conv2d_fused", [&] {
    abi::Args a(data, desc, "conv2d_fused");
    const Conv2dParams p = conv2d_params(a);
    const ConvEpilogue e = conv_epilogue(a, a.opt(3));
    conv2d_out(a.t(0), a.t(1), a.opt(2), p, a.t(4), e, prepared_weight(slot, a.t(0), a.t(1), p));
  });
}

// x, w, bias?, out [N, C_out, 1, 1]; stride[], padding[], dilation[], groups, activation,
// clamp_min, clamp_max.
KILN_ABI_OP(conv2d_avgpool, {
  Conv2dParams p = conv2d_params(a);
  const ConvEpilogue e = conv_epilogue(a, nullptr);
  conv2d_avgpool_out(a.t(0), a.t(1), a.opt(2), p, a.t(3), e, nullptr);
})

extern "C" void kiln_abi_conv2d_avgpool_prepared(void* const* data, const int64_t* desc,
                                                 void** slot) {
  abi::guarded("conv2d_avgpool", [&] {
    abi::Args a(data, desc, "conv2d_avgpool");
    const Conv2dParams p = conv2d_params(a);
    const ConvEpilogue e = conv_epilogue(a, nullptr);
    conv2d_avgpool_out(a.t(0), a.t(1), a.opt(2), p, a.t(3), e,
                       prepared_weight(slot, a.t(0), a.t(1), p));
  });
}

KILN_ABI_OP(mbconv, {
  const MBConvOperands o = mbconv_operands(a);
  mbconv_out(o, mbconv_params(a), a.t(8));
})

extern "C" void kiln_abi_mbconv_prepared(void* const* data, const int64_t* desc, void** slot) {
  abi::guarded("mbconv", [&] {
    abi::Args a(data, desc, "mbconv");
    const MBConvOperands o = mbconv_operands(a);
    const MBConvParams p = mbconv_params(a);
    mbconv_out(o, p, a.t(8), prepared_in_slot<PreparedMBConv>(slot, [&] {
                 return prepare_mbconv(o, mbconv_run_strategy(p));
               }));
  });
}

KILN_ABI_OP(conv1d, {
  Conv1dParams p;
  p.stride = a.i(), p.padding = a.i(), p.dilation = a.i(), p.groups = a.i();
  conv1d_out(a.t(0), a.t(1), a.opt(2), p, a.t(3));
})

// Tensors: grad, input, weight, grad_input, grad_weight, grad_bias.
KILN_ABI_OP(conv1d_backward, {
  Conv1dParams p;
  p.stride = a.i(), p.padding = a.i(), p.dilation = a.i(), p.groups = a.i();
  conv1d_backward_out(a.t(0), a.t(1), a.t(2), p, a.opt(3), a.opt(4), a.opt(5));
})

namespace {
ConvTranspose2dParams conv_transpose2d_params(abi::Args& a) {
  ConvTranspose2dParams p;
  auto s = a.arr();
  auto pad = a.arr();
  auto op = a.arr();
  p.stride_h = s[0], p.stride_w = s[1], p.pad_h = pad[0], p.pad_w = pad[1];
  p.output_pad_h = op[0], p.output_pad_w = op[1];
  p.groups = a.i();
  auto d = a.arr();
  p.dilation_h = d[0], p.dilation_w = d[1];
  return p;
}
}  // namespace

KILN_ABI_OP(conv_transpose2d_backward, {
  const ConvTranspose2dParams p = conv_transpose2d_params(a);
  conv_transpose2d_backward_out(a.t(0), a.t(1), a.t(2), p, a.opt(3), a.opt(4), a.opt(5));
})

KILN_ABI_OP(conv_transpose2d, {
  const ConvTranspose2dParams p = conv_transpose2d_params(a);
  conv_transpose2d_out(a.t(0), a.t(1), a.opt(2), p, a.t(3));
})

KILN_ABI_OP(max_pool2d, {
  Pool2dParams p = abi::pool2d_params(a, true);
  max_pool2d_out(a.t(0), p, a.t(1), a.opt(2));
})
KILN_ABI_OP(avg_pool2d, {
  Pool2dParams p = abi::pool2d_params(a, false);
  avg_pool2d_out(a.t(0), p, a.t(1));
})
KILN_ABI_OP(adaptive_avg_pool2d, adaptive_avg_pool2d_out(a.t(0), a.t(1)))

KILN_ABI_OP(batch_norm, {
  const bool training = a.b();
  const double momentum = a.f(), eps = a.f();
  // Running statistics are inputs of the functional op: a training-mode trace updates copies
  // (the interpreter's semantics), never the caller's buffers.
  TensorImplPtr rm, rv;
  if (a.opt(1)) rm = empty(a.opt(1)->sizes(), a.opt(1)->dtype()), copy_(*rm, *a.opt(1));
  if (a.opt(2)) rv = empty(a.opt(2)->sizes(), a.opt(2)->dtype()), copy_(*rv, *a.opt(2));
  batch_norm_out(a.t(0), a.opt(3), a.opt(4), rm.get(), rv.get(), training, momentum, eps, a.t(5),
                 nullptr, nullptr);
})
KILN_ABI_OP(layer_norm, {
  auto shape = a.arr();
  const double eps = a.f();
  layer_norm_out(a.t(0), shape, a.opt(1), a.opt(2), eps, a.t(3), nullptr, nullptr);
})
KILN_ABI_OP(group_norm, {
  const int64_t groups = a.i();
  const double eps = a.f();
  group_norm_out(a.t(0), groups, a.opt(1), a.opt(2), eps, a.t(3), nullptr, nullptr);
})
KILN_ABI_OP(embedding, embedding_out(a.t(0), a.t(1), a.t(2)))
// Tensors: grad, input, weight?, grad_input, grad_weight, grad_bias.
KILN_ABI_OP(layer_norm_backward, {
  auto shape = a.arr();
  const double eps = a.f();
  layer_norm_backward_recompute_out(a.t(0), a.t(1), shape, a.opt(2), eps, a.opt(3), a.opt(4),
                                    a.opt(5));
})
KILN_ABI_OP(group_norm_backward, {
  const int64_t groups = a.i();
  const double eps = a.f();
  group_norm_backward_recompute_out(a.t(0), a.t(1), groups, a.opt(2), eps, a.opt(3), a.opt(4),
                                    a.opt(5));
})
// Tensors: grad, indices, grad_weight; attributes weight_size (the output's shape), padding_idx.
KILN_ABI_OP(embedding_backward, {
  a.arr();
  const int64_t pad = a.i();
  embedding_backward_out(a.t(0), a.t(1), pad < 0 ? std::nullopt : std::optional<int64_t>(pad),
                         false, a.t(2));
})
namespace {
kiln::kernels::InterpolateParams interpolate_params(kiln::abi::Args& a) {
  kiln::kernels::InterpolateParams p;
  p.mode = static_cast<kiln::kernels::InterpolateMode>(a.i());
  p.align_corners = a.b();
  p.scale_h = a.f();
  p.scale_w = a.f();
  return p;
}
}  // namespace
KILN_ABI_OP(interpolate, interpolate_out(a.t(0), interpolate_params(a), a.t(1)))
KILN_ABI_OP(interpolate_backward, interpolate_backward_out(a.t(0), interpolate_params(a), a.t(1)))
KILN_ABI_OP(dropout, dropout_out(a.t(0), a.t(1), a.f(), a.t(2)))
KILN_ABI_OP(copy, copy_(a.t(1), a.t(0)))

// Gradients a traced training step records (as the registry's runtime/src/ops/backward.cpp).
KILN_ABI_OP(conv2d_backward, {
  Conv2dParams p = conv2d_params(a);
  conv2d_backward_out(a.t(0), a.t(1), a.t(2), p, a.opt(3), a.opt(4), a.opt(5));
})
KILN_ABI_OP(max_pool2d_backward, max_pool2d_backward_out(a.t(0), a.t(1), a.t(2)))
KILN_ABI_OP(avg_pool2d_backward, {
  Pool2dParams p = abi::pool2d_params(a, false);
  avg_pool2d_backward_out(a.t(0), p, a.t(1));
})
KILN_ABI_OP(adaptive_avg_pool2d_backward, adaptive_avg_pool2d_backward_out(a.t(0), a.t(1)))
KILN_ABI_OP(batch_norm_backward, {
  const bool training = a.b();
  const double eps = a.f();
  batch_norm_backward_recompute_out(a.t(0), a.t(1), a.opt(2), a.opt(3), a.opt(4), training, eps,
                                    a.opt(5), a.opt(6), a.opt(7));
})
KILN_ABI_OP(batch_norm_update_stats, {
  const double momentum = a.f();
  batch_norm_update_stats_out(a.t(0), a.t(1), a.t(2), momentum, a.t(3), a.t(4));
})

// ---- the products with an epilogue the compiler generated ----

namespace {

BlockEpilogue block_epilogue(kiln_abi_block_epilogue fn, const void* ctx) {
  BlockEpilogue b;
  b.fn = fn;
  b.ctx = ctx;
  return b;
}

const SgemmPacked* linear_weight(void** slot, abi::Args& a) {
  if (slot == nullptr) return nullptr;
  return prepared_in_slot<SgemmPacked>(slot, [&] { return prepare_linear_weight(a.t(1)); });
}

const PreparedConv2dWeight* conv_weight(void** slot, abi::Args& a, const Conv2dParams& p) {
  return slot ? prepared_weight(slot, a.t(0), a.t(1), p) : nullptr;
}

}  // namespace

extern "C" void kiln_abi_matmul_epilogue(void* const* data, const int64_t* desc, void** slot,
                                         kiln_abi_block_epilogue fn, const void* ctx) {
  abi::guarded("matmul", [&] {
    abi::Args a(data, desc, "matmul");
    const SgemmPacked* packed =
        slot ? prepared_in_slot<SgemmPacked>(slot, [&] { return prepare_matmul_operand(a.t(1)); })
             : nullptr;
    matmul_epilogue_out(a.t(0), a.t(1), a.t(2), block_epilogue(fn, ctx), packed);
  });
}

extern "C" void kiln_abi_linear_epilogue(void* const* data, const int64_t* desc, void** slot,
                                         kiln_abi_block_epilogue fn, const void* ctx) {
  abi::guarded("linear", [&] {
    abi::Args a(data, desc, "linear");
    linear(a, linear_weight(slot, a), block_epilogue(fn, ctx));
  });
}

extern "C" void kiln_abi_linear_fused_epilogue(void* const* data, const int64_t* desc, void** slot,
                                               kiln_abi_block_epilogue fn, const void* ctx) {
  abi::guarded("linear_fused", [&] {
    abi::Args a(data, desc, "linear_fused");
    linear_fused(a, linear_weight(slot, a), block_epilogue(fn, ctx));
  });
}

// The input (described, without data) computed by the generated prologue block by block.
extern "C" void kiln_abi_linear_prologue(void* const* data, const int64_t* desc, void** slot,
                                         kiln_abi_block_epilogue prologue, const void* prologue_ctx,
                                         kiln_abi_block_epilogue epilogue,
                                         const void* epilogue_ctx) {
  abi::guarded("linear", [&] {
    abi::Args a(data, desc, "linear");
    Epilogue e;
    e.block = block_epilogue(epilogue, epilogue_ctx);
    linear_prologue_out(a.shape_without_data(0, DType::Float32),
                        block_epilogue(prologue, prologue_ctx), *contiguous(a.t(1)), a.opt(2),
                        nullptr, e, a.t(3), linear_weight(slot, a));
  });
}

extern "C" void kiln_abi_matmul_prologue(void* const* data, const int64_t* desc, void** slot,
                                         kiln_abi_block_epilogue prologue, const void* prologue_ctx,
                                         kiln_abi_block_epilogue epilogue,
                                         const void* epilogue_ctx) {
  abi::guarded("matmul", [&] {
    abi::Args a(data, desc, "matmul");
    const SgemmPacked* packed =
        slot ? prepared_in_slot<SgemmPacked>(slot, [&] { return prepare_matmul_operand(a.t(1)); })
             : nullptr;
    matmul_prologue_out(a.shape_without_data(0, DType::Float32),
                        block_epilogue(prologue, prologue_ctx), a.t(1), a.t(2),
                        block_epilogue(epilogue, epilogue_ctx), packed);
  });
}

extern "C" void kiln_abi_linear_fused_prologue(void* const* data, const int64_t* desc, void** slot,
                                               kiln_abi_block_epilogue prologue,
                                               const void* prologue_ctx,
                                               kiln_abi_block_epilogue epilogue,
                                               const void* epilogue_ctx) {
  abi::guarded("linear_fused", [&] {
    abi::Args a(data, desc, "linear_fused");
    TensorImplPtr w = contiguous(a.t(1));
    TensorImplPtr b = a.opt(2) ? contiguous(*a.opt(2)) : TensorImplPtr();
    TensorImplPtr residual = a.opt(3) ? contiguous(*a.opt(3)) : TensorImplPtr();
    Epilogue e;
    e.activation = static_cast<Activation>(a.i());
    e.clamp_min = static_cast<float>(a.f());
    e.clamp_max = static_cast<float>(a.f());
    e.block = block_epilogue(epilogue, epilogue_ctx);
    linear_prologue_out(a.shape_without_data(0, DType::Float32),
                        block_epilogue(prologue, prologue_ctx), *w, b.get(), residual.get(), e,
                        a.t(4), linear_weight(slot, a));
  });
}

extern "C" void kiln_abi_conv2d_epilogue(void* const* data, const int64_t* desc, void** slot,
                                         kiln_abi_block_epilogue fn, const void* ctx) {
  abi::guarded("conv2d", [&] {
    abi::Args a(data, desc, "conv2d");
    const Conv2dParams p = conv2d_params(a);
    ConvEpilogue e;
    e.block = block_epilogue(fn, ctx);
    conv2d_out(a.t(0), a.t(1), a.opt(2), p, a.t(3), e, conv_weight(slot, a, p));
  });
}

extern "C" void kiln_abi_conv2d_fused_epilogue(void* const* data, const int64_t* desc, void** slot,
                                               kiln_abi_block_epilogue fn, const void* ctx) {
  abi::guarded("conv2d_fused", [&] {
    abi::Args a(data, desc, "conv2d_fused");
    const Conv2dParams p = conv2d_params(a);
    ConvEpilogue e = conv_epilogue(a, a.opt(3));
    e.block = block_epilogue(fn, ctx);
    conv2d_out(a.t(0), a.t(1), a.opt(2), p, a.t(4), e, conv_weight(slot, a, p));
  });
}

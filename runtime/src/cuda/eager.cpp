// Eager elementwise ops and copies on CUDA tensors (see kiln/runtime/cuda/eager.h): each call is
// a one-op pointwise expression, compiled once per op and kept.

#include "kiln/runtime/cuda/eager.h"

#include <algorithm>

#include "kiln/runtime/cuda/compile.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/pointwise.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/views.h"

namespace kiln::cuda {

using kernels::BinaryOp;
using kernels::Scalar;
using kernels::UnaryOp;

void check_same_device(std::string_view op, const TensorImpl& a, const char* a_what,
                       const TensorImpl& b, const char* b_what) {
  KILN_CHECK(a.device() == b.device(), op, "expected all tensors on one device, got ",
             device_name(a.device()), " (", a_what, ") and ", device_name(b.device()), " (", b_what,
             ")");
}

namespace {

// Integer arithmetic on int64 tensors (counters such as batch norm's num_batches_tracked):
// out[i] = a[i or 0] op b[i or 0] * alpha, each operand contiguous of out's size or a single
// element (or a number); and the byte-to-float conversion of masks.
constexpr const char* kInt64Source = R"(
extern "C" __global__ void kiln_int64_binary(long long* __restrict__ out,
                                             const long long* __restrict__ a, long long a_value,
                                             long long a_step, const long long* __restrict__ b,
                                             long long b_value, long long b_step, long long alpha,
                                             int op, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const long long x = a ? a[i * a_step] : a_value;
    const long long y = (b ? b[i * b_step] : b_value) * alpha;
    out[i] = op == 0 ? x + y : op == 1 ? x - y : x * y;
  }
}
// bool / uint8 to float32 (0 or the byte's value).
extern "C" __global__ void kiln_bytes_to_float(float* __restrict__ out,
                                               const unsigned char* __restrict__ in, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = (float)in[i];
}
)";

bool integral(const Scalar& s) {
  return !s.is_floating() || s.d == static_cast<double>(static_cast<int64_t>(s.d));
}
int64_t integer(const Scalar& s) {
  return s.is_floating() ? static_cast<int64_t>(s.d) : s.i;
}

void int64_binary_out(std::string_view name, BinaryOp op, const TensorImpl* a, const Scalar& as,
                      const TensorImpl* b, const Scalar& bs, TensorImpl& out, const Scalar& alpha) {
  const int code = op == BinaryOp::Add ? 0 : op == BinaryOp::Sub ? 1 : op == BinaryOp::Mul ? 2 : -1;
  KILN_CHECK(code >= 0 && integral(as) && integral(bs) && integral(alpha), name,
             "int64 tensors on cuda support add, sub and mul by integers only so far");
  KILN_CHECK(out.is_contiguous(), name, "expected a contiguous int64 output on cuda, got ",
             describe(out));
  long long steps[2] = {0, 0};
  const TensorImpl* operands[2] = {a, b};
  for (int k = 0; k < 2; ++k) {
    const TensorImpl* t = operands[k];
    if (!t) continue;
    KILN_CHECK(t->dtype() == DType::Int64 &&
                   (t->numel() == 1 || (t->is_contiguous() && t->numel() == out.numel())),
               name,
               "int64 operands on cuda must be int64, contiguous of the output's size or "
               "single elements so far, got ",
               describe(*t));
    steps[k] = t->numel() == 1 ? 0 : 1;
  }
  long long n = out.numel();
  if (n == 0) return;
  void* o = out.raw_data();
  void* ap = a ? a->raw_data() : nullptr;
  void* bp = b ? b->raw_data() : nullptr;
  long long av = integer(as), bv = integer(bs), al = integer(alpha);
  int opcode = code;
  void* args[] = {&o, &ap, &av, &steps[0], &bp, &bv, &steps[1], &al, &opcode, &n};
  static const Kernel& k = kernel("int64", kInt64Source, "kiln_int64_binary");
  const unsigned grid = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 1024));
  k.launch(name, grid, 256, args, current_stream());
}

}  // namespace

void fill_int64(TensorImpl& out, int64_t value) {
  KILN_CHECK(out.device() == Device::CUDA && out.dtype() == DType::Int64, "fill",
             "expected an int64 tensor on cuda, got ", describe(out));
  int64_binary_out("fill", BinaryOp::Add, nullptr, value, nullptr, int64_t{0}, out, int64_t{1});
}

std::string int64_source() {
  return kInt64Source;
}

void binary_out(BinaryOp op, const TensorImpl* a, const Scalar& as, const TensorImpl* b,
                const Scalar& bs, TensorImpl& out, const Scalar& alpha) {
  const std::string_view name = kernels::binary_op_name(op);
  if (a) check_same_device(name, *a, "self", out, "out");
  if (b) check_same_device(name, *b, "other", out, "out");
  if (out.dtype() == DType::Int64) return int64_binary_out(name, op, a, as, b, bs, out, alpha);
  PointwiseExpr e;
  std::vector<const TensorImpl*> inputs;
  auto operand = [&](const TensorImpl* t, const Scalar& s) {
    if (!t) return e.constant(s.to_double());
    inputs.push_back(t);
    return e.input(static_cast<int>(inputs.size()) - 1);
  };
  const PointwiseExpr::Value x = operand(a, as);
  PointwiseExpr::Value y = operand(b, bs);
  if ((op == BinaryOp::Add || op == BinaryOp::Sub) && alpha.to_double() != 1.0) {
    y = e.binary(BinaryOp::Mul, y, e.constant(alpha.to_double()));
  }
  e.binary(op, x, y);
  pointwise_out(name, e, inputs, out, current_stream());
}

void unary_out(UnaryOp op, const TensorImpl& x, TensorImpl& out,
               const kernels::UnaryParams& params) {
  const std::string_view name = kernels::unary_op_name(op);
  check_same_device(name, x, "self", out, "out");
  PointwiseExpr e;
  e.unary(op, e.input(0), params);
  const TensorImpl* inputs[] = {&x};
  pointwise_out(name, e, inputs, out, current_stream());
}

void formula_out(std::string_view op, const char* formula, const TensorImpl& grad,
                 const TensorImpl& saved, std::span<const double> params, TensorImpl& out) {
  check_same_device(op, grad, "grad_output", out, "grad_input");
  check_same_device(op, saved, "saved", out, "grad_input");
  PointwiseExpr e;
  std::vector<PointwiseExpr::Value> args = {e.input(0), e.input(1)};
  for (double p : params) args.push_back(e.constant(p));
  e.call(formula, args);
  const TensorImpl* inputs[] = {&grad, &saved};
  pointwise_out(op, e, inputs, out, current_stream());
}

void mse_loss_out(const TensorImpl& input, const TensorImpl& target, int reduction,
                  TensorImpl& out) {
  constexpr std::string_view op = "mse_loss";
  check_same_device(op, input, "input", target, "target");
  check_same_device(op, input, "input", out, "out");
  KILN_CHECK(input.sizes() == target.sizes(), op, "expected target of the input's shape ",
             describe(input), ", got ", describe(target));
  PointwiseExpr e;
  const PointwiseExpr::Value d = e.binary(BinaryOp::Sub, e.input(0), e.input(1));
  e.binary(BinaryOp::Mul, d, d);
  const TensorImpl* inputs[] = {&input, &target};
  if (reduction == 0) return pointwise_out(op, e, inputs, out, current_stream());
  TensorImplPtr squared = empty(input.sizes(), DType::Float32, Device::CUDA);
  pointwise_out(op, e, inputs, *squared, current_stream());
  reduce_out(op, *squared, {}, reduction == 1, out);
}

void mse_loss_backward_out(const TensorImpl& grad, const TensorImpl& input,
                           const TensorImpl& target, int reduction, TensorImpl& grad_input) {
  constexpr std::string_view op = "mse_loss_backward";
  check_same_device(op, grad, "grad_output", grad_input, "grad_input");
  check_same_device(op, input, "input", grad_input, "grad_input");
  check_same_device(op, target, "target", grad_input, "grad_input");
  // 2 (input - target) grad, over n for the mean.
  const double scale = reduction == 1 && input.numel() > 0 ? 2.0 / input.numel() : 2.0;
  PointwiseExpr e;
  const PointwiseExpr::Value d = e.binary(BinaryOp::Sub, e.input(1), e.input(2));
  e.binary(BinaryOp::Mul, e.binary(BinaryOp::Mul, d, e.input(0)), e.constant(scale));
  const TensorImpl* inputs[] = {&grad, &input, &target};
  pointwise_out(op, e, inputs, grad_input, current_stream());
}

void copy_out(TensorImpl& dst, const TensorImpl& src) {
  constexpr std::string_view op = "copy_";
  if (dst.numel() == 0) return;
  if (dst.device() == Device::CPU) {  // from the device: a contiguous host copy, then the CPU's
    TensorImplPtr host = to_device(src, Device::CPU);  // copy_ (strides, dtypes, broadcasting)
    return kernels::copy_(dst, *host);
  }
  if (src.device() == Device::CPU) {
    // The source in dst's dtype and shape on the host, then one transfer.
    if (src.dtype() == dst.dtype() && src.sizes() == dst.sizes() && dst.is_contiguous()) {
      TensorImplPtr c = views::contiguous(src);
      return copy_to_device(reinterpret_cast<uintptr_t>(dst.raw_data()), c->data(), dst.nbytes(),
                            current_stream());
    }
    TensorImplPtr host = empty(dst.sizes(), dst.dtype());
    kernels::copy_(*host, src);
    TensorImplPtr staged = to_device(*host, Device::CUDA);
    return copy_out(dst, *staged);
  }
  // Masks to float32 (dropout's gradient): one byte to one float per element.
  if ((src.dtype() == DType::Bool || src.dtype() == DType::UInt8) &&
      dst.dtype() == DType::Float32 && src.is_contiguous() && dst.is_contiguous() &&
      src.sizes() == dst.sizes()) {
    long long n = dst.numel();
    void *o = dst.raw_data(), *i = src.raw_data();
    void* args[] = {&o, &i, &n};
    static const Kernel& k = kernel("cast", kInt64Source, "kiln_bytes_to_float");
    const unsigned grid = static_cast<unsigned>(std::min<long long>((n + 255) / 256, 1024));
    return k.launch(op, grid, 256, args, current_stream());
  }
  // Device to device: an identity pointwise kernel (any strides, broadcasting).
  KILN_CHECK(src.dtype() == dst.dtype(), op, "the CUDA backend copies float32 only so far, got ",
             describe(src), " into ", describe(dst));
  if (src.is_contiguous() && dst.is_contiguous() && src.sizes() == dst.sizes()) {
    return copy_device_to_device(reinterpret_cast<uintptr_t>(dst.raw_data()),
                                 reinterpret_cast<uintptr_t>(src.raw_data()), dst.nbytes(),
                                 current_stream());
  }
  PointwiseExpr e;
  e.input(0);
  const TensorImpl* inputs[] = {&src};
  pointwise_out(op, e, inputs, dst, current_stream());
}

TensorImplPtr to_device(const TensorImpl& t, Device device) {
  const char* op = device == Device::CUDA ? "to(cuda)" : "to(cpu)";
  if (t.device() == Device::CPU && device == Device::CPU) return views::contiguous(t);
  TensorImplPtr out = empty(t.sizes(), t.dtype(), device);
  if (t.numel() == 0) return out;
  if (t.device() == Device::CPU) {
    TensorImplPtr src = views::contiguous(t);
    copy_to_device(reinterpret_cast<uintptr_t>(out->raw_data()), src->data(), out->nbytes(),
                   current_stream());
    return out;
  }
  // From the device: non-contiguous views go through an identity pointwise kernel first.
  KILN_CHECK(t.is_contiguous() || t.dtype() == DType::Float32, op, "a non-contiguous ", describe(t),
             " view can only be copied for float32 so far");
  TensorImplPtr src(const_cast<TensorImpl*>(&t));
  if (!t.is_contiguous()) {
    src = empty(t.sizes(), t.dtype(), Device::CUDA);
    PointwiseExpr e;
    e.input(0);
    const TensorImpl* inputs[] = {&t};
    pointwise_out(op, e, inputs, *src, current_stream());
  }
  const DevicePtr from = reinterpret_cast<uintptr_t>(src->raw_data());
  if (device == Device::CUDA) {
    copy_device_to_device(reinterpret_cast<uintptr_t>(out->raw_data()), from, out->nbytes(),
                          current_stream());
  } else {
    copy_to_host(out->data(), from, out->nbytes(), current_stream());
  }
  return out;
}

}  // namespace kiln::cuda

#pragma once
// Generated pointwise kernels: an expression over float32 inputs becomes one CUDA C kernel
// (compiled by NVRTC, cached per expression), which reads each input once and writes the output
// once, whatever the chain's length. Eager unary/binary ops on CUDA tensors are one-op
// expressions; the compiler's fusion groups are longer ones (relu(x * a + b) * c is one pass).
// The unary formulas are the CPU's (kernels/unary_formulas.h compiled by NVRTC).

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/runtime/cuda/caching_allocator.h"
#include "kiln/runtime/kernels/elementwise.h"
#include "kiln/runtime/tensor.h"

namespace kiln::cuda {

class PointwiseExpr {
 public:
  using Value = int;
  // The element of input tensor `index` (0-based) at the output's position.
  Value input(int index);
  // A float32 number passed to the kernel at launch (rounded to float32): expressions that differ
  // only in their numbers share one compiled kernel.
  Value constant(double value);
  Value unary(kernels::UnaryOp op, Value x, const kernels::UnaryParams& params = {});
  // Add, Sub, Mul, Div, Pow, Maximum, Minimum (float results; comparisons are not pointwise
  // float ops).
  Value binary(kernels::BinaryOp op, Value a, Value b);
  // A function of kernels/unary_formulas.h (kiln::kernels::scalar::<formula>) on `args`.
  Value call(std::string_view formula, std::span<const Value> args);

  int num_inputs() const { return num_inputs_; }
  const std::vector<float>& constants() const { return constants_; }
  bool empty() const { return lines_.empty(); }
  // The kernel's element function: `float kiln_pointwise(float in0, ..., float c0, ...)`.
  std::string device_function() const;

 private:
  Value add(std::string expression);
  void check_defined(Value v) const;
  std::vector<std::string> lines_;
  std::vector<float> constants_;
  int num_inputs_ = 0;
};

// The complete CUDA C source of the kernels for `e` (contiguous and strided variants), as
// pointwise_out compiles it: what the NVRTC tests compile for sm_90 without a device.
std::string pointwise_source(const PointwiseExpr& e);

// out = e(inputs...): float32 tensors on the device; inputs broadcast to out's shape (any
// strides), out contiguous. Ordered on `stream`.
void pointwise_out(std::string_view op, const PointwiseExpr& e,
                   std::span<const TensorImpl* const> inputs, TensorImpl& out, StreamId stream);

}  // namespace kiln::cuda

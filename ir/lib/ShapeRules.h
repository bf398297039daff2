// The shape rules of the ops: each checks what the runtime kernel would check and computes the
// result shapes (and, where an operand does not give it, the element type) the kernel computes.
// ir/ops.toml names them per op ("verify"). The generated verifiers (KilnOpVerifiers.inc) call them
// on the op, where they check its results; the generated inferReturnTypes call them on the
// operands and attributes of an op not yet built, where they write its results' types.
// Dimensions that are dynamic (?) match anything; kiln.none operands are absent.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/ir/KilnDialect.h"
#include "llvm/ADT/SmallVector.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"

namespace kiln::ir::shape {

using llvm::ArrayRef;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::Value;
using mlir::ValueRange;
using Shape = llvm::SmallVector<int64_t, 6>;

// Where a rule reports: the op it verifies, or, while an op's result types are inferred (the op
// does not exist yet), its location (none: report nothing) and its name.
class Diag {
 public:
  Diag(Operation* op) : op_(op), ctx_(op->getContext()) {}  // NOLINT: implicit, for the verifiers
  Diag(mlir::MLIRContext* ctx, std::optional<mlir::Location> loc, llvm::StringRef name)
      : ctx_(ctx), loc_(loc), name_(name) {}
  // "'kiln.<op>' op <message>", as Operation::emitOpError.
  mlir::InFlightDiagnostic emitOpError(const llvm::Twine& message = {}) const;
  mlir::MLIRContext* context() const { return ctx_; }
  Operation* op() const { return op_; }  // null while inferring

 private:
  Operation* op_ = nullptr;
  mlir::MLIRContext* ctx_;
  std::optional<mlir::Location> loc_;
  llvm::StringRef name_;
};

// A result a rule determines: verifying, the op's result (checked against what the rule
// computes); inferring, where the rule writes the result's shape and, for the rules that decide
// it, its element type.
struct Result {
  Result(Value v) : value(v) {}  // NOLINT: implicit, for the verifiers
  Result(Shape* shape, mlir::Type* type) : shape(shape), type(type) {}
  Value value;
  Shape* shape = nullptr;
  mlir::Type* type = nullptr;
};

// Result types with equal element types and equal shapes, a dynamic (?) dim matching any size:
// the compatibility of inferred and declared result types.
bool compatible(mlir::TypeRange inferred, mlir::TypeRange declared);
// The element type of a ranked tensor value (the default element type of an inferred result).
mlir::Type element_type(Value v);
// PyTorch's promotion of two element types (floats beat integers, the wider wins; f16 with bf16
// gives f32), and its result_type for two tensors (a 0-d operand only raises the category).
mlir::Type promote_types(mlir::Type a, mlir::Type b);
mlir::Type result_type(mlir::RankedTensorType a, mlir::RankedTensorType b);

// --- shapes and types
// NumPy broadcasting of two shapes into `out` (dynamic dims stay dynamic); a mismatch is an
// error naming `op`, the dim and both sizes, emitted at `loc` when there is one.
LogicalResult broadcast_shapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                               llvm::SmallVectorImpl<int64_t>& out,
                               std::optional<mlir::Location> loc, llvm::StringRef op);
// Equal shapes: checked between two values; a result (inferred) takes the other's shape.
LogicalResult same_shape(const Diag& op, Value a, Value b);
LogicalResult same_shape(const Diag& op, Value a, Result b);
LogicalResult same_shape(const Diag& op, Result a, Result b);
// Element types: the result's is dtype; float_of: the input's if floating, else float32 (a float
// op on integers); sum_type_of: the input's if floating, else int64 (sum, prod, cumsum);
// promoted: result_type(a, b).
LogicalResult element_type_is(const Diag& op, Result v, DType dtype);
LogicalResult float_of(const Diag& op, Value input, Result result);
LogicalResult sum_type_of(const Diag& op, Value input, Result result);
LogicalResult promoted(const Diag& op, Value a, Value b, Result result);
LogicalResult dim_in_range(const Diag& op, Value input, int64_t dim);
LogicalResult broadcast3(const Diag& op, Value a, Value b, Value c, Result result);
LogicalResult copy(const Diag& op, Value dst, Value src, Result result);
LogicalResult channels(const Diag& op, Value x, int64_t dim, Result result);  // result is [x[dim]]
// The result's shape is `size`, each dim >= 0 (a random factory's: the size it was called with).
LogicalResult shape_is(const Diag& op, Result result, ArrayRef<int64_t> size);
// conv_transpose2d's bias: [weight.size(1) * groups].
LogicalResult transposed_channels(const Diag& op, Value weight, int64_t groups, Result result);
// A tensor of exactly one element (any rank): what a read-back reads.
LogicalResult one_element(const Diag& op, Value input);
// The result is input's leading (batch and channel) dims followed by `size`, the spatial dims
// (interpolate's output_size; the pooling and resampling gradients' input_size).
LogicalResult spatial_size(const Diag& op, Value input, ArrayRef<int64_t> size, Result result);

// --- reductions
LogicalResult reduce_dims(const Diag& op, Value input, ArrayRef<int64_t> dims, bool keepdim,
                          Result result);
// allow_flat: dim INT64_MIN reduces over all elements (argmax/argmin without a dim).
LogicalResult reduce_dim(const Diag& op, Value input, int64_t dim, bool keepdim, bool allow_flat,
                         Result values, Result indices);

// --- views
LogicalResult reshape(const Diag& op, Value input, ArrayRef<int64_t> shape, Result result);
LogicalResult transpose(const Diag& op, Value input, int64_t dim0, int64_t dim1, Result result);
LogicalResult permute(const Diag& op, Value input, ArrayRef<int64_t> dims, Result result);
LogicalResult slice(const Diag& op, Value input, int64_t dim, int64_t start, int64_t end,
                    int64_t step, Result result);
LogicalResult select(const Diag& op, Value input, int64_t dim, int64_t index, Result result);
LogicalResult expand(const Diag& op, Value input, ArrayRef<int64_t> shape, Result result);
LogicalResult as_strided(const Diag& op, Value input, ArrayRef<int64_t> sizes,
                         ArrayRef<int64_t> strides, int64_t offset, Result result);
LogicalResult cat(const Diag& op, ValueRange inputs, int64_t dim, Result result);
LogicalResult stack(const Diag& op, ValueRange inputs, int64_t dim, Result result);

// --- linear algebra and convolution
LogicalResult linear(const Diag& op, Value input, Value weight, Value bias, Result result);
LogicalResult attention(const Diag& op, Value query, Value key, Value value, Value mask,
                        bool seq_first, Result result);
LogicalResult conv2d(const Diag& op, Value input, Value weight, Value bias,
                     ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                     ArrayRef<int64_t> dilation, int64_t groups, Result result);
// conv2d, or with channels_last on input [N, H, W, C_in] into result [N, H_out, W_out, C_out].
LogicalResult conv2d_layout(const Diag& op, Value input, Value weight, Value bias,
                            ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                            ArrayRef<int64_t> dilation, int64_t groups, bool channels_last,
                            Result result);
LogicalResult conv2d_avgpool(const Diag& op, Value input, Value weight, Value bias, int64_t groups,
                             Result result);
LogicalResult conv1d(const Diag& op, Value input, Value weight, Value bias, int64_t stride,
                     int64_t padding, int64_t dilation, int64_t groups, Result result);
LogicalResult conv_transpose2d(const Diag& op, Value input, Value weight, Value bias,
                               ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                               ArrayRef<int64_t> output_padding, int64_t groups,
                               ArrayRef<int64_t> dilation, Result result);
// kiln.mbconv: expand 1x1 (or none) -> depthwise KHxKW -> project 1x1, float32 throughout.
LogicalResult mbconv(const Diag& op, Value input, Value expand_weight, Value expand_bias,
                     Value dw_weight, Value dw_bias, Value project_weight, Value project_bias,
                     ArrayRef<int64_t> stride, ArrayRef<int64_t> padding, Result result);
// A fused epilogue: a kernels::Activation with ordered clamp bounds, and a residual (or none) of
// exactly the result's type (added element by element, without broadcasting).
LogicalResult activation(const Diag& op, Activation activation, double clamp_min, double clamp_max);
LogicalResult fused_epilogue(const Diag& op, Value residual, Activation activation,
                             double clamp_min, double clamp_max, Value result);

// --- pooling and resampling
LogicalResult pool2d(const Diag& op, Value input, ArrayRef<int64_t> kernel,
                     ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                     ArrayRef<int64_t> dilation, bool ceil_mode, Result result);
LogicalResult adaptive_pool2d(const Diag& op, Value input, ArrayRef<int64_t> output_size,
                              Result result);
// `from` is the small side and `to` the resampled side (interpolate: input -> result;
// interpolate_backward: result <- grad).
LogicalResult interpolate(const Diag& op, Value from, Value to, InterpolateMode mode,
                          bool align_corners, double scale_h, double scale_w);

// --- indexing, embedding, losses, random
LogicalResult index_select(const Diag& op, Value input, Value index, int64_t dim, Result result);
LogicalResult embedding(const Diag& op, Value weight, Value indices, Result result);
LogicalResult pad(const Diag& op, Value input, ArrayRef<int64_t> pad, Result result);
LogicalResult one_hot(const Diag& op, Value index, int64_t num_classes, Result result);
LogicalResult topk(const Diag& op, Value input, int64_t k, int64_t dim, Result values,
                   Result indices);
LogicalResult class_loss(const Diag& op, Value input, Value target, Reduction reduction,
                         Result result);
// Class weights (or none): [C], C the class dim of input ([N, C, ...] or [C]).
LogicalResult class_weight(const Diag& op, Value input, Value weight);
// `v` (or none) broadcasts to `to`'s shape.
LogicalResult broadcasts_to(const Diag& op, Value v, Value to);
LogicalResult elementwise_loss(const Diag& op, Value input, Reduction reduction, Result result);
LogicalResult random_state(const Diag& op, Value state, Result next_state);
// A per-tensor scale and zero point: both 0-dim.
LogicalResult per_tensor_quant(const Diag& op, Value scale, Value zero_point);
// Quantization parameters: scale and zero_point of one shape, 0-dim or 1-dim with input's size
// along axis (in range).
LogicalResult quant_params(const Diag& op, Value input, Value scale, Value zero_point,
                           int64_t axis);

}  // namespace kiln::ir::shape

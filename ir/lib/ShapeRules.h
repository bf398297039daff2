// The shape rules the ops' verifiers run: each checks what the runtime kernel would check and that
// the result types are the ones the kernel computes. ir/ops.toml names them per op ("verify") and
// the generated verifiers (KilnOpVerifiers.inc) call them with the op's typed accessors.
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

// --- shapes and types
// NumPy broadcasting of two shapes into `out` (dynamic dims stay dynamic); a mismatch is an
// error naming `op`, the dim and both sizes, emitted at `loc` when there is one.
LogicalResult broadcast_shapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                               llvm::SmallVectorImpl<int64_t>& out,
                               std::optional<mlir::Location> loc, llvm::StringRef op);
LogicalResult same_shape(Operation* op, Value a, Value b);
LogicalResult element_type_is(Operation* op, Value v, DType dtype);
LogicalResult dim_in_range(Operation* op, Value input, int64_t dim);
LogicalResult broadcast3(Operation* op, Value a, Value b, Value c, Value result);
LogicalResult copy(Operation* op, Value dst, Value src, Value result);
LogicalResult channels(Operation* op, Value x, int64_t dim, Value result);  // result is [x[dim]]
LogicalResult same_batch_and_channels(Operation* op, Value a, Value b);

// --- reductions
LogicalResult reduce_dims(Operation* op, Value input, ArrayRef<int64_t> dims, bool keepdim,
                          Value result);
// allow_flat: dim INT64_MIN reduces over all elements (argmax/argmin without a dim).
LogicalResult reduce_dim(Operation* op, Value input, int64_t dim, bool keepdim, bool allow_flat,
                         Value values, Value indices);

// --- views
LogicalResult reshape(Operation* op, Value input, ArrayRef<int64_t> shape, Value result);
LogicalResult transpose(Operation* op, Value input, int64_t dim0, int64_t dim1, Value result);
LogicalResult permute(Operation* op, Value input, ArrayRef<int64_t> dims, Value result);
LogicalResult slice(Operation* op, Value input, int64_t dim, int64_t start, int64_t end,
                    int64_t step, Value result);
LogicalResult select(Operation* op, Value input, int64_t dim, int64_t index, Value result);
LogicalResult expand(Operation* op, Value input, ArrayRef<int64_t> shape, Value result);
LogicalResult as_strided(Operation* op, Value input, ArrayRef<int64_t> sizes,
                         ArrayRef<int64_t> strides, int64_t offset, Value result);
LogicalResult cat(Operation* op, ValueRange inputs, int64_t dim, Value result);
LogicalResult stack(Operation* op, ValueRange inputs, int64_t dim, Value result);

// --- linear algebra and convolution
LogicalResult linear(Operation* op, Value input, Value weight, Value bias, Value result);
LogicalResult conv2d(Operation* op, Value input, Value weight, Value bias, ArrayRef<int64_t> stride,
                     ArrayRef<int64_t> padding, ArrayRef<int64_t> dilation, int64_t groups,
                     Value result);
LogicalResult conv2d_avgpool(Operation* op, Value input, Value weight, Value bias, int64_t groups,
                             Value result);
LogicalResult conv1d(Operation* op, Value input, Value weight, Value bias, int64_t stride,
                     int64_t padding, int64_t dilation, int64_t groups, Value result);
LogicalResult conv_transpose2d(Operation* op, Value input, Value weight, Value bias,
                               ArrayRef<int64_t> stride, ArrayRef<int64_t> padding,
                               ArrayRef<int64_t> output_padding, int64_t groups,
                               ArrayRef<int64_t> dilation, Value result);
// A fused epilogue: a kernels::Activation with ordered clamp bounds, and a residual (or none) of
// exactly the result's type (added element by element, without broadcasting).
LogicalResult activation(Operation* op, Activation activation, double clamp_min, double clamp_max);
LogicalResult fused_epilogue(Operation* op, Value residual, Activation activation, double clamp_min,
                             double clamp_max, Value result);

// --- pooling and resampling
LogicalResult pool2d(Operation* op, Value input, ArrayRef<int64_t> kernel, ArrayRef<int64_t> stride,
                     ArrayRef<int64_t> padding, ArrayRef<int64_t> dilation, bool ceil_mode,
                     Value result);
LogicalResult adaptive_pool2d(Operation* op, Value input, ArrayRef<int64_t> output_size,
                              Value result);
// `from` is the small side and `to` the resampled side (interpolate: input -> result;
// interpolate_backward: result <- grad).
LogicalResult interpolate(Operation* op, Value from, Value to, InterpolateMode mode,
                          bool align_corners, double scale_h, double scale_w);

// --- indexing, embedding, losses, random
LogicalResult index_select(Operation* op, Value input, Value index, int64_t dim, Value result);
LogicalResult embedding(Operation* op, Value weight, Value indices, Value result);
LogicalResult pad(Operation* op, Value input, ArrayRef<int64_t> pad, Value result);
LogicalResult one_hot(Operation* op, Value index, int64_t num_classes, Value result);
LogicalResult topk(Operation* op, Value input, int64_t k, int64_t dim, Value values, Value indices);
LogicalResult class_loss(Operation* op, Value input, Value target, Reduction reduction,
                         Value result);
// Class weights (or none): [C], C the class dim of input ([N, C, ...] or [C]).
LogicalResult class_weight(Operation* op, Value input, Value weight);
// `v` (or none) broadcasts to `to`'s shape.
LogicalResult broadcasts_to(Operation* op, Value v, Value to);
LogicalResult elementwise_loss(Operation* op, Value input, Reduction reduction, Value result);
LogicalResult random_state(Operation* op, Value state, Value next_state);

}  // namespace kiln::ir::shape

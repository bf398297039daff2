#pragma once
// Indexing, joining and reordering kernels with PyTorch semantics: index_select / index_add_,
// gather / scatter_ / scatter_add_, masked_fill_ / masked_select, cat / stack / split / chunk,
// pad, one_hot, topk, sort / argsort.
//
// Indices: Int64 or Int32 tensors. Every index read from data is bounds-checked before anything
// is written; a bad one is a kiln::Error naming the op, the index and the size, e.g.
//   gather: index 7 is out of bounds for dim 1 with size 5
// Negative indices are errors here (as in PyTorch's index_select/gather/scatter).
// Outputs are caller-allocated (use the *_shape helpers); any strides are accepted.

#include <cstdint>
#include <span>
#include <vector>

#include "kiln/runtime/tensor.h"

namespace kiln::kernels {

// ---- index_select / index_add_ ----
// self.sizes() with sizes[dim] = index.numel(); index is 1-D or 0-dim.
Dims index_select_shape(const TensorImpl& self, int64_t dim, const TensorImpl& index);
// out[.., i, ..] = self[.., index[i], ..]; out dtype = self dtype.
void index_select_out(const TensorImpl& self, int64_t dim, const TensorImpl& index,
                      TensorImpl& out);
// self[.., index[i], ..] += alpha * source[.., i, ..] (repeated indices accumulate): the
// backward of index_select. source has self's shape with sizes[dim] = index.numel().
// self's slices at index along dim = source's (source: self's shape with index.numel() along dim;
// a repeated index takes its last slice), as torch.Tensor.index_copy_.
void index_copy_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& source);
void index_add_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& source,
                double alpha = 1.0);

// ---- gather / scatter ----
// out[p] = self[p with p[dim] = index[p]]; out has index's shape and self's dtype;
// index.size(d) <= self.size(d) for d != dim.
void gather_out(const TensorImpl& self, int64_t dim, const TensorImpl& index, TensorImpl& out);
// self[p with p[dim] = index[p]] = src[p] for every p in index's shape (serial order: with
// repeated indices the last write wins). index.size(d) <= src.size(d), and <= self.size(d) for
// d != dim.
void scatter_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& src);
void scatter_(TensorImpl& self, int64_t dim, const TensorImpl& index, double value);
// self[p with p[dim] = index[p]] += src[p].
void scatter_add_(TensorImpl& self, int64_t dim, const TensorImpl& index, const TensorImpl& src);

// ---- masks ----
// self[mask] = value; mask Bool (or UInt8, nonzero = true), broadcastable to self.
void masked_fill_(TensorImpl& self, const TensorImpl& mask, double value);
// The elements of broadcast(self, mask) where mask is true, in row-major order (1-D, new tensor).
TensorImplPtr masked_select(const TensorImpl& self, const TensorImpl& mask);

// ---- joining and splitting ----
// Same rank, sizes equal except along dim (1-D empty tensors are skipped, as in PyTorch).
Dims cat_shape(std::span<const TensorImpl* const> tensors, int64_t dim);
// Values converted to out's dtype.
void cat_out(std::span<const TensorImpl* const> tensors, int64_t dim, TensorImpl& out);
// All the same shape; a new dim at `dim` (in [-(rank+1), rank]).
Dims stack_shape(std::span<const TensorImpl* const> tensors, int64_t dim);
void stack_out(std::span<const TensorImpl* const> tensors, int64_t dim, TensorImpl& out);
// Views (no copies): pieces of split_size along dim (the last may be smaller).
std::vector<TensorImplPtr> split(const TensorImpl& self, int64_t split_size, int64_t dim = 0);
std::vector<TensorImplPtr> split_with_sizes(const TensorImpl& self,
                                            std::span<const int64_t> split_sizes, int64_t dim = 0);
// ceil(size / chunks) per piece, as torch.chunk (may return fewer than `chunks` pieces).
std::vector<TensorImplPtr> chunk(const TensorImpl& self, int64_t chunks, int64_t dim = 0);

// ---- pad ----
// PyTorch's pad spec: (left, right) for the last dim, then for the one before, ...; at most
// 2 * rank values. Constant pads may be negative (crop); reflect needs 0 <= pad < size, and
// replicate a non-empty dim.
enum class PadMode { Constant, Reflect, Replicate };
Dims pad_shape(std::span<const int64_t> sizes, std::span<const int64_t> pad);
void pad_out(const TensorImpl& self, std::span<const int64_t> pad, PadMode mode, double value,
             TensorImpl& out);

// ---- one_hot ----
// index.sizes() + [num_classes]; num_classes = -1 infers max(index) + 1 (from the data).
Dims one_hot_shape(const TensorImpl& index, int64_t num_classes = -1);
// out (any dtype, usually Int64) = 1 where the class matches, else 0.
void one_hot_out(const TensorImpl& index, TensorImpl& out);

// ---- topk / sort ----
// self.sizes() with sizes[dim] = k.
Dims topk_shape(const TensorImpl& self, int64_t k, int64_t dim = -1);
// The k largest (or smallest) along dim, with Int64 indices. NaN counts as larger than every
// number (as in PyTorch); equal values keep their original order. Results are always sorted.
void topk_out(const TensorImpl& self, int64_t k, int64_t dim, bool largest, bool sorted,
              TensorImpl& values, TensorImpl& indices);
// Stable sort along dim (ascending or descending; NaN last when ascending, first when
// descending). values: self's shape and dtype; indices: Int64.
void sort_out(const TensorImpl& self, int64_t dim, bool descending, TensorImpl& values,
              TensorImpl& indices);
void argsort_out(const TensorImpl& self, int64_t dim, bool descending, TensorImpl& indices);

}  // namespace kiln::kernels

#pragma once
// Internal to codegen/src/lower: the loop-nest emitter. A kernel evaluates one value (or several:
// a kiln.fused's results) over its shape: the tree of deferred elementwise ops (and kiln.fused
// bodies) below it is computed per element from its leaves (materialized views, read through their
// strides with NumPy broadcasting) and splat constants. Dims every operand walks in step are
// coalesced, so a dense chain is one flat loop; the outermost dim is split over the thread pool
// when the kernel is large. With a vector width (LowerOptions::vector_bits) the body becomes a
// linalg.generic that vectorize.cpp tiles and vectorizes (linalg_kernels.cpp); else, and for
// kernels it does not take, scalar loops that LLVM's loop vectorizer widens. A row kernel (softmax,
// log-softmax, layer norm over the last dim, or logsumexp, sum, mean, amax, amin reducing it) keeps
// the last dim and makes passes over each row: with a vector width, each a linalg.generic over the
// row (linalg_rows.cpp), else scalar loops (row_kernels.cpp).
//
// The kernel is its own function  void kiln_kernel_N(void** ctx, i64 begin, i64 end)  over
// [begin, end) of the outermost dim; ctx holds the outputs' and the leaves' base pointers.

#include <optional>

#include "llvm/ADT/STLFunctionalExtras.h"
#include "lowering.h"
#include "mlir/Dialect/Math/IR/Math.h"

namespace kiln::codegen::detail {
using mlir::Type;
using mlir::Value;

class KernelEmitter {
 public:
  KernelEmitter(Lowering& low, Value root, const View& dest)
      : low_(low), root_(root), dest_(dest), b_(low.module().getContext()), loc_(low.loc()) {}
  // A row kernel: dest = softmax, log-softmax or layer norm (with an optional weight and bias
  // over the row) over the last dim of `root`'s elementwise tree; or a reduction of each row to
  // one value (logsumexp, sum, mean, amax, amin, var; dest: the root's sizes, its last dim at
  // stride 0). `param`: a layer norm's eps, a variance's correction (1: unbiased).
  enum class Row { None, Softmax, LogSoftmax, LayerNorm, LogSumExp, Sum, Mean, Amax, Amin, Var };
  // Whether the row kernel stores one value per row (a reduction).
  static bool reduces_row(Row row) {
    return row == Row::LogSumExp || row == Row::Sum || row == Row::Mean || row == Row::Amax ||
           row == Row::Amin || row == Row::Var;
  }
  KernelEmitter(Lowering& low, Value root, const View& dest, Row row, Value weight = {},
                Value bias = {}, double param = 0)
      : KernelEmitter(low, root, dest) {
    row_ = row, row_weight_ = weight, row_bias_ = bias, param_ = param;
  }
  // More results computed by the same loop nest, each into a destination laid out like dest.
  KernelEmitter(Lowering& low, llvm::ArrayRef<Value> roots, llvm::ArrayRef<View> dests)
      : KernelEmitter(low, roots[0], dests[0]) {
    for (size_t k = 1; k < roots.size(); ++k) more_.push_back({roots[k], dests[k]});
  }

  // The kernel as a product's block epilogue (a kiln.fused marked ir::kBlockEpilogueAttr; root:
  // its result, `product`: the product's result):
  //   void kiln_epilogue_N(ptr ctx, ptr c, i64 offset, i64 ldc, i64 rows, i64 cols)
  // computes the chain for c[r * ldc + j] (element offset + r * ldc + j of the product's value)
  // for r < rows, j < cols, as kernels::BlockEpilogue calls it; ctx holds the leaves' base
  // pointers. `in_place`: the product's value is already given dest as its view and is mapped in
  // place; else (the value is needed too) the chain writes dest's element at the same offset,
  // dest's base the last entry of ctx. Nothing is emitted, and nullopt returned, when another
  // leaf shares dest's buffer (its elements would be overwritten before the chain reads them).
  // With no `product` the same function writes the chain's value at c (a block prologue).
  using BlockFunction = BlockEpilogueFn;
  std::optional<BlockFunction> emit_block_epilogue(Value product, bool in_place = true);

  void emit() {
    collect(root_, /*is_root=*/true);
    for (const auto& [root, dest] : more_) collect(root, /*is_root=*/true);
    for (Value v : {row_weight_, row_bias_})
      if (v) collect(v, /*is_root=*/false);
    coalesce();
    build_function();
    call_function();
  }

 private:
  struct Leaf {
    Value value;
    View view;
    llvm::SmallVector<int64_t> strides;  // over the kernel's (coalesced) dims
    Value ptr, offset;                   // inside the kernel
  };

  // ---- structure ----
  Value node_of(Value v) const { return Lowering::resolve(v); }

  void collect(Value v, bool is_root);

  // Merges adjacent dims every operand steps over as one and drops size-1 dims.
  void coalesce();

  bool merge_ok(size_t d, const llvm::SmallVector<llvm::SmallVector<int64_t>>& kept) const;

  // ---- the kernel function ----
  void build_function();
  // A new kernel function void(ptr ctx, i64 begin, i64 end) named name_; the builder at the start
  // of its entry block, which it returns. A vector kernel's is marked for the vector pipeline
  // (kVectorKernelAttr: the options' width).
  mlir::Block* begin_function(bool vector = false);
  // The pointer in slot `slot` of the kernel's context array (0: the result, then the further
  // results, then the leaves).
  Value context_pointer(Value ctx, int64_t slot);
  // Whether this kernel goes through the vector pipeline (linalg_kernels.cpp): a plain
  // elementwise nest (not a row kernel) over more than one element, every operand contiguous or
  // broadcast along the innermost dim or read in transposed tiles (transposed_dim), when the
  // options give a vector width.
  bool vector_kernel() const;
  // The dim along which the leaves read across the innermost dim are contiguous, when the vector
  // pipeline tiles them as transposes; -1 when there are none or it does not.
  int transposed_dim() const;
  // The side of a transposed tile: one vector register's lanes.
  int64_t transpose_tile() const;
  // The widest element (in memory) the kernel reads or writes.
  unsigned element_bits() const;
  // The kernel function as one linalg.generic on tensors over [begin, end) of the outermost dim:
  // each leaf a strided memref view of its buffer (broadcast dims projected out of its indexing
  // map), each result materialized in its destination; vectorize.cpp tiles, vectorizes and
  // bufferizes it.
  void build_vector_function();
  // A strided memref of `elem` over the buffer at `base` (the LLVM dialect's memref descriptor,
  // cast to the memref type; the memref lowering reads the struct back, so the pair folds away):
  // `shape` (kDynamic: `dynamic_size`), `strides`, its offset in elements `offset` (an i64),
  // `static_offset` in the layout when known (else dynamic).
  Value strided_memref(Value base, Value offset, std::optional<int64_t> static_offset,
                       llvm::ArrayRef<int64_t> shape, llvm::ArrayRef<int64_t> strides,
                       Value dynamic_size, Type elem);
  // Inside a linalg.generic's body: leaf k's element is `element` (a byte read as a bool is
  // truncated to i1), for eval().
  void bind_leaf(size_t k, Value element);
  // Whether this row kernel goes through the vector pipeline (linalg_rows.cpp): every operand
  // contiguous or broadcast along the row, rows of more than one element, a vector width given.
  bool vector_row_kernel() const;
  // The row kernel's function: loops over the rows, and in each the kernel's passes as
  // linalg.generic on tensors over the row (reductions into rank-0 tensors), which vectorize.cpp
  // tiles (reductions into one tile of partial results), vectorizes and bufferizes.
  void build_vector_row_function();
  // Opens the scalar loops over the kernel's first `dims` dims (the first over [begin, end) of
  // `block`'s arguments); ivs_ holds their induction variables, the builder is in the innermost.
  void open_loops(mlir::Block* block, size_t dims);
  // Offset of an element in the kernel's loops (ivs_): base + sum ivs_[d] * strides[d].
  Value offset(int64_t base, llvm::ArrayRef<int64_t> strides);

  // ---- row kernels (row_kernels.cpp) ----
  // The body of a row kernel's function, inside the loops over the rows (ivs_).
  void emit_row();
  // A loop over the row's elements: body(the element's offset in dest, the carried value) returns
  // the next carried value; returns the last (null init: nothing carried).
  Value row_pass(Value init, llvm::function_ref<Value(Value at, Value carried)> body);
  // Points the leaves at the row element the innermost loop is at (a new loop's values).
  void leaves_at_element();
  void softmax_row(bool log);
  void layer_norm_row();
  void logsumexp_row();
  void reduce_row();  // sum, mean, var (summed in float64), amax, amin (NaN-propagating)

  void call_function();
  // ---- column kernels (column_kernels.cpp) ----
 public:
  // Collects the tree and views dest's dims as [A, R, I]: before `first`, [first, last], after
  // `last`. False when an operand does not step over one of them as over one dim.
  bool can_emit_columns(int64_t first, int64_t last);
  // After can_emit_columns: the column kernel (row_: Sum, Mean, Amax or Amin) into `dest`
  // (dest_ with its buffer).
  void emit_columns(const View& dest);

 private:
  bool coalesce_columns(int64_t first, int64_t last);

  // ---- block epilogues (block_epilogue.cpp) ----
  // Inside the epilogue's loops over the block's rows: the run of `count` elements of dest from
  // flat index `start` (i64 values), split where it crosses the kernel's innermost dim.
  void block_run(Value start, Value count);
  // Whether the runs are 1-D linalg.generic maps for the vector pipeline: a vector width given,
  // every leaf read along the run or broadcast over it.
  bool vector_block_epilogue() const;
  // The run's segment of `n` elements at the indices ivs_ (its first element) as such a map.
  void vector_segment(Value n);

  // ---- scalar code ----
  Value load(Value base, Value off, Type elem);
  void store(Value base, Value off, Value v, Type elem);

  Value constant(double value, Type t);

  Value convert(Value x, Type to);

  static Type element(Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType()).getElementType();
  }

  double f64_attr(mlir::Operation* op, const char* name, double fallback);

  Value libm(const char* f64_name, Value x);

  // (f32 math.exp, .log, .log1p, .tanh, .erf become F32Math's in to_llvm.cpp; sigmoid, silu and
  // gelu are F32Math's here.)
  Value exp(Value x) { return b_.create<mlir::math::ExpOp>(loc_, x); }
  Value sigmoid(Value x);
  Value tanh(Value x);
  Value erf(Value x);

  Value eval(Value v);

  Value compute(Value v);

  Value unsupported(mlir::Operation* op, const std::string& what);

  Lowering& low_;
  Value root_;
  View dest_;
  llvm::SmallVector<std::pair<Value, View>> more_;
  Row row_ = Row::None;
  Value row_weight_, row_bias_;  // a layer norm's (absent: null)
  double param_ = 0;             // a layer norm's eps, a variance's correction
  mlir::OpBuilder b_;
  mlir::Location loc_;
  std::string name_;
  std::vector<Leaf> leaves_;
  llvm::DenseMap<Value, size_t> leaf_index_;
  llvm::DenseSet<Value> visited_;
  llvm::DenseMap<Value, Value> memo_;
  llvm::DenseMap<Value, Value> leaf_args_;  // vector kernels: a leaf's element in the generic
  llvm::SmallVector<int64_t> sizes_, out_strides_;
  Value out_ptr_;
  llvm::SmallVector<Value> ivs_;  // the loops' induction variables, outermost first
};

// The reduction `op` computes of each row (or column) of its input, if it is one a row kernel
// takes: logsumexp, sum, mean, amax, amin, var (row_kernels.cpp).
KernelEmitter::Row reduction_row(mlir::Operation* op);

}  // namespace kiln::codegen::detail

#pragma once
// Internal: the kiln → loops/ABI-calls lowering of @forward (see kiln/codegen/lower.h). One
// Lowering object rewrites one module; kernels.cpp emits the fused loop nests, abi_calls.cpp the
// runtime calls, lowering.cpp drives both and owns buffers and views.

#include <map>
#include <optional>
#include <string>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringSet.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include "kiln/codegen/lower.h"

namespace kiln::codegen::detail {

// A materialized tensor: a strided view (elements) of a buffer whose base pointer is an SSA value
// of the entry function.
struct View {
  mlir::Value base;
  int64_t offset = 0;
  llvm::SmallVector<int64_t> sizes, strides;
  mlir::Type elem;  // element type of the tensor (i1 is stored as one byte)
  bool contiguous() const;
};

llvm::SmallVector<int64_t> contiguous_strides(llvm::ArrayRef<int64_t> sizes);
int64_t numel(llvm::ArrayRef<int64_t> sizes);
// The type an element occupies in memory (i1 → i8).
mlir::Type memory_type(mlir::Type elem);
int64_t element_bytes(mlir::Type elem);
// kiln::DType's numbering for an element type; -1 when the runtime has no such dtype.
int dtype_code(mlir::Type elem);

// The op names each lowering strategy takes ("kiln.add"); the runtime-kernel calls by bare name
// ("conv2d", as kiln_abi_conv2d).
const llvm::StringSet<>& elementwise_ops();
const llvm::StringSet<>& view_ops();
bool has_abi_kernel(llvm::StringRef op);

// A generated block epilogue (block_epilogue.cpp) for a product's runtime call: its function,
// its context array, and the buffers it reads while the product runs.
struct BlockEpilogueFn {
  std::string name;
  mlir::Value ctx;
  llvm::SmallVector<mlir::Value> bases;
};

class Lowering {
 public:
  Lowering(mlir::ModuleOp module, const LowerOptions& options);
  // Rewrites the module (on success) and returns the entry point's signature.
  bool run(std::string* error, EntrySignature* signature);

  // ---- used by kernels.cpp / abi_calls.cpp ----
  mlir::OpBuilder& builder() { return builder_; }
  mlir::Location loc() const { return loc_; }
  mlir::Type ptr_type() const;
  // The view of a value, emitting the kernel that computes it if it is still deferred.
  View& view(mlir::Value v);
  // A fresh buffer (kiln_abi_alloc) for a value of `type`, or the caller's result buffer when v
  // is a result of @forward.
  View destination(mlir::Value v);
  // v's dense, contiguous geometry at offset 0, without a buffer (base unset).
  View destination_shape(mlir::Value v);
  // Records that the generated op `user` reads/writes the buffer behind `base` (frees go after
  // the last such op).
  void note_use(mlir::Value base, mlir::Operation* user);
  // A stack array of n pointers, allocated once at the top of the entry point (never inside a
  // loop, where each iteration would grow the stack).
  mlir::Value stack_array(int64_t n);
  // Declares (once) a function in the module and returns its symbol name.
  void declare(llvm::StringRef name, mlir::FunctionType type);
  // True when the elementwise emitter can compute v from its operands (an elementwise op).
  static bool is_elementwise(mlir::Operation* op);
  // The value a kiln.fused body argument stands for, or v itself.
  static mlir::Value resolve(mlir::Value v);
  // A splat constant's value (0-dim or splat kiln.constant), if v is one.
  static std::optional<mlir::TypedAttr> splat_value(mlir::Value v);
  // Whether v is computed inside the consumer's loop instead of stored.
  bool deferred(mlir::Value v) const;
  bool has_view(mlir::Value v) const { return views_.count(v) != 0; }
  mlir::ModuleOp module() { return module_; }
  const LowerOptions& options() const { return options_; }
  // Emits the fused loop nest that writes `root` (elementwise, evaluated over dest's shape).
  void emit_kernel(mlir::Value root, const View& dest);
  // One loop nest writing several values (a kiln.fused's results: their shared subexpressions
  // computed once) when the destinations share a layout; else one nest each.
  void emit_kernel(llvm::ArrayRef<mlir::Value> roots, llvm::ArrayRef<View> dests);
  // Softmax / log-softmax over the last dim (float32/64, static shape) as a generated row kernel
  // (kernels.cpp) that also computes its input's elementwise tree, instead of a runtime call.
  static bool has_row_kernel(mlir::Operation* op);
  void emit_row_kernel(mlir::Operation* op);
  // sum / mean / amax / amin over a block of consecutive dims that keeps the last dim (float32/64,
  // static shape) as a generated column kernel (column_kernels.cpp) that also computes its
  // input's elementwise tree. emit_column_kernel is false (nothing emitted) when an operand of
  // the tree does not step over each group of dims as over one: the runtime's kernel then.
  static bool has_column_kernel(mlir::Operation* op);
  bool emit_column_kernel(mlir::Operation* op);
  // Emits a runtime call for op (false if the op is not an ABI op); with `epilogue`, the op's
  // kiln_abi_<op>_epilogue entry point, which runs it on each block of the result; with
  // `prologue` (a linear's or matmul's), kiln_abi_<op>_prologue, which computes the input (tensor
  // 0) block by block with it, and runs the epilogue (or none).
  bool emit_abi_call(mlir::Operation* op, const BlockEpilogueFn* epilogue = nullptr,
                     const BlockEpilogueFn* prologue = nullptr);
  // A conv2d / linear / matmul whose only user is a kiln.fused marked ir::kBlockEpilogueAttr (the
  // product with the chain as its block epilogue, both results in one buffer), and a linear or
  // matmul whose input is a deferred kiln.fused marked ir::kBlockPrologueAttr (computed block by
  // block by the product's call, never stored whole). False: not such a product.
  bool emit_product_with_blocks(mlir::Operation* op);
  // A kiln.fused marked ir::kBlockPrologueAttr whose value the next op, a linear or a matmul by a
  // [K, N] matrix, computes.
  bool is_block_prologue(mlir::Operation* op) const;
  bool has_constant_weight(mlir::Operation* op, llvm::StringRef name);
  void error(mlir::Operation* op, const std::string& message);
  // Per-module counters: symbol names are deterministic for a given module.
  int next_kernel_id() { return num_kernels_++; }

 private:
  bool lower_op(mlir::Operation* op);
  // LowerOptions::block_epilogue_input / block_prologue: the entry point as the chain's block
  // epilogue or prologue (block_epilogue.cpp). False, with errors_ set, when @forward is not
  // such a chain.
  bool emit_block_entry(mlir::Block& body, mlir::func::ReturnOp ret);
  // checks.cpp: every op of @forward that cannot be compiled, into errors_ (`body`: its block).
  void check_module(mlir::Block& body);
  // Whether some strategy (loops, views, control flow, a runtime call) takes op.
  static bool has_lowering(mlir::Operation* op);
  static std::string unsupported_element_type(mlir::Operation* op);
  void lower_block(mlir::Block& block);
  // Scalar glue (arith on index/integers, tensor.extract / from_elements) and scf.if / scf.for
  // from kiln::cond / kiln::loop. False when op is none of these.
  bool lower_control_flow(mlir::Operation* op);
  mlir::Value load_scalar(const View& v);
  void plan_in_place_updates(mlir::Block& body, llvm::ArrayRef<View> carries);
  bool lower_view_op(mlir::Operation* op);
  View constant_view(mlir::Operation* op);
  void emit_frees();
  // base + offset bytes (a GEP; offsets of any size).
  mlir::Value byte_offset(mlir::Value base, int64_t offset);
  static size_t first_result_slot(mlir::func::ReturnOp ret, mlir::Value v);

  mlir::ModuleOp module_;
  LowerOptions options_;
  mlir::OpBuilder builder_;
  mlir::Location loc_;
  mlir::func::FuncOp forward_;
  mlir::func::FuncOp entry_;
  llvm::DenseMap<mlir::Value, View> views_;
  llvm::DenseMap<mlir::Value, bool> deferred_;
  llvm::DenseMap<mlir::Value, mlir::Value> scalars_;         // @forward scalar → entry scalar
  llvm::DenseMap<mlir::Value, mlir::Value> result_buffers_;  // @forward result → caller buffer
  // Results computed in a loop's carried buffer (see scf.for in control_flow.cpp).
  llvm::DenseMap<mlir::Value, View> in_place_;
  llvm::DenseSet<mlir::Value> written_results_;
  struct Owned {
    int64_t nbytes = 0;
    mlir::Operation* alloc = nullptr;     // its kiln_abi_alloc call
    mlir::Operation* last_use = nullptr;  // in the allocation's block (regions: their parent op)
  };
  llvm::MapVector<mlir::Value, Owned> owned_;
  llvm::DenseMap<mlir::Operation*, int> op_index_;
  std::vector<mlir::Operation*> kernel_calls_;  // kiln_abi_<op> calls (scratch leases)
  std::string errors_;
  int num_constants_ = 0;
  int num_kernels_ = 0;
  int num_descs_ = 0;
  std::vector<std::string> prepared_slots_;  // globals of *_prepared call sites
  void emit_release();
};

}  // namespace kiln::codegen::detail

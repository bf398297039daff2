#pragma once
// kiln's C ABI: the entry points that generated code (JIT or AOT, any target) calls in the
// runtime. Plain C types only, so LLVM IR can declare them without knowing C++; every function is
// a thin wrapper over a kernel in kiln/runtime/kernels/*.h. The names and the descriptor layout
// below are a stable contract between codegen/ and runtime/: extend, never reorder (and bump
// kiln::codegen::kAbiVersion, which keys the compile cache, on any incompatible change).
//
// Op calls all have one shape:
//     void kiln_abi_<op>(void* const* data, const int64_t* desc);
// `data` holds the base pointer of each tensor operand, inputs then outputs (NULL for an absent
// optional operand). `desc` is a constant the code generator lays out at compile time:
//     desc[0] = T, the number of tensors; then per tensor:
//         dtype (kiln::DType's value, -1 = absent), rank r, sizes[r], strides[r] (elements),
//         offset (elements from its data pointer);
//     then the op's attributes in the order its wrapper documents: integers as is, booleans as
//     0/1, doubles as their IEEE-754 bit pattern, integer arrays as (n, v0 .. v(n-1)), strings
//     as their byte count n and then the bytes packed 8 to a word ((n + 7) / 8 words).
// Outputs are written in place (any strides). A kernel's error (a kiln::Error) cannot unwind
// through generated frames: the wrapper records the first one per thread and returns; the caller
// of the generated entry point collects it with kiln_abi_take_error() and throws.
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ---- memory: 64-byte aligned blocks from the runtime's caching allocator ----
void* kiln_abi_alloc(int64_t nbytes);
void kiln_abi_free(void* ptr, int64_t nbytes);  // nbytes as passed to kiln_abi_alloc
// Lends [base, base + nbytes) to this thread's kernel scratch (kiln::ScratchLease) until the
// matching kiln_abi_lease_end: generated code passes the arena bytes no live buffer holds around
// a kernel call, as the artifact executor does. Leases nest (the outer one returns at the end);
// KILN_ABI_NO_LEASE=1 in the environment ignores them (for comparisons).
void kiln_abi_lease_begin(void* base, int64_t nbytes);
void kiln_abi_lease_end(void);

// ---- parallelism: fn(ctx, b, e) over chunks of [begin, end) on the runtime's thread pool ----
typedef void (*kiln_abi_range_fn)(void* ctx, int64_t begin, int64_t end);
void kiln_abi_parallel_for(int64_t begin, int64_t end, int64_t grain, kiln_abi_range_fn fn,
                           void* ctx);

// ---- errors ----
// The first error recorded on this thread since the last call (a malloc'ed copy the caller frees
// with kiln_abi_free_error), or NULL.
char* kiln_abi_take_error(void);
void kiln_abi_free_error(char* message);
// Records an error (used by the wrappers; generated code may call it for failed run-time checks).
void kiln_abi_set_error(const char* message);

// ---- ops ----
// One entry point per op that code generation lowers to a runtime call, generated from the op
// schema (ir/ops.toml) into abi_ops.inc, which documents each op's tensors and attribute order.
#define KILN_ABI_OP_ENTRY(name) void kiln_abi_##name(void* const* data, const int64_t* desc);
#include "kiln/runtime/abi_ops.inc"
#undef KILN_ABI_OP_ENTRY

// Elementwise ops code generation also calls when it does not emit their loops:
void kiln_abi_dropout(void* const* data, const int64_t* desc);      // x, mask, out; p
void kiln_abi_masked_fill(void* const* data, const int64_t* desc);  // x, mask, out; value
void kiln_abi_copy(void* const* data, const int64_t* desc);  // src, out (any strides, dtypes)

// The conv, linear and matmul ops for a constant weight (matmul: its right operand): `slot` is a
// pointer-sized, zero-initialized variable of the caller's, one per call site, that lives as long
// as the code; the first call stores the weight prepared for the GEMM (or Winograd) there and later
// calls reuse it. Never call these with a weight whose values change. Tensors and attributes as the
// op's entry point above.
void kiln_abi_matmul_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_linear_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_linear_fused_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_conv2d_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_conv2d_fused_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_conv2d_avgpool_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_mbconv_prepared(void* const* data, const int64_t* desc, void** slot);
// An elementwise epilogue generated code runs in place on each block of a product's output the
// kernel finishes (kiln::kernels::BlockEpilogue): c[r * ldc + j] for r < rows, j < cols, where c[0]
// is element `offset` of the (dense, float32) output; ctx is the generated code's.
typedef void (*kiln_abi_block_epilogue)(const void* ctx, float* c, int64_t offset, int64_t ldc,
                                        int64_t rows, int64_t cols);
// matmul, linear, linear_fused, conv2d and conv2d_fused with such an epilogue after their own:
// tensors and attributes as the op's entry point, `slot` as the *_prepared ones' or null (a weight
// that is not constant), fn and ctx the epilogue.
void kiln_abi_matmul_epilogue(void* const* data, const int64_t* desc, void** slot,
                              kiln_abi_block_epilogue fn, const void* ctx);
void kiln_abi_linear_epilogue(void* const* data, const int64_t* desc, void** slot,
                              kiln_abi_block_epilogue fn, const void* ctx);
void kiln_abi_linear_fused_epilogue(void* const* data, const int64_t* desc, void** slot,
                                    kiln_abi_block_epilogue fn, const void* ctx);
void kiln_abi_conv2d_epilogue(void* const* data, const int64_t* desc, void** slot,
                              kiln_abi_block_epilogue fn, const void* ctx);
void kiln_abi_conv2d_fused_epilogue(void* const* data, const int64_t* desc, void** slot,
                                    kiln_abi_block_epilogue fn, const void* ctx);
// linear, linear_fused and matmul (with a [K, N] right operand) whose input generated code
// computes block by block: tensor 0 is described (float32, its shape) with a null data pointer;
// `prologue` writes its elements at the flat offsets it is given into the runtime's block of rows
// (the block epilogue's signature, c written rather than mapped), the product reading each block
// right after; `epilogue` (or null) as in kiln_abi_linear_epilogue.
void kiln_abi_matmul_prologue(void* const* data, const int64_t* desc, void** slot,
                              kiln_abi_block_epilogue prologue, const void* prologue_ctx,
                              kiln_abi_block_epilogue epilogue, const void* epilogue_ctx);
void kiln_abi_linear_prologue(void* const* data, const int64_t* desc, void** slot,
                              kiln_abi_block_epilogue prologue, const void* prologue_ctx,
                              kiln_abi_block_epilogue epilogue, const void* epilogue_ctx);
void kiln_abi_linear_fused_prologue(void* const* data, const int64_t* desc, void** slot,
                                    kiln_abi_block_epilogue prologue, const void* prologue_ctx,
                                    kiln_abi_block_epilogue epilogue, const void* epilogue_ctx);
// Frees what a *_prepared call site stored in its slot and resets the slot (the JIT calls the
// generated <entry>_release(), which calls this for every slot, before unloading the code).
void kiln_abi_release_prepared(void** slot);

#ifdef __cplusplus
}  // extern "C"
#endif

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
//     0/1, doubles as their IEEE-754 bit pattern, integer arrays as (n, v0 .. v(n-1)).
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

// ---- ops (attribute order after each name) ----
// linear algebra
void kiln_abi_matmul(void* const* data, const int64_t* desc);  // a, b, out
void kiln_abi_linear(void* const* data, const int64_t* desc);  // x, w, bias?, out
// act(x @ w^T + bias + residual): x, w, bias?, residual?, out; activation, clamp_min, clamp_max
void kiln_abi_linear_fused(void* const* data, const int64_t* desc);
// convolution and pooling
void kiln_abi_conv2d(void* const* data,
                     const int64_t* desc);  // stride[], padding[], dilation[], groups
// x, w, bias?, residual?, out; stride[], padding[], dilation[], groups, activation, clamp_min/max
void kiln_abi_conv2d_fused(void* const* data, const int64_t* desc);
// The same for a constant weight: `slot` is a pointer-sized, zero-initialized variable of the
// caller's, one per call site, that lives as long as the code; the first call stores the weight
// prepared for the GEMM (or Winograd) there and later calls reuse it. Never call these with a
// weight whose values change.
void kiln_abi_conv2d_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_conv2d_fused_prepared(void* const* data, const int64_t* desc, void** slot);
// The mean over each output plane of conv2d_fused without residual (a classifier head):
// x, w, bias?, out [N, C_out, 1, 1]; the attributes of conv2d_fused.
void kiln_abi_conv2d_avgpool(void* const* data, const int64_t* desc);
void kiln_abi_conv2d_avgpool_prepared(void* const* data, const int64_t* desc, void** slot);
// input, expand_weight?, expand_bias?, dw_weight, dw_bias?, project_weight, project_bias?,
// residual?, out; stride[], padding[], then activation, clamp_min, clamp_max for the expand, dw
// and project steps, then channels_last_in, channels_last_out (kernels/mbconv.h). The _prepared
// form takes a slot as conv2d_prepared's.
void kiln_abi_mbconv(void* const* data, const int64_t* desc);
// Frees what a *_prepared call site stored in its slot and resets the slot (the JIT calls the
// generated <entry>_release(), which calls this for every slot, before unloading the code).
void kiln_abi_release_prepared(void** slot);
void kiln_abi_mbconv_prepared(void* const* data, const int64_t* desc, void** slot);
void kiln_abi_conv1d(void* const* data, const int64_t* desc);  // stride, padding, dilation, groups
// stride[], padding[], output_padding[], groups, dilation[]
void kiln_abi_conv_transpose2d(void* const* data, const int64_t* desc);
// x, values, indices; kernel[], stride[], padding[], dilation[], ceil_mode
void kiln_abi_max_pool2d(void* const* data, const int64_t* desc);
// kernel[], stride[], padding[], ceil_mode, count_include_pad
void kiln_abi_avg_pool2d(void* const* data, const int64_t* desc);
void kiln_abi_adaptive_avg_pool2d(void* const* data, const int64_t* desc);  // output_size[]
void kiln_abi_interpolate(void* const* data,
                          const int64_t* desc);  // mode, align_corners, scale_h, scale_w
void kiln_abi_interpolate_backward(void* const* data, const int64_t* desc);  // as interpolate
// gradients of a traced training step (operands, then results, as the kiln.*_backward ops)
void kiln_abi_conv2d_backward(void* const* data,
                              const int64_t* desc);  // stride[], padding[], dilation[], groups
void kiln_abi_max_pool2d_backward(void* const* data, const int64_t* desc);
void kiln_abi_avg_pool2d_backward(void* const* data, const int64_t* desc);  // as avg_pool2d
void kiln_abi_adaptive_avg_pool2d_backward(void* const* data, const int64_t* desc);
void kiln_abi_batch_norm_backward(void* const* data, const int64_t* desc);      // training, eps
void kiln_abi_batch_norm_update_stats(void* const* data, const int64_t* desc);  // momentum
// normalization: x, running_mean?, running_var?, weight?, bias?, out; training, momentum, eps
void kiln_abi_batch_norm(void* const* data, const int64_t* desc);
void kiln_abi_layer_norm(void* const* data, const int64_t* desc);  // normalized_shape[], eps
void kiln_abi_group_norm(void* const* data, const int64_t* desc);  // num_groups, eps
void kiln_abi_embedding(void* const* data, const int64_t* desc);   // weight, indices, out
void kiln_abi_dropout(void* const* data, const int64_t* desc);     // x, mask, out; p
// reductions (x, out): dims[], keepdim
void kiln_abi_sum(void* const* data, const int64_t* desc);
void kiln_abi_mean(void* const* data, const int64_t* desc);
void kiln_abi_prod(void* const* data, const int64_t* desc);
void kiln_abi_amax(void* const* data, const int64_t* desc);
void kiln_abi_amin(void* const* data, const int64_t* desc);
void kiln_abi_max(void* const* data, const int64_t* desc);     // x, values, indices; dim, keepdim
void kiln_abi_min(void* const* data, const int64_t* desc);     // x, values, indices; dim, keepdim
void kiln_abi_argmax(void* const* data, const int64_t* desc);  // dim (INT64_MIN: flat), keepdim
void kiln_abi_argmin(void* const* data, const int64_t* desc);
void kiln_abi_var(void* const* data, const int64_t* desc);        // dims[], unbiased, keepdim
void kiln_abi_norm(void* const* data, const int64_t* desc);       // p, dims[], keepdim
void kiln_abi_logsumexp(void* const* data, const int64_t* desc);  // dims[], keepdim
void kiln_abi_softmax(void* const* data, const int64_t* desc);    // dim
void kiln_abi_log_softmax(void* const* data, const int64_t* desc);
void kiln_abi_softmax_backward(void* const* data, const int64_t* desc);  // grad, output, out; dim
void kiln_abi_log_softmax_backward(void* const* data, const int64_t* desc);
void kiln_abi_cumsum(void* const* data, const int64_t* desc);  // dim
// losses (input, target, out): ignore_index, reduction, label_smoothing
void kiln_abi_cross_entropy(void* const* data, const int64_t* desc);
// grad, input, target, out: ignore_index, reduction, label_smoothing
void kiln_abi_cross_entropy_backward(void* const* data, const int64_t* desc);
void kiln_abi_nll_loss(void* const* data, const int64_t* desc);  // ignore_index, reduction
void kiln_abi_mse_loss(void* const* data, const int64_t* desc);  // reduction
void kiln_abi_mse_loss_backward(void* const* data,
                                const int64_t* desc);                  // grad, x, t, out; reduction
void kiln_abi_smooth_l1_loss(void* const* data, const int64_t* desc);  // reduction, beta
void kiln_abi_binary_cross_entropy_with_logits(void* const* data,
                                               const int64_t* desc);  // reduction
// indexing and joining
void kiln_abi_index_select(void* const* data, const int64_t* desc);  // x, index, out; dim
void kiln_abi_index_add(void* const* data, const int64_t* desc);  // x, index, src, out; dim, alpha
void kiln_abi_gather(void* const* data, const int64_t* desc);     // x, index, out; dim
void kiln_abi_scatter(void* const* data, const int64_t* desc);    // x, index, src, out; dim
void kiln_abi_scatter_value(void* const* data, const int64_t* desc);  // x, index, out; dim, value
void kiln_abi_scatter_add(void* const* data, const int64_t* desc);    // x, index, src, out; dim
void kiln_abi_masked_fill(void* const* data, const int64_t* desc);    // x, mask, out; value
void kiln_abi_pad(void* const* data, const int64_t* desc);            // pad[], mode, value
void kiln_abi_one_hot(void* const* data, const int64_t* desc);        // num_classes
void kiln_abi_topk(void* const* data,
                   const int64_t* desc);  // x, values, indices; k, dim, largest, sorted
void kiln_abi_sort(void* const* data, const int64_t* desc);  // x, values, indices; dim, descending
void kiln_abi_argsort(void* const* data, const int64_t* desc);  // dim, descending
void kiln_abi_cat(void* const* data, const int64_t* desc);      // inputs..., out; dim
void kiln_abi_stack(void* const* data, const int64_t* desc);    // inputs..., out; dim
void kiln_abi_copy(void* const* data, const int64_t* desc);     // src, out (any strides, dtypes)
// random draws from an explicit Philox state [2] i64 (seed, offset): state, values, next_state
void kiln_abi_uniform(void* const* data, const int64_t* desc);       // low, high
void kiln_abi_normal(void* const* data, const int64_t* desc);        // mean, std
void kiln_abi_randint(void* const* data, const int64_t* desc);       // low, high (integers)
void kiln_abi_dropout_mask(void* const* data, const int64_t* desc);  // p

#ifdef __cplusplus
}  // extern "C"
#endif

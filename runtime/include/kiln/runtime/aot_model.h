#pragma once
// The C interface of an ahead-of-time compiled model (`kiln compile --emit obj|so|exe`). The
// object kiln emits defines, for a model named PREFIX ("model" unless `--name` says otherwise):
//
//   int PREFIX_run(const void* const* inputs, void* const* outputs);
//       inputs[i] / outputs[i]: contiguous, C-order buffers of the shapes and dtypes below,
//       caller-allocated. Returns 0 on success.
//   char* PREFIX_take_error(void);  void PREFIX_free_error(char*);
//       after a failed PREFIX_run: its message (NULL when none), which the caller frees with
//       PREFIX_free_error (a shared object carries its own runtime and its own error slot).
//   const kiln_model_info* PREFIX_info(void);
//       the signature: names, dtypes (kiln_dtype codes), static shapes; for a training step,
//       its state (parameters, optimizer state) and where it lives.
//
// The generated header of `--emit so` repeats the signature as C constants; the executable's
// main (runtime/aot/main.cpp) reads it through PREFIX_info to check its .npy inputs. A shared
// object stays mapped after dlclose (-z nodelete): the runtime inside it owns worker threads.
// Plain C so that C programs can embed a model.

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bumped when the layout of kiln_model_info or the meaning of PREFIX_run changes.
#define KILN_AOT_ABI_VERSION 3

// Element type codes; equal to kiln::DType's values (checked in runtime/aot/main.cpp). Generated
// model headers repeat the enum under the same guard.
#ifndef KILN_AOT_DTYPES_DEFINED
#define KILN_AOT_DTYPES_DEFINED 1
enum kiln_dtype {
  KILN_DTYPE_FLOAT32 = 0,
  KILN_DTYPE_FLOAT64 = 1,
  KILN_DTYPE_FLOAT16 = 2,
  KILN_DTYPE_BFLOAT16 = 3,
  KILN_DTYPE_INT8 = 4,
  KILN_DTYPE_UINT8 = 5,
  KILN_DTYPE_INT32 = 6,
  KILN_DTYPE_INT64 = 7,
  KILN_DTYPE_BOOL = 8,
};
#endif

typedef struct kiln_tensor_info {
  const char* name;
  int32_t dtype;  // enum kiln_dtype
  int32_t rank;
  const int64_t* shape;  // rank entries
} kiln_tensor_info;

typedef struct kiln_model_info {
  int32_t abi_version;  // KILN_AOT_ABI_VERSION
  int32_t num_inputs;
  int32_t num_outputs;
  const kiln_tensor_info* inputs;
  const kiln_tensor_info* outputs;
  const char* target;  // the triple it was compiled for
  // A training step (`kiln compile` of a saved step): its parameters and optimizer state, kept in
  // the model and updated by every successful PREFIX_run (a failed one leaves them); one instance
  // per process, calls must not overlap. num_state is 0 for an inference model.
  int32_t num_state;
  const kiln_tensor_info* state;
  void* const* state_data;  // state_data[i]: state i's bytes (read them, or write new ones)
  // The CPU the code was generated for (`--cpu`, LLVM's name) and the instruction-set extensions
  // it may execute, comma-separated LLVM names ("avx2,fma,avx512f,..."). The executable's main
  // refuses to run on a CPU lacking one (a clear error, not SIGILL); an embedder should check
  // them before the first PREFIX_run.
  const char* cpu;
  const char* cpu_features;
} kiln_model_info;

#ifdef __cplusplus
}  // extern "C"
#endif

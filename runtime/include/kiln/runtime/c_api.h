/* kiln's C API: load a .kiln artifact and run it, for services and other languages.
 * One header, plain C (C99). Every call returns a kiln_status; on failure the message is
 * available from kiln_last_error() (per thread) and, where a call takes one, an optional
 * out-parameter (free it with kiln_string_free).
 *
 *   kiln_model* m; kiln_session* s;
 *   if (kiln_model_load("m.kiln", &m, NULL) != KILN_OK) puts(kiln_last_error());
 *   kiln_session_create(m, &s);
 *   kiln_session_run(s, inputs, 1, outputs, 1);
 *   kiln_session_free(s); kiln_model_free(m);
 *
 * A model is immutable and may be shared by threads; a session is used by one thread at a time.
 */
#ifndef KILN_RUNTIME_C_API_H
#define KILN_RUNTIME_C_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1, /* null pointers, index out of range, wrong buffer size */
  KILN_ERROR_IO = 2,               /* the file cannot be opened or mapped */
  KILN_ERROR_INVALID_ARTIFACT = 3, /* the file failed verification */
  KILN_ERROR_GUARD = 4,            /* an input's shape or dtype differs from the artifact's, or
                                      a value the trace read back differs (kiln.guard) */
  KILN_ERROR_RUNTIME = 5           /* a kernel failed while running */
} kiln_status;

/* Values match kiln::DType. */
typedef enum kiln_dtype {
  KILN_FLOAT32 = 0,
  KILN_FLOAT64 = 1,
  KILN_FLOAT16 = 2,
  KILN_BFLOAT16 = 3,
  KILN_INT8 = 4,
  KILN_UINT8 = 5,
  KILN_INT32 = 6,
  KILN_INT64 = 7,
  KILN_BOOL = 8
} kiln_dtype;

typedef struct kiln_model kiln_model;
typedef struct kiln_session kiln_session;

/* An input or output of a model; pointers stay valid while the model lives. */
typedef struct kiln_tensor_info {
  const char* name;
  kiln_dtype dtype;
  int32_t rank;
  const int64_t* shape;
} kiln_tensor_info;

/* A caller-owned dense (row-major, contiguous) buffer. */
typedef struct kiln_tensor {
  kiln_dtype dtype;
  int32_t rank;
  const int64_t* shape;
  void* data;
  size_t nbytes;
} kiln_tensor;

const char* kiln_status_string(kiln_status status);
/* The message of this thread's last failed call ("" if none). */
const char* kiln_last_error(void);
void kiln_string_free(char* s);
size_t kiln_dtype_size(kiln_dtype dtype);

/* error_message: optional; on failure receives a malloc'ed copy of the message. */
kiln_status kiln_model_load(const char* path, kiln_model** model, char** error_message);

/* Options grow at the end only. struct_size (set by kiln_load_options_init) records the size the
 * caller was compiled with: a newer library reads and writes only the fields it covers and
 * takes the defaults for the rest, so older programs keep working. */
typedef struct kiln_load_options {
  size_t struct_size;
  /* Nonzero (default): kernels prepare constant weights once (packed or Winograd-transformed
   * conv weights: faster, more memory). Zero: they read the weights as stored. */
  int prepare_weights;
  /* Nonzero (default): map the weights' pages at load (no page faults in the first run). */
  int populate;
  /* Nonzero (default): load the artifact's compiled code for this host (dlopen: native code
   * runs). Zero, for services loading files they do not trust: no code is loaded; generated
   * instructions run their portable form, and a file whose compiled instructions have none is
   * refused. */
  int allow_native_code;
} kiln_load_options;
/* Fills the defaults and struct_size; call through the macro, which passes this header's size. */
void kiln_load_options_init_sized(kiln_load_options* options, size_t struct_size);
#define kiln_load_options_init(options) \
  kiln_load_options_init_sized((options), sizeof(kiln_load_options))
/* kiln_model_load with options (NULL: the defaults). */
kiln_status kiln_model_load_with_options(const char* path, const kiln_load_options* options,
                                         kiln_model** model, char** error_message);
void kiln_model_free(kiln_model* model);
size_t kiln_model_num_inputs(const kiln_model* model);
size_t kiln_model_num_outputs(const kiln_model* model);
kiln_status kiln_model_input(const kiln_model* model, size_t index, kiln_tensor_info* info);
kiln_status kiln_model_output(const kiln_model* model, size_t index, kiln_tensor_info* info);

kiln_status kiln_session_create(const kiln_model* model, kiln_session** session);
void kiln_session_free(kiln_session* session);
/* Runs the model: inputs in the model's input order, outputs into caller buffers of the
 * declared dtypes and shapes. */
kiln_status kiln_session_run(kiln_session* session, const kiln_tensor* inputs, size_t num_inputs,
                             kiln_tensor* outputs, size_t num_outputs);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_C_API_H */

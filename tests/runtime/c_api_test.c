/* The C API from C (this file is compiled as C99): load, introspect, run, errors.
 * usage: kiln_c_api_test MODEL.kiln  (an artifact with one f32 input and one f32 output) */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime/c_api.h"

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kiln_last_error());                                                              \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)

static size_t numel(const kiln_tensor_info* t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; ++i) n *= (size_t)t->shape[i];
  return n;
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  kiln_model* model = NULL;
  char* message = NULL;

  /* Errors: a missing file is an I/O error, with a message. */
  CHECK(kiln_model_load("/nonexistent/m.kiln", &model, &message) == KILN_ERROR_IO);
  CHECK(model == NULL && message != NULL && strstr(message, "cannot open") != NULL);
  kiln_string_free(message);
  CHECK(strstr(kiln_last_error(), "/nonexistent/m.kiln") != NULL);

  CHECK(kiln_model_load(argv[0], &model, NULL) == KILN_ERROR_INVALID_ARTIFACT); /* an ELF */

  CHECK(kiln_model_load(argv[1], &model, NULL) == KILN_OK);
  CHECK(kiln_model_num_inputs(model) == 1 && kiln_model_num_outputs(model) == 1);
  kiln_tensor_info in, out;
  CHECK(kiln_model_input(model, 0, &in) == KILN_OK);
  CHECK(kiln_model_output(model, 0, &out) == KILN_OK);
  CHECK(kiln_model_input(model, 5, &in) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(in.dtype == KILN_FLOAT32 && out.dtype == KILN_FLOAT32);
  printf("input %s rank %d, output %s rank %d\n", in.name, in.rank, out.name, out.rank);

  kiln_session* s = NULL;
  CHECK(kiln_session_create(model, &s) == KILN_OK);
  const size_t n_in = numel(&in), n_out = numel(&out);
  float* x = calloc(n_in, sizeof(float));
  float* y1 = calloc(n_out, sizeof(float));
  float* y2 = calloc(n_out, sizeof(float));
  for (size_t i = 0; i < n_in; ++i) x[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
  kiln_tensor xt = {KILN_FLOAT32, in.rank, in.shape, x, n_in * sizeof(float)};
  kiln_tensor yt = {KILN_FLOAT32, out.rank, out.shape, y1, n_out * sizeof(float)};
  CHECK(kiln_session_run(s, &xt, 1, &yt, 1) == KILN_OK);
  /* Same input, second session: the same output (sessions are independent). */
  kiln_session* s2 = NULL;
  CHECK(kiln_session_create(model, &s2) == KILN_OK);
  yt.data = y2;
  CHECK(kiln_session_run(s2, &xt, 1, &yt, 1) == KILN_OK);
  CHECK(memcmp(y1, y2, n_out * sizeof(float)) == 0);
  int nonzero = 0;
  for (size_t i = 0; i < n_out; ++i) nonzero += y1[i] != 0.0f;
  CHECK(nonzero > 0);

  /* Loaded without weight preparation (memory-constrained devices): the same outputs, up to the
   * rounding of the prepared algorithms. */
  kiln_load_options options;
  kiln_load_options_init(&options);
  CHECK(options.prepare_weights == 1 && options.populate == 1 && options.allow_native_code == 1);
  CHECK(options.struct_size == sizeof(kiln_load_options));
  /* A program built before allow_native_code existed: the library writes and reads only what
   * its struct_size covers. */
  kiln_load_options older;
  memset(&older, 0x7f, sizeof older);
  kiln_load_options_init_sized(&older, offsetof(kiln_load_options, allow_native_code));
  CHECK(older.struct_size == offsetof(kiln_load_options, allow_native_code));
  CHECK(older.prepare_weights == 1 && older.allow_native_code == 0x7f7f7f7f);
  kiln_model* with_older = NULL;
  CHECK(kiln_model_load_with_options(argv[1], &older, &with_older, NULL) == KILN_OK);
  kiln_model_free(with_older);
  options.prepare_weights = 0;
  options.allow_native_code = 0; /* this artifact runs runtime kernels only */
  kiln_model* plain = NULL;
  CHECK(kiln_model_load_with_options(argv[1], &options, &plain, NULL) == KILN_OK);
  kiln_session* s3 = NULL;
  CHECK(kiln_session_create(plain, &s3) == KILN_OK);
  float* y3 = calloc(n_out, sizeof(float));
  yt.data = y3;
  CHECK(kiln_session_run(s3, &xt, 1, &yt, 1) == KILN_OK);
  float scale = 0.0f, err = 0.0f;
  for (size_t i = 0; i < n_out; ++i) {
    scale = fabsf(y1[i]) > scale ? fabsf(y1[i]) : scale;
    err = fabsf(y1[i] - y3[i]) > err ? fabsf(y1[i] - y3[i]) : err;
  }
  CHECK(err <= 1e-4f * scale);
  free(y3);
  kiln_session_free(s3);
  kiln_model_free(plain);
  CHECK(kiln_model_load_with_options(NULL, &options, &plain, NULL) == KILN_ERROR_INVALID_ARGUMENT);
  yt.data = y1;

  /* A wrong shape is a guard error naming the input. */
  int64_t bad_shape[8];
  for (int i = 0; i < in.rank; ++i) bad_shape[i] = in.shape[i];
  bad_shape[in.rank - 1] += 1;
  float* xb = calloc(n_in / in.shape[in.rank - 1] * bad_shape[in.rank - 1], sizeof(float));
  kiln_tensor bad = {KILN_FLOAT32, in.rank, bad_shape, xb,
                     n_in / in.shape[in.rank - 1] * bad_shape[in.rank - 1] * sizeof(float)};
  CHECK(kiln_session_run(s, &bad, 1, &yt, 1) == KILN_ERROR_GUARD);
  CHECK(strstr(kiln_last_error(), "expected [") != NULL);
  /* A buffer whose byte size does not match its shape is an invalid argument. */
  xt.nbytes -= 4;
  CHECK(kiln_session_run(s, &xt, 1, &yt, 1) == KILN_ERROR_INVALID_ARGUMENT);
  CHECK(kiln_session_run(NULL, &xt, 1, &yt, 1) == KILN_ERROR_INVALID_ARGUMENT);

  free(x);
  free(xb);
  free(y1);
  free(y2);
  kiln_session_free(s);
  kiln_session_free(s2);
  kiln_model_free(model);
  printf("c api ok\n");
  return 0;
}

/* The C API from several threads, as a service embeds it: one model shared by every thread, a
 * session per thread, each thread's own inputs, and errors that stay with the thread that made
 * them (kiln_last_error). Every answer must equal the single-threaded one bit for bit. Run under
 * ThreadSanitizer by scripts/sanitize.sh.
 *   kiln_c_api_threads_test MODEL.kiln   (one float32 input, one float32 output) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln/runtime/c_api.h"

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kiln_last_error());                                                              \
      exit(1);                                                                                 \
    }                                                                                          \
  } while (0)

enum { kThreads = 4, kRuns = 8, kInputs = 3 };

static kiln_model* g_model;
static kiln_tensor_info g_in, g_out;
static size_t g_n_in, g_n_out;
static float* g_inputs[kInputs];
static float* g_expected[kInputs];

static size_t numel(const kiln_tensor_info* t) {
  size_t n = 1;
  for (int i = 0; i < t->rank; ++i) n *= (size_t)t->shape[i];
  return n;
}

static void run_once(kiln_session* s, const float* x, float* y) {
  kiln_tensor xt = {KILN_FLOAT32, g_in.rank, g_in.shape, (void*)x, g_n_in * sizeof(float)};
  kiln_tensor yt = {KILN_FLOAT32, g_out.rank, g_out.shape, y, g_n_out * sizeof(float)};
  CHECK(kiln_session_run(s, &xt, 1, &yt, 1) == KILN_OK);
}

static void* worker(void* arg) {
  const int id = (int)(size_t)arg;
  kiln_session* s = NULL;
  CHECK(kiln_session_create(g_model, &s) == KILN_OK);
  float* y = malloc(g_n_out * sizeof(float));
  for (int r = 0; r < kRuns; ++r) {
    const int k = (id + r) % kInputs;
    run_once(s, g_inputs[k], y);
    CHECK(memcmp(y, g_expected[k], g_n_out * sizeof(float)) == 0);
    if (id % 2 == 1) {
      /* This thread's failure is reported to this thread only. */
      kiln_tensor bad = {KILN_FLOAT32, g_in.rank, g_in.shape, g_inputs[k], 4};
      kiln_tensor yt = {KILN_FLOAT32, g_out.rank, g_out.shape, y, g_n_out * sizeof(float)};
      CHECK(kiln_session_run(s, &bad, 1, &yt, 1) == KILN_ERROR_INVALID_ARGUMENT);
      CHECK(strstr(kiln_last_error(), "nbytes 4 does not match") != NULL);
    } else {
      CHECK(strcmp(kiln_last_error(), "") == 0);
    }
  }
  free(y);
  kiln_session_free(s);
  return NULL;
}

int main(int argc, char** argv) {
  CHECK(argc == 2);
  CHECK(kiln_model_load(argv[1], &g_model, NULL) == KILN_OK);
  CHECK(kiln_model_num_inputs(g_model) == 1 && kiln_model_num_outputs(g_model) == 1);
  CHECK(kiln_model_input(g_model, 0, &g_in) == KILN_OK);
  CHECK(kiln_model_output(g_model, 0, &g_out) == KILN_OK);
  CHECK(g_in.dtype == KILN_FLOAT32 && g_out.dtype == KILN_FLOAT32);
  g_n_in = numel(&g_in);
  g_n_out = numel(&g_out);

  /* The single-threaded answers. */
  kiln_session* s = NULL;
  CHECK(kiln_session_create(g_model, &s) == KILN_OK);
  for (int k = 0; k < kInputs; ++k) {
    g_inputs[k] = malloc(g_n_in * sizeof(float));
    g_expected[k] = malloc(g_n_out * sizeof(float));
    for (size_t i = 0; i < g_n_in; ++i)
      g_inputs[k][i] = (float)((i * 7919 + (size_t)k * 104729) % 23) / 23.0f - 0.5f;
    run_once(s, g_inputs[k], g_expected[k]);
  }
  kiln_session_free(s);
  /* Different inputs give different answers, so a thread reading another's would be caught. */
  CHECK(memcmp(g_expected[0], g_expected[1], g_n_out * sizeof(float)) != 0);

  pthread_t threads[kThreads];
  for (int t = 0; t < kThreads; ++t)
    CHECK(pthread_create(&threads[t], NULL, worker, (void*)(size_t)t) == 0);
  for (int t = 0; t < kThreads; ++t) CHECK(pthread_join(threads[t], NULL) == 0);

  for (int k = 0; k < kInputs; ++k) {
    free(g_inputs[k]);
    free(g_expected[k]);
  }
  kiln_model_free(g_model);
  printf("c api threads ok: %d threads x %d runs\n", kThreads, kRuns);
  return 0;
}

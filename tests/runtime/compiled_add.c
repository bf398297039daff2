/* A stand-in for codegen output: a compiled function with the artifact ABI
 * `void symbol(void* const* operand_data)` (inputs, then outputs; shapes fixed at compile time).
 * Built as a shared object and embedded in a hand-built artifact by test_artifact.cpp. */
#include <stdint.h>

void kiln_test_axpb(void* const* operands) {
  const float* x = (const float*)operands[0];
  const float* y = (const float*)operands[1];
  float* out = (float*)operands[2];
  for (int i = 0; i < 8; ++i) out[i] = 2.0f * x[i] + y[i];
}

/* Imports as generated code binds them (CodeObject.imports, in order): here the runtime's
 * kiln_abi_set_error, through which this symbol reports a failure. */
typedef void (*kiln_test_set_error_fn)(const char*);
static kiln_test_set_error_fn kiln_test_set_error;
void kiln_code_bind(void* const* functions) {
  kiln_test_set_error = (kiln_test_set_error_fn)functions[0];
}
void kiln_test_fails(void* const* operands) {
  (void)operands;
  kiln_test_set_error("the compiled code failed on purpose");
}

/* z = 2y + t over 32 floats (operands y, t, z), and the same chain as a product's block
 * epilogue (kiln.fbs: Instruction.block_epilogue): c[r * ldc + j] is element
 * offset + r * ldc + j of y, mapped in place; ctx holds the instruction's operand pointers. */
void kiln_test_twice_plus(void* const* operands) {
  const float* y = (const float*)operands[0];
  const float* t = (const float*)operands[1];
  float* z = (float*)operands[2];
  for (int i = 0; i < 32; ++i) z[i] = 2.0f * y[i] + t[i];
}
void kiln_test_twice_plus_block(const void* ctx, float* c, int64_t offset, int64_t ldc,
                                int64_t rows, int64_t cols) {
  const float* t = (const float*)((void* const*)ctx)[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j)
      c[r * ldc + j] = 2.0f * c[r * ldc + j] + t[offset + r * ldc + j];
}
/* The chain 2y + t as a linear's block prologue: writes elements offset + r * ldc + j of its
 * value into c[r * ldc + j] (ctx: y, t, the output). */
void kiln_test_twice_plus_prologue(const void* ctx, float* c, int64_t offset, int64_t ldc,
                                   int64_t rows, int64_t cols) {
  const float* y = (const float*)((void* const*)ctx)[0];
  const float* t = (const float*)((void* const*)ctx)[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t i = offset + r * ldc + j;
      c[r * ldc + j] = 2.0f * y[i] + t[i];
    }
}

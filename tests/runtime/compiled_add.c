/* A stand-in for codegen output: a compiled function with the artifact ABI
 * `void symbol(void* const* operand_data)` (inputs, then outputs; shapes fixed at compile time).
 * Built as a shared object and embedded in a hand-built artifact by test_artifact.cpp. */
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

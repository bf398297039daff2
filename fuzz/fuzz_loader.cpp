// libFuzzer target over the artifact loader and executor: any byte string must either be
// rejected with kiln::Error or load and run (on zero inputs) without a crash or a sanitizer
// report. Built by fuzz/CMakeLists.txt with clang -fsanitize=fuzzer,address,undefined.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kiln/runtime/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    // As a service loading files it does not trust would: no dlopen of (fuzzed) native code.
    kiln::rt::LoadOptions options;
    options.allow_native_code = false;
    options.max_instruction_runs = 1024;  // a flipped loop bound must not hang an iteration
    auto model = kiln::rt::Model::from_bytes({data, size}, kiln::rt::builtin_registry(), options);
    // Running is part of the target, within bounds that keep an iteration fast.
    if (model->arena_bytes() > (64u << 20)) return 0;
    size_t input_bytes = 0;
    for (const auto& s : model->inputs()) {
      size_t n = kiln::dtype_size(s.dtype);
      for (int64_t d : s.shape) n *= static_cast<size_t>(d);
      input_bytes += n;
    }
    if (input_bytes > (16u << 20)) return 0;
    kiln::rt::Session session(model);
    std::vector<kiln::TensorImplPtr> inputs;
    std::vector<const kiln::TensorImpl*> ptrs;
    for (const auto& s : model->inputs()) {
      inputs.push_back(kiln::zeros(s.shape, s.dtype));
      ptrs.push_back(inputs.back().get());
    }
    session.run(ptrs);
  } catch (const kiln::Error&) {
  }
  return 0;
}

// Replays artifact files through the loader and executor: files under a `valid` argument must
// load and run; files under a `broken` argument must be rejected with kiln::Error; files under an
// `any` argument (a fuzzer's corpus) may do either. A crash or a sanitizer report fails by itself.
// Prints each rejection's message (except for `any`). Exits 0 only when every file behaved and
// every `valid`/`broken` folder held files; 1 otherwise, 2 on a usage error.
//   kiln_artifact_replay --valid DIR --broken DIR [--any DIR]

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kiln/runtime/model.h"

namespace {

// Loads, then runs on zero inputs; throws kiln::Error on any rejection.
void load_and_run(const std::vector<uint8_t>& bytes) {
  auto model = kiln::rt::Model::from_bytes(bytes);
  kiln::rt::Session session(model);
  std::vector<kiln::TensorImplPtr> inputs;
  std::vector<const kiln::TensorImpl*> ptrs;
  for (const auto& spec : model->inputs()) {
    inputs.push_back(kiln::zeros(spec.shape, spec.dtype));
    ptrs.push_back(inputs.back().get());
  }
  session.run(ptrs);
}

}  // namespace

int main(int argc, char** argv) {
  int failures = 0, files = 0;
  if (argc < 3 || argc % 2 == 0) {
    std::fprintf(stderr, "usage: %s --valid|--broken|--any DIR [...]\n", argv[0]);
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string kind = argv[i];
    if (kind != "--valid" && kind != "--broken" && kind != "--any") {
      std::fprintf(stderr, "unknown option %s (expected --valid, --broken or --any)\n", argv[i]);
      return 2;
    }
    const bool expect_valid = kind == "--valid";
    const bool any = kind == "--any";
    std::vector<std::filesystem::path> paths;
    for (const auto& e : std::filesystem::directory_iterator(argv[i + 1]))
      paths.push_back(e.path());
    std::sort(paths.begin(), paths.end());
    if (paths.empty() && !any) {
      std::printf("FAIL %s: no files to replay\n", argv[i + 1]);
      ++failures;
    }
    for (const auto& p : paths) {
      std::ifstream f(p, std::ios::binary);
      std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)),
                                 std::istreambuf_iterator<char>());
      ++files;
      try {
        load_and_run(bytes);
        if (any) continue;
        if (!expect_valid) {
          std::printf("FAIL %s: accepted a broken file\n", p.filename().c_str());
          ++failures;
        } else {
          std::printf("ok   %s: loaded and ran\n", p.filename().c_str());
        }
      } catch (const kiln::Error& e) {
        if (any) continue;
        if (expect_valid) {
          std::printf("FAIL %s: %s\n", p.filename().c_str(), e.what());
          ++failures;
        } else {
          std::printf("ok   %s: %s\n", p.filename().c_str(), e.what());
        }
      }
    }
  }
  std::printf("%d files, %d failures\n", files, failures);
  return failures == 0 && files > 0 ? 0 : 1;
}

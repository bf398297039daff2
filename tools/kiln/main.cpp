// The kiln command line: `kiln <command> [options]`. Each command has --help; errors go to stderr
// with a non-zero exit code.

#include <cstdio>
#include <cstring>
#include <string>

#include "demo.h"
#if KILN_HAVE_MLIR
#include "compile.h"
#endif
#include "kiln/kiln.h"

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "usage: kiln <command> [options]\n\n"
               "commands:\n"
               "  demo       train, trace, compile and run a small model (the README's main job)\n"
               "  compile    ahead-of-time native code: executable, shared object or object\n"
               "  version    print the version and build configuration\n\n"
               "options:\n"
               "  --version  same as `kiln version`\n"
               "  --help     this text\n");
  return out == stdout ? 0 : 2;
}

int print_version() {
  std::printf("kiln %s (%s build, MLIR %s, CUDA backend %s, %d threads)\n", kiln::version(),
              KILN_BUILD_TYPE, KILN_HAVE_MLIR ? "on" : "off", KILN_HAVE_CUDA_BACKEND ? "on" : "off",
              kiln::num_threads());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout);
    if (cmd == "--version" || cmd == "version") return print_version();
    if (cmd == "demo") return kiln::cli::demo(argc - 2, argv + 2);
#if KILN_HAVE_MLIR
    if (cmd == "compile") return kiln::cli::compile(argc - 2, argv + 2);
#endif
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "kiln: unknown command '%s'\n\n", cmd.c_str());
  return usage(stderr);
}

// The kiln command line: `kiln <command> [options]`. Each command has --help; errors go to stderr
// with a non-zero exit code.

#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "artifact_commands.h"
#include "demo.h"
#include "quant_report.h"
#if KILN_HAVE_MLIR
#include "compile.h"
#include "ops.h"
#endif
#if KILN_HAVE_ONNX
#include "import.h"
#endif
#include "kiln/kiln.h"
#include "kiln/runtime/cuda/cuda.h"
#include "kiln/runtime/cuda/nn.h"
#include "kiln/runtime/target.h"

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "usage: kiln <command> [options]\n\n"
               "commands:\n"
               "  demo       train, trace, compile and run a small model (the README's main job)\n"
               "  export     trace a zoo model (or an .onnx file) and write a .kiln artifact\n"
               "  import     import an ONNX model and write a .kiln artifact%s\n"
               "  run        run a .kiln artifact on .npy inputs\n"
               "  inspect    show an artifact's inputs, outputs, plan, memory and weights\n"
               "  bench      time loading, the first run and steady-state runs of an artifact\n"
               "  train      run a saved training step over .npy batches, save the weights\n"
               "  quant-report  compare an int8 artifact with its float32 original (SQNR)\n"
               "  compile    ahead-of-time native code: executable, shared object or object\n"
               "  ops        which backend (interpreter, runtime, LLVM, CUDA) runs each IR op\n"
               "  version    print the version and build configuration; --cpu [SPEC] adds the\n"
               "             CPU description the kernels use (or SPEC's: a name such as znver4 or\n"
               "             sapphirerapids, then ,l1d=/l2=/l3=/isa=/cpus= overrides)\n\n"
               "options:\n"
               "  --version  same as `kiln version`\n"
               "  --help     this text\n",
               KILN_HAVE_ONNX ? "" : " (not in this build: needs libonnx-dev, protobuf)");
  return out == stdout ? 0 : 2;
}

// `kiln version [--cpu [SPEC]]`: with --cpu, the target description the kernels use (the host's,
// or KILN_CPU's) and its derived parameters; with a SPEC, that description instead, and what
// this CPU lacks to run it.
int print_version(int argc, char** argv) {
  // The backends this binary has and that work. CUDA is an eager subset so far (docs/cuda.md):
  // named with the device it found, or why there is none.
  std::string cuda = "CUDA: not in this build";
  if (kiln::cuda::built_with_cuda()) {
    // Convolutions need cuDNN: say whether it loads.
    std::string cudnn;
    try {
      cudnn = ", cuDNN " + kiln::cuda::cudnn_version();
    } catch (const kiln::Error&) {
      cudnn = ", no cuDNN (convolutions unavailable)";
    }
    cuda = kiln::cuda::is_available() ? "CUDA eager subset on " + kiln::cuda::device_info().name +
                                            " (" + kiln::cuda::device_info().arch() + ")" + cudnn
                                      : "CUDA eager subset, " + kiln::cuda::unavailable_reason();
  }
  std::printf("kiln %s (%s build, backends: %s, %s, %d threads)\n", kiln::version(),
              KILN_BUILD_TYPE,
              KILN_HAVE_MLIR ? "CPU eager, CPU runtime, LLVM JIT and AOT (x86-64, aarch64)"
                             : "CPU eager, CPU runtime (built without MLIR: no compiler)",
              cuda.c_str(), kiln::num_threads());
  if (argc == 0) return 0;
  KILN_CHECK(std::string_view(argv[0]) == "--cpu" && argc <= 2, "version",
             "expected no arguments or --cpu [SPEC], got '", argv[0], "'");
  if (argc == 1) {
    std::printf("%s", kiln::rt::describe(kiln::rt::active_target()).c_str());
    return 0;
  }
  const kiln::rt::TargetDescription t = kiln::rt::parse_target(argv[1]);
  std::printf("%s", kiln::rt::describe(t).c_str());
  const std::vector<std::string> missing = kiln::rt::missing_features(t, kiln::rt::host_target());
  if (!missing.empty()) {
    std::printf("this CPU lacks:");
    for (const auto& m : missing) std::printf(" %s", m.c_str());
    std::printf(" (kernels for it cannot run here; code can still be compiled for it)\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  const std::string cmd = argv[1];
  try {
    if (cmd == "--help" || cmd == "-h" || cmd == "help") return usage(stdout);
    if (cmd == "--version" || cmd == "version") return print_version(argc - 2, argv + 2);
    if (cmd == "demo") return kiln::cli::demo(argc - 2, argv + 2);
    if (cmd == "run") return kiln::cli::run_artifact(argc - 2, argv + 2);
    if (cmd == "inspect") return kiln::cli::inspect_artifact(argc - 2, argv + 2);
    if (cmd == "bench") return kiln::cli::bench_artifact(argc - 2, argv + 2);
    if (cmd == "train") return kiln::cli::train_artifact(argc - 2, argv + 2);
    if (cmd == "quant-report") return kiln::cli::quant_report(argc - 2, argv + 2);
#if KILN_HAVE_MLIR
    if (cmd == "export") return kiln::cli::export_model(argc - 2, argv + 2);
    if (cmd == "compile") return kiln::cli::compile(argc - 2, argv + 2);
    if (cmd == "ops") return kiln::cli::ops(argc - 2, argv + 2);
#endif
#if KILN_HAVE_ONNX
    if (cmd == "import") return kiln::cli::import_onnx(argc - 2, argv + 2);
#endif
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "kiln %s: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "kiln: unknown command '%s'\n\n", cmd.c_str());
  return usage(stderr);
}

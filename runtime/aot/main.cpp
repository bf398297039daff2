// main() of the executables `kiln compile --emit exe` links: reads the model's inputs from .npy
// files, checks them against the model's signature (model_info), runs model_run and writes the
// outputs as .npy. Linked as the static library kiln_aot_main with the model's object and
// kiln_runtime, so the executable holds no LLVM or MLIR.
//
//   MODEL IN.npy... [-o OUT.npy]... [--repeat N] [--info]
//
// Outputs without an -o go to output<i>.npy in the working directory. --repeat N runs the model N
// times and prints the mean and best latency (the outputs are those of the last run).
//
// A training step (model_info()->num_state > 0) runs the on-device training loop instead, as
// `kiln train` does for a saved step (kiln/runtime/train_loop.h):
//
//   MODEL --data X.npy [--data Y.npy]... --steps N [--set NAME=VALUE]... [--save W.safetensors]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/runtime/abi.h"
#include "kiln/runtime/allocator.h"
#include "kiln/runtime/aot_model.h"
#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/train_loop.h"

extern "C" int model_run(const void* const* inputs, void* const* outputs);
extern "C" const kiln_model_info* model_info(void);

static_assert(KILN_DTYPE_FLOAT32 == int(kiln::DType::Float32) &&
                  KILN_DTYPE_FLOAT64 == int(kiln::DType::Float64) &&
                  KILN_DTYPE_FLOAT16 == int(kiln::DType::Float16) &&
                  KILN_DTYPE_BFLOAT16 == int(kiln::DType::BFloat16) &&
                  KILN_DTYPE_INT8 == int(kiln::DType::Int8) &&
                  KILN_DTYPE_UINT8 == int(kiln::DType::UInt8) &&
                  KILN_DTYPE_INT32 == int(kiln::DType::Int32) &&
                  KILN_DTYPE_INT64 == int(kiln::DType::Int64) &&
                  KILN_DTYPE_BOOL == int(kiln::DType::Bool),
              "kiln_dtype codes must equal kiln::DType");

namespace {

std::string describe(const kiln_tensor_info& t) {
  std::string s = std::string(kiln::dtype_name(kiln::DType(t.dtype))) + " [";
  for (int32_t d = 0; d < t.rank; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

std::string describe(const kiln::npy::Array& a) {
  std::string s = std::string(kiln::dtype_name(a.dtype)) + " [";
  for (size_t d = 0; d < a.shape.size(); ++d) s += (d ? ", " : "") + std::to_string(a.shape[d]);
  return s + "]";
}

int64_t numel(const kiln_tensor_info& t) {
  int64_t n = 1;
  for (int32_t d = 0; d < t.rank; ++d) n *= t.shape[d];
  return n;
}

void print_info(const kiln_model_info& m, FILE* out) {
  std::fprintf(out, "model compiled for %s (cpu %s; uses %s)\n", m.target ? m.target : "?",
               m.cpu ? m.cpu : "?", m.cpu_features && *m.cpu_features ? m.cpu_features : "-");
  for (int32_t i = 0; i < m.num_inputs; ++i)
    std::fprintf(out, "  input %d  %s: %s\n", i, m.inputs[i].name, describe(m.inputs[i]).c_str());
  for (int32_t i = 0; i < m.num_outputs; ++i)
    std::fprintf(out, "  output %d %s: %s\n", i, m.outputs[i].name, describe(m.outputs[i]).c_str());
  for (int32_t i = 0; i < m.num_state; ++i)
    std::fprintf(out, "  state %d  %s: %s\n", i, m.state[i].name, describe(m.state[i]).c_str());
}

std::vector<int64_t> shape_of(const kiln_tensor_info& t) {
  return std::vector<int64_t>(t.shape, t.shape + t.rank);
}

// Outputs in 64-byte aligned buffers, like every tensor the runtime allocates; returned on every
// path out, errors included.
struct OutputBuffers {
  std::vector<void*> ptrs;
  std::vector<size_t> bytes;
  explicit OutputBuffers(const kiln_model_info& m) {
    for (int32_t i = 0; i < m.num_outputs; ++i) {
      const kiln_tensor_info& o = m.outputs[i];
      const size_t n =
          std::max<size_t>(size_t(numel(o)) * kiln::dtype_size(kiln::DType(o.dtype)), 1);
      bytes.push_back(n);  // first: the destructor frees ptrs[i] with bytes[i]
      ptrs.push_back(kiln::cpu_allocator().allocate(n));
    }
  }
  ~OutputBuffers() {
    for (size_t i = 0; i < ptrs.size(); ++i) kiln::cpu_allocator().deallocate(ptrs[i], bytes[i]);
  }
};

void run_model(const void* const* inputs, void* const* outputs) {
  const int rc = model_run(inputs, outputs);
  if (rc == 0) return;
  // model_run leaves the runtime's error message recorded (kiln/runtime/abi.h).
  char* message = kiln_abi_take_error();
  const std::string text = message ? message : "no message recorded";
  kiln_abi_free_error(message);
  kiln::fail("model", "model_run failed (code ", rc, "): ", text);
}

int train(const kiln_model_info& m, int argc, char** argv) {
  static const std::string help = std::string("usage: ") + argv[0] + " " +
                                  kiln::rt::kTrainLoopOptionsHelp +
                                  "\nRuns this compiled training step N times.\n";
  const kiln::rt::TrainLoopArgs a = kiln::rt::parse_train_loop_args(argc - 1, argv + 1);
  if (a.help) {
    std::fputs(help.c_str(), stdout);
    print_info(m, stdout);
    return 0;
  }
  std::string bad = a.bad;
  if (bad.empty() && !a.positional.empty())
    bad = "unexpected argument '" + a.positional[0] + "' (a training step reads --data files)";
  if (!bad.empty()) {
    std::fprintf(stderr, "%s: %s\n\n%s", argv[0], bad.c_str(), help.c_str());
    return 2;
  }
  kiln::rt::TrainStep step;
  for (int32_t i = 0; i < m.num_inputs; ++i)
    step.inputs.push_back(
        {m.inputs[i].name, kiln::DType(m.inputs[i].dtype), shape_of(m.inputs[i])});
  step.loss_name = m.num_outputs > 0 ? m.outputs[0].name : "";
  OutputBuffers out(m);
  step.run = [&](const std::vector<const void*>& in) {
    run_model(in.data(), out.ptrs.data());
    return m.num_outputs == 0 ? 0.0
                              : kiln::rt::mean_as_double(kiln::DType(m.outputs[0].dtype),
                                                         out.ptrs[0], numel(m.outputs[0]));
  };
  step.state = [&] {
    std::vector<kiln::safetensors::Entry> trained;
    for (int32_t i = 0; i < m.num_state; ++i)
      trained.push_back(
          {m.state[i].name, kiln::DType(m.state[i].dtype), shape_of(m.state[i]), m.state_data[i]});
    return trained;
  };
  kiln::rt::run_train_loop("model", a, step);
  return 0;
}

int run(int argc, char** argv) {
  const kiln_model_info& m = *model_info();
  KILN_CHECK(m.abi_version == KILN_AOT_ABI_VERSION, "model", "compiled for AOT ABI version ",
             m.abi_version, ", this main speaks version ", KILN_AOT_ABI_VERSION);
  // Before any generated code runs: code for extensions this CPU lacks would die with SIGILL.
  const std::vector<std::string> missing = kiln::rt::missing_host_features(m.cpu_features);
  if (!missing.empty()) {
    std::string list;
    for (const auto& f : missing) list += (list.empty() ? "" : ", ") + f;
    const std::string& here = kiln::rt::host_target().model;
    kiln::fail("model", "compiled for CPU '", m.cpu, "', expected a CPU with ", list, ", got ",
               here.empty() ? "one without them" : here + ", which lacks them",
               " (compile with --cpu naming this CPU, or host on it)");
  }
  if (m.num_state > 0) return train(m, argc, argv);
  std::vector<std::string> in_paths, out_paths;
  int repeat = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s IN.npy... [-o OUT.npy]... [--repeat N] [--info]\n", argv[0]);
      print_info(m, stdout);
      return 0;
    } else if (a == "--info") {
      print_info(m, stdout);
      return 0;
    } else if (a == "-o" || a == "--output") {
      KILN_CHECK(i + 1 < argc, "model", a, " needs a file name");
      out_paths.push_back(argv[++i]);
    } else if (a == "--repeat") {
      KILN_CHECK(i + 1 < argc, "model", "--repeat needs a count");
      repeat = std::atoi(argv[++i]);
      KILN_CHECK(repeat >= 1, "model", "--repeat expects a positive count, got '", argv[i], "'");
    } else {
      in_paths.push_back(a);
    }
  }
  KILN_CHECK(int(in_paths.size()) == m.num_inputs, "model", "expected ", m.num_inputs,
             " input .npy file(s), got ", in_paths.size(), " (see --info)");
  KILN_CHECK(int(out_paths.size()) <= m.num_outputs, "model", "the model has ", m.num_outputs,
             " output(s), got ", out_paths.size(), " -o options");
  while (int(out_paths.size()) < m.num_outputs)
    out_paths.push_back("output" + std::to_string(out_paths.size()) + ".npy");

  std::vector<kiln::npy::Array> inputs;
  std::vector<const void*> in_ptrs;
  for (int32_t i = 0; i < m.num_inputs; ++i) {
    inputs.push_back(kiln::npy::read(in_paths[i]));
    const kiln::npy::Array& a = inputs.back();
    const kiln_tensor_info& want = m.inputs[i];
    const bool same = int(a.dtype) == want.dtype && int(a.shape.size()) == want.rank &&
                      std::equal(a.shape.begin(), a.shape.end(), want.shape);
    KILN_CHECK(same, "model", "input ", i, " ('", want.name, "'): expected ", describe(want),
               ", got ", describe(a), " from ", in_paths[i]);
    in_ptrs.push_back(a.data.data());
  }
  OutputBuffers out(m);
  std::vector<void*>& out_ptrs = out.ptrs;
  double total_ms = 0, best_ms = 1e300;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run_model(in_ptrs.data(), out_ptrs.data());
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    total_ms += ms;
    best_ms = std::min(best_ms, ms);
  }
  if (repeat > 1)
    std::printf("%d runs: mean %.3f ms, best %.3f ms\n", repeat, total_ms / repeat, best_ms);

  for (int32_t i = 0; i < m.num_outputs; ++i) {
    const kiln_tensor_info& o = m.outputs[i];
    kiln::npy::write(out_paths[i], kiln::DType(o.dtype),
                     std::vector<int64_t>(o.shape, o.shape + o.rank), out_ptrs[i]);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 1;
  }
}

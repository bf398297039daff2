// `kiln run`, `kiln inspect`, `kiln bench`: the runtime side of the CLI (kiln_runtime only, plus
// .npy reading/writing from the frontend's serializer).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "artifact_commands.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"

namespace kiln::cli {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

struct Args {
  std::string artifact;
  std::vector<std::string> inputs;
  std::string output;
  int bench = 0;
  int warmup = 0;
  bool ops = false;
  bool profile = false;
  bool no_prepare = false;
  bool help = false;
  std::string bad;
};

Args parse(int argc, char** argv, bool allow_io) {
  Args a;
  for (int i = 0; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&]() -> std::string {
      KILN_CHECK(i + 1 < argc, "kiln", "option ", s, " needs a value");
      return argv[++i];
    };
    if (s == "--help" || s == "-h") {
      a.help = true;
    } else if (allow_io && (s == "--input" || s == "-i")) {
      a.inputs.push_back(value());
    } else if (allow_io && (s == "--output" || s == "-o")) {
      a.output = value();
    } else if (s == "--bench" || s == "-n") {
      a.bench = std::stoi(value());
    } else if (s == "--warmup") {
      a.warmup = std::stoi(value());
      KILN_CHECK(a.warmup >= 0, "kiln", "--warmup: expected >= 0, got ", a.warmup);
    } else if (s == "--ops") {
      a.ops = true;
    } else if (s == "--profile") {
      a.profile = true;
    } else if (s == "--no-prepare") {
      a.no_prepare = true;
    } else if (!s.empty() && s[0] == '-') {
      a.bad = "unknown option '" + s + "'";
    } else if (a.artifact.empty()) {
      a.artifact = s;
    } else {
      a.bad = "unexpected argument '" + s + "'";
    }
  }
  if (!a.help && a.bad.empty() && a.artifact.empty()) a.bad = "missing the artifact path";
  return a;
}

int usage_error(const char* cmd, const std::string& why, const char* help) {
  std::fprintf(stderr, "kiln %s: %s\n\n%s", cmd, why.c_str(), help);
  return 2;
}

// Random inputs of the declared specs (bench and run without --input).
std::vector<Tensor> make_inputs(const rt::Model& m) {
  std::vector<Tensor> xs;
  for (const rt::TensorSpec& s : m.inputs()) {
    if (is_floating(s.dtype)) {
      xs.push_back(randn(s.shape).to(s.dtype));
    } else {
      xs.push_back(zeros(s.shape, TensorOptions(s.dtype)));  // token id 0 is always valid
    }
  }
  return xs;
}

const char* kRunHelp =
    "usage: kiln run M.kiln [--input X.npy]... [--output Y.npy] [--bench N [--warmup W]]\n"
    "                [--no-prepare]\n\n"
    "Loads the artifact with kiln_runtime and runs it on .npy inputs (one --input per model\n"
    "input, in order; random inputs when none are given). Prints each output's shape and\n"
    "first values; --output writes the first output (or OUT.<i>.npy for several).\n"
    "--bench N also times N further runs, after W more untimed ones (default 0: a fresh\n"
    "process's first runs are slower while the caches fill). --no-prepare: kernels read the\n"
    "weights as stored (no packed or Winograd-transformed copies: less memory, slower).\n";

const char* kInspectHelp =
    "usage: kiln inspect M.kiln [--ops]\n\n"
    "Prints the artifact's inputs, outputs and guards, target, ops, memory plan, weight bytes\n"
    "and code size. --ops lists every instruction with its operand slots.\n";

const char* kBenchHelp =
    "usage: kiln bench M.kiln [--bench N] [--warmup W] [--profile] [--no-prepare]\n\n"
    "Times loading (mmap + verify), session creation, the first run and N steady-state runs\n"
    "(default 20) on random inputs, after W more untimed runs (default 0). Threads:\n"
    "KILN_NUM_THREADS. --profile adds the time of each instruction over the steady-state runs,\n"
    "the slowest first, each marked gen (code the compiler generated) or lib (a library\n"
    "kernel) with the share of each, and the time per kernel. --no-prepare: kernels read the "
    "weights as\n"
    "stored (less memory, slower).\n";

// Instructions, slowest first (those making up 99% of the time, at most 40), then per kernel.
void print_profile(std::vector<rt::Session::InstructionTime> p) {
  if (p.empty() || p[0].runs == 0) return;
  double total = 0, generated = 0;
  for (const auto& t : p) total += t.total_ms, generated += t.generated ? t.total_ms : 0;
  std::map<std::string, std::pair<double, int>> per_kernel;
  for (const auto& t : p) {
    auto& k = per_kernel[t.what.substr(0, t.what.find(' '))];
    k.first += t.total_ms, ++k.second;
  }
  std::sort(p.begin(), p.end(),
            [](const auto& a, const auto& b) { return a.total_ms > b.total_ms; });
  const double runs = static_cast<double>(p[0].runs);
  std::printf(
      "\nprofile: %.3f ms per run in instructions: %.1f%% in generated code, %.1f%% in "
      "library kernels\n  %5s %9s %6s %4s  %s\n",
      total / runs, total > 0 ? 100 * generated / total : 0.0,
      total > 0 ? 100 * (total - generated) / total : 0.0, "#", "ms/run", "share", "code",
      "instruction");
  double shown = 0;
  for (size_t i = 0; i < p.size() && i < 40 && shown < 0.99 * total; ++i) {
    std::printf("  %5zu %9.3f %5.1f%% %4s  %s\n", p[i].index, p[i].total_ms / runs,
                100 * p[i].total_ms / total, p[i].generated ? "gen" : "lib", p[i].what.c_str());
    shown += p[i].total_ms;
  }
  std::vector<std::pair<std::string, std::pair<double, int>>> k(per_kernel.begin(),
                                                                per_kernel.end());
  std::sort(k.begin(), k.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::printf("per kernel:\n");
  for (const auto& [name, v] : k)
    std::printf("  %-28s %9.3f ms/run %5.1f%%  x%d\n", name.c_str(), v.first / runs,
                100 * v.first / total, v.second);
}

void print_timings(const std::vector<double>& ms) {
  std::vector<double> s = ms;
  std::sort(s.begin(), s.end());
  double sum = 0;
  for (double v : s) sum += v;
  std::printf(
      "steady state over %zu runs: median %.3f ms, mean %.3f ms, min %.3f ms, max %.3f ms\n",
      s.size(), s[s.size() / 2], sum / s.size(), s.front(), s.back());
}

}  // namespace

int run_artifact(int argc, char** argv) {
  Args a = parse(argc, argv, true);
  if (a.help) return std::fputs(kRunHelp, stdout), 0;
  if (!a.bad.empty()) return usage_error("run", a.bad, kRunHelp);
  rt::LoadOptions lo;
  lo.prepare_weights = !a.no_prepare;
  auto model = rt::Model::load(a.artifact, rt::builtin_registry(), lo);
  std::vector<Tensor> xs;
  if (a.inputs.empty()) {
    xs = make_inputs(*model);
  } else {
    KILN_CHECK(a.inputs.size() == model->inputs().size(), "run", "the model takes ",
               model->inputs().size(), " inputs, got ", a.inputs.size(), " --input files");
    for (const std::string& p : a.inputs) xs.push_back(read_npy(p).contiguous());
  }
  std::vector<const TensorImpl*> in;
  for (const Tensor& x : xs) in.push_back(x.impl());
  rt::Session session(model);
  std::vector<TensorImplPtr> out = session.run(in);
  for (size_t i = 0; i < out.size(); ++i) {
    Tensor t(out[i]);
    std::printf("%s: %s", model->outputs()[i].name.c_str(),
                rt::describe_spec(t.sizes(), t.dtype()).c_str());
    Tensor flat = t.reshape({-1}).to(DType::Float64);
    const int64_t n = std::min<int64_t>(flat.numel(), 8);
    std::printf(" [");
    for (int64_t k = 0; k < n; ++k)
      std::printf("%s%.6g", k ? ", " : "", flat.data_ptr<double>()[k]);
    std::printf("%s]\n", flat.numel() > n ? ", ..." : "");
    if (!a.output.empty()) {
      const std::string path =
          out.size() == 1 ? a.output : a.output + "." + std::to_string(i) + ".npy";
      write_npy(path, t);
    }
  }
  if (a.bench > 0) {
    for (int r = 0; r < a.warmup; ++r) session.run(in);
    std::vector<double> ms;
    for (int r = 0; r < a.bench; ++r) {
      auto t0 = Clock::now();
      session.run(in);
      ms.push_back(ms_since(t0));
    }
    print_timings(ms);
  }
  return 0;
}

int inspect_artifact(int argc, char** argv) {
  Args a = parse(argc, argv, false);
  if (a.help) return std::fputs(kInspectHelp, stdout), 0;
  if (!a.bad.empty()) return usage_error("inspect", a.bad, kInspectHelp);
  rt::LoadOptions lo;
  lo.allow_foreign_target = true;
  auto m = rt::Model::load(a.artifact, rt::builtin_registry(), lo);
  const rt::ModelStats& st = m->stats();
  std::printf("model:    %s (producer: %s)\n", m->name().c_str(), m->producer().c_str());
  std::printf("target:   %s", m->target_triple().empty() ? "portable (runtime kernels)"
                                                         : m->target_triple().c_str());
  for (const std::string& f : m->cpu_features()) std::printf(" +%s", f.c_str());
  std::printf("\nfile:     %zu bytes\n", st.file_bytes);
  for (const rt::TensorSpec& s : m->inputs()) {
    std::printf("input:    %s %s (guard)\n", s.name.c_str(),
                rt::describe_spec(s.shape, s.dtype).c_str());
  }
  for (const rt::TensorSpec& s : m->outputs()) {
    std::printf("output:   %s %s\n", s.name.c_str(), rt::describe_spec(s.shape, s.dtype).c_str());
  }
  std::printf("plan:     %zu instructions over %zu values\n", st.num_instructions, st.num_slots);
  for (const auto& [op, n] : st.op_counts) std::printf("          %-24s x%zu\n", op.c_str(), n);
  std::printf("memory:   arena %llu bytes (%.2f MiB); without reuse %llu bytes (%.2fx)\n",
              static_cast<unsigned long long>(st.arena_bytes), st.arena_bytes / 1048576.0,
              static_cast<unsigned long long>(st.naive_bytes),
              st.arena_bytes ? double(st.naive_bytes) / double(st.arena_bytes) : 0.0);
  std::printf("weights:  %zu bytes (%.2f MiB)\n", st.weight_bytes - st.code_bytes,
              (st.weight_bytes - st.code_bytes) / 1048576.0);
  std::printf(
      "code:     %zu bytes; %zu generated instructions, %zu run compiled code here (%zu of them "
      "as block epilogues of the product before them, %zu as block prologues of the one after)\n",
      st.code_bytes, st.generated_instructions, st.native_instructions, st.block_epilogues,
      st.block_prologues);
  for (const rt::CodeObjectInfo& c : st.code_objects) {
    std::string features;
    for (const std::string& f : c.cpu_features) features += " +" + f;
    std::printf("          %s%s: %zu symbols, %zu bytes, %s%s\n", c.target_triple.c_str(),
                features.c_str(), c.num_symbols, c.bytes, c.loaded ? "loaded" : "not loaded, ",
                c.why_not.c_str());
  }
  std::printf("ir:       %zu bytes of MLIR bytecode\n", m->mlir_bytecode().size());
  for (const auto& [k, v] : m->metadata()) std::printf("meta:     %s = %s\n", k.c_str(), v.c_str());
  if (a.ops) std::printf("\n%s", m->describe_plan().c_str());
  return 0;
}

int bench_artifact(int argc, char** argv) {
  Args a = parse(argc, argv, false);
  if (a.help) return std::fputs(kBenchHelp, stdout), 0;
  if (!a.bad.empty()) return usage_error("bench", a.bad, kBenchHelp);
  const int n = a.bench > 0 ? a.bench : 20;
  auto t0 = Clock::now();
  rt::LoadOptions lo;
  lo.prepare_weights = !a.no_prepare;
  auto model = rt::Model::load(a.artifact, rt::builtin_registry(), lo);
  const double load_ms = ms_since(t0);
  t0 = Clock::now();
  rt::Session session(model);
  const double session_ms = ms_since(t0);
  std::vector<Tensor> xs = make_inputs(*model);
  std::vector<const TensorImpl*> in;
  for (const Tensor& x : xs) in.push_back(x.impl());
  const int64_t leased0 = scratch_bytes_from_leases();
  t0 = Clock::now();
  session.run(in);
  const double first_ms = ms_since(t0);
  for (int r = 0; r < a.warmup; ++r) session.run(in);
  std::vector<double> ms;
  if (a.profile) session.enable_profiling();
  for (int r = 0; r < n; ++r) {
    t0 = Clock::now();
    session.run(in);
    ms.push_back(ms_since(t0));
  }
  std::printf("%s: %d threads\n", a.artifact.c_str(), num_threads());
  std::printf("load (mmap + verify): %.3f ms\nsession: %.3f ms\nfirst run: %.3f ms\n", load_ms,
              session_ms, first_ms);
  const rt::PreparedStats ps = model->prepared_stats();
  std::printf("prepared weights: %zu bytes (%.2f MiB)", ps.bytes, ps.bytes / 1048576.0);
  for (size_t i = 0; i < ps.counts.size(); ++i)
    std::printf("%s%s x%zu", i ? ", " : " (", ps.counts[i].first.c_str(), ps.counts[i].second);
  std::printf("%s\n", ps.counts.empty() ? "" : ")");
  print_timings(ms);
  const AllocatorStats as = cpu_allocator().stats();
  std::printf(
      "memory: arena %llu bytes; allocator %lld bytes from the OS, peak %lld in use; scratch "
      "lent from the arena %.0f bytes per run\n",
      static_cast<unsigned long long>(model->arena_bytes()),
      static_cast<long long>(as.system_bytes), static_cast<long long>(as.peak_bytes),
      static_cast<double>(scratch_bytes_from_leases() - leased0) / (n + 1 + a.warmup));
  if (a.profile) print_profile(session.profile());
  return 0;
}

}  // namespace kiln::cli

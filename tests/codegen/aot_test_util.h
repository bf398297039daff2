#pragma once
// Helpers for the AOT tests: a hand-written LLVM IR model (y = relu(x·Wᵀ + b) with W and b frozen
// into the code as constants), its float64 reference, subprocesses, scratch folders.

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace kiln::aot_test {

// y[n, j] = relu(b[j] + Σ_k x[n, k] W[j, k]) for x [N, K], W [J, K], b [J].
struct LinearReluModel {
  int64_t N = 2, K = 5, J = 3;
  std::vector<float> W, b;

  explicit LinearReluModel(uint32_t seed, int64_t n = 2, int64_t k = 5, int64_t j = 3)
      : N(n), K(k), J(j) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t i = 0; i < J * K; ++i) W.push_back(u(gen));
    for (int64_t i = 0; i < J; ++i) b.push_back(u(gen));
  }

  std::vector<double> reference(const std::vector<float>& x) const {
    std::vector<double> y(N * J);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < J; ++j) {
        double acc = b[j];
        for (int64_t k = 0; k < K; ++k) acc += double(x[n * K + k]) * double(W[j * K + k]);
        y[n * J + j] = acc > 0 ? acc : 0;
      }
    return y;
  }

  // LLVM IR text for `void kiln_entry(ptr buffers)`: buffers[0] = x, buffers[1] = y. Constants
  // are written as the exact hex of their double value, as LLVM's text format requires.
  std::string llvm_ir() const {
    auto array = [](const std::vector<float>& v) {
      std::ostringstream os;
      os << "[" << v.size() << " x float] [";
      for (size_t i = 0; i < v.size(); ++i) {
        double d = v[i];
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        char buf[32];
        std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(bits));
        os << (i ? ", " : "") << "float " << buf;
      }
      os << "]";
      return os.str();
    };
    std::ostringstream ir;
    ir << "@W = private unnamed_addr constant " << array(W) << ", align 64\n"
       << "@b = private unnamed_addr constant " << array(b) << ", align 64\n"
       << "define void @kiln_entry(ptr %buffers) {\n"
       << "entry:\n"
       << "  %x = load ptr, ptr %buffers\n"
       << "  %yp = getelementptr ptr, ptr %buffers, i64 1\n"
       << "  %y = load ptr, ptr %yp\n"
       << "  br label %row\n"
       << "row:\n"
       << "  %n = phi i64 [0, %entry], [%n1, %row_end]\n"
       << "  br label %col\n"
       << "col:\n"
       << "  %j = phi i64 [0, %row], [%j1, %col_end]\n"
       << "  %bp = getelementptr float, ptr @b, i64 %j\n"
       << "  %bj = load float, ptr %bp\n"
       << "  br label %dot\n"
       << "dot:\n"
       << "  %k = phi i64 [0, %col], [%k1, %dot]\n"
       << "  %acc = phi float [%bj, %col], [%acc1, %dot]\n"
       << "  %xi = mul i64 %n, " << K << "\n"
       << "  %xi2 = add i64 %xi, %k\n"
       << "  %xp = getelementptr float, ptr %x, i64 %xi2\n"
       << "  %xv = load float, ptr %xp\n"
       << "  %wi = mul i64 %j, " << K << "\n"
       << "  %wi2 = add i64 %wi, %k\n"
       << "  %wp = getelementptr float, ptr @W, i64 %wi2\n"
       << "  %wv = load float, ptr %wp\n"
       << "  %p = fmul float %xv, %wv\n"
       << "  %acc1 = fadd float %acc, %p\n"
       << "  %k1 = add i64 %k, 1\n"
       << "  %kdone = icmp eq i64 %k1, " << K << "\n"
       << "  br i1 %kdone, label %col_end, label %dot\n"
       << "col_end:\n"
       << "  %pos = fcmp ogt float %acc1, 0.0\n"
       << "  %r = select i1 %pos, float %acc1, float 0.0\n"
       << "  %yi = mul i64 %n, " << J << "\n"
       << "  %yi2 = add i64 %yi, %j\n"
       << "  %yq = getelementptr float, ptr %y, i64 %yi2\n"
       << "  store float %r, ptr %yq\n"
       << "  %j1 = add i64 %j, 1\n"
       << "  %jdone = icmp eq i64 %j1, " << J << "\n"
       << "  br i1 %jdone, label %row_end, label %col\n"
       << "row_end:\n"
       << "  %n1 = add i64 %n, 1\n"
       << "  %ndone = icmp eq i64 %n1, " << N << "\n"
       << "  br i1 %ndone, label %exit, label %row\n"
       << "exit:\n"
       << "  ret void\n"
       << "}\n";
    return ir.str();
  }
};

struct CommandResult {
  int rc = -1;
  std::string output;  // stdout and stderr together
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline bool have_program(const std::string& name) {
  return run_command("command -v " + name + " >/dev/null").rc == 0;
}

// A fresh folder under the system temp dir, removed with its contents at scope exit.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kiln-aot-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

}  // namespace kiln::aot_test

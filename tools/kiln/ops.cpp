// `kiln ops`: the coverage matrix of the kiln dialect's ops, read from the backends themselves (the
// registered dialect, the interpreter's table, the runtime's builtin registry, codegen's lowering
// tables), so it cannot drift from what runs. `--missing TARGET` lists one backend's gaps.

#include "ops.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "kiln/codegen/lower.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/registry.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

namespace kiln::cli {
namespace {

// Structure rather than computation: the executor never runs these as kernels (constants become
// weights, kiln.none an absent operand, kiln.fused's body ops are compiled or run one by one).
bool structural(const std::string& op) {
  return op == "none" || op == "constant" || op == "fused" || op == "yield";
}

enum Support { kYes, kNo, kNotApplicable };

struct Row {
  std::string op;
  Support interpreter, runtime, llvm, cuda;
};

const char* const kTargets[] = {"interpreter", "runtime", "llvm", "cuda"};

std::vector<Row> coverage() {
  auto ctx = jit::make_context();
  std::set<std::string> names;
  for (mlir::RegisteredOperationName name : ctx->getRegisteredOperations())
    if (name.getDialectNamespace() == "kiln") names.insert(name.getStringRef().drop_front(5).str());
  std::vector<Row> rows;
  for (const std::string& op : names) {
    Row r{op, kNo, kNo, kNo, kNo};
    r.interpreter = jit::interpreter_supports("kiln." + op) ? kYes : kNo;
    r.runtime = structural(op) ? kNotApplicable : rt::builtin_registry().find(op) ? kYes : kNo;
    r.llvm = codegen::lowers_op("kiln." + op) ? kYes : kNo;
    r.cuda = kNo;  // no CUDA backend yet
    rows.push_back(r);
  }
  return rows;
}

Support of(const Row& r, const std::string& target) {
  if (target == "interpreter") return r.interpreter;
  if (target == "runtime") return r.runtime;
  if (target == "llvm") return r.llvm;
  return r.cuda;
}

int help(FILE* out) {
  std::fprintf(
      out,
      "usage: kiln ops [--missing TARGET]\n\n"
      "Prints which backend runs each op of the kiln dialect:\n"
      "  interpreter  the reference interpreter (kiln::jit::interpret)\n"
      "  runtime      a kernel in the runtime's builtin registry: what jit::save and\n"
      "               `kiln export` artifacts run (x86-64 and aarch64 builds share it)\n"
      "  llvm         code generation for the LLVM JIT and AOT (x86-64 and aarch64):\n"
      "               generated loops, views or a call into a runtime kernel\n"
      "  cuda         the CUDA backend (not built yet: every op is missing)\n"
      "'-' marks structural ops that are no kernel (constants, kiln.none, fused regions).\n\n"
      "options:\n"
      "  --missing TARGET  list only the ops TARGET lacks, one per line\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int ops(int argc, char** argv) {
  std::string missing;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return help(stdout);
    if (a == "--missing" && i + 1 < argc) {
      missing = argv[++i];
      bool known = false;
      for (const char* t : kTargets) known = known || missing == t;
      KILN_CHECK(known, "ops", "unknown target '", missing,
                 "' for --missing: expected interpreter, runtime, llvm or cuda");
      continue;
    }
    std::fprintf(stderr, "kiln ops: unknown option '%s'\n\n", a.c_str());
    return help(stderr);
  }
  const std::vector<Row> rows = coverage();
  if (!missing.empty()) {
    for (const Row& r : rows)
      if (of(r, missing) == kNo) std::printf("kiln.%s\n", r.op.c_str());
    return 0;
  }
  auto cell = [](Support s) { return s == kYes ? "yes" : s == kNo ? "no" : "-"; };
  std::printf("%-34s %-12s %-8s %-5s %s\n", "op", "interpreter", "runtime", "llvm", "cuda");
  int counts[4] = {0, 0, 0, 0};
  for (const Row& r : rows) {
    std::printf("kiln.%-29s %-12s %-8s %-5s %s\n", r.op.c_str(), cell(r.interpreter),
                cell(r.runtime), cell(r.llvm), cell(r.cuda));
    const Support s[4] = {r.interpreter, r.runtime, r.llvm, r.cuda};
    for (int k = 0; k < 4; ++k) counts[k] += s[k] != kNo;
  }
  std::printf("%zu ops; %d interpreter, %d runtime (with structural ops), %d llvm, %d cuda\n",
              rows.size(), counts[0], counts[1], counts[2], counts[3]);
  return 0;
}

}  // namespace kiln::cli

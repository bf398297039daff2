// `kiln ops`: the coverage matrix of the kiln dialect's ops, read from the backends themselves (the
// registered dialect, the interpreter's table, the runtime's builtin registry, codegen's lowering
// tables), so it cannot drift from what runs; eager comes from the op schema (ir/ops.toml), which
// the tracer enforces. `--missing TARGET` lists one backend's gaps.

#include "ops.h"

#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "kiln/codegen/lower.h"
#include "kiln/ir/OpSchema.h"
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

const char* const kTargets[] = {"eager", "interpreter", "runtime", "llvm", "aarch64", "cuda"};
constexpr int kNumTargets = 6;

struct Row {
  std::string op;
  Support support[kNumTargets];  // in kTargets' order
};

std::vector<Row> coverage() {
  auto ctx = jit::make_context();
  std::set<std::string> names;
  for (mlir::RegisteredOperationName name : ctx->getRegisteredOperations())
    if (name.getDialectNamespace() == "kiln") names.insert(name.getStringRef().drop_front(5).str());
  std::vector<Row> rows;
  for (const std::string& op : names) {
    const ir::OpSchema* schema = ir::find_op_schema(op);
    const bool runtime = rt::builtin_registry().find(op) != nullptr;
    const bool llvm = codegen::lowers_op("kiln." + op);
    rows.push_back(
        {op,
         {schema && (schema->backends & ir::kBackendEager) ? kYes : kNo,
          jit::interpreter_supports("kiln." + op) ? kYes : kNo,
          structural(op) ? kNotApplicable
          : runtime      ? kYes
                         : kNo,
          llvm ? kYes : kNo,
          // the runtime built for aarch64 and code generation for it
          llvm && (runtime || structural(op)) ? kYes : kNo, kNo}});  // no compiled CUDA path yet
  }
  return rows;
}

Support of(const Row& r, const std::string& target) {
  for (int k = 0; k < kNumTargets; ++k)
    if (target == kTargets[k]) return r.support[k];
  return kNo;
}

int help(FILE* out) {
  std::fprintf(
      out,
      "usage: kiln ops [--missing TARGET]\n\n"
      "Prints which backend runs each op of the kiln dialect:\n"
      "  eager        eager mode records it when traced (declared in ir/ops.toml;\n"
      "               the tracer refuses an op the schema does not declare)\n"
      "  interpreter  the reference interpreter (kiln::jit::interpret)\n"
      "  runtime      a kernel in the runtime's builtin registry: what jit::save and\n"
      "               `kiln export` artifacts run (x86-64 and aarch64 builds share it)\n"
      "  llvm         code generation for the LLVM JIT and AOT (x86-64):\n"
      "               generated loops, views or a call into a runtime kernel\n"
      "  aarch64      AOT for aarch64: code generation and the runtime built for it\n"
      "  cuda         compiled IR on CUDA (not built yet: every op is missing; eager CUDA\n"
      "               tensors run a subset of ops, docs/cuda.md)\n"
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
                 "' for --missing: expected eager, interpreter, runtime, llvm, aarch64 or cuda");
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
  // Columns padded to the widest header; the last one unpadded (no trailing blanks).
  auto column = [](int k, const char* text) {
    std::printf(k + 1 < kNumTargets ? " %-11s" : " %s", text);
  };
  std::printf("%-34s", "op");
  for (int k = 0; k < kNumTargets; ++k) column(k, kTargets[k]);
  std::printf("\n");
  int counts[kNumTargets] = {};
  for (const Row& r : rows) {
    std::printf("kiln.%-29s", r.op.c_str());
    for (int k = 0; k < kNumTargets; ++k) {
      column(k, cell(r.support[k]));
      counts[k] += r.support[k] != kNo;
    }
    std::printf("\n");
  }
  std::printf("%zu ops;", rows.size());
  for (int k = 0; k < kNumTargets; ++k)
    std::printf("%s %d %s", k ? "," : "", counts[k], kTargets[k]);
  std::printf(" (runtime counts the structural ops)\n");
  return 0;
}

}  // namespace kiln::cli

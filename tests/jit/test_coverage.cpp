// Op coverage across backends: every op of the kiln dialect runs in the reference interpreter, has
// a kernel in the runtime's builtin registry (so whatever a trace records can be saved and run)
// and a lowering in code generation (JIT and AOT); every runtime kernel is an op of the dialect
// (no kernel an artifact cannot name).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/codegen/lower.h"
#include "kiln/ir/KilnDialect.h"
#include "kiln/ir/OpSchema.h"
#include "kiln/runtime/registry.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Parser/Parser.h"

namespace kiln {
namespace {

// Ops that are structure, not computation: the executor never runs them as kernels (constants
// become weights, kiln.none an absent operand, kiln.fused's body ops are the kernels).
const std::set<std::string> kStructural = {"none", "constant", "fused", "yield"};

std::set<std::string> dialect_ops(mlir::MLIRContext& ctx) {
  std::set<std::string> ops;
  for (mlir::RegisteredOperationName name : ctx.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "kiln") continue;
    ops.insert(name.getStringRef().drop_front(5).str());  // "kiln."
  }
  return ops;
}

TEST(OpCoverage, EveryDialectOpRunsInTheInterpreterAndTheRuntime) {
  auto ctx = jit::make_context();
  const std::set<std::string> ops = dialect_ops(*ctx);
  ASSERT_GT(ops.size(), 100u);
  std::string no_interpreter, no_runtime, no_llvm;
  for (const std::string& op : ops) {
    if (!jit::interpreter_supports("kiln." + op)) no_interpreter += " " + op;
    if (!kStructural.count(op) && !rt::builtin_registry().find(op)) no_runtime += " " + op;
    if (!codegen::lowers_op("kiln." + op)) no_llvm += " " + op;
  }
  EXPECT_EQ(no_interpreter, "") << "ops the interpreter cannot run";
  EXPECT_EQ(no_runtime, "") << "ops the runtime has no kernel for";
  EXPECT_EQ(no_llvm, "") << "ops code generation cannot lower (JIT and AOT)";
}

TEST(OpCoverage, EveryRuntimeKernelIsADialectOp) {
  auto ctx = jit::make_context();
  const std::set<std::string> ops = dialect_ops(*ctx);
  std::string unknown;
  for (std::string_view name : rt::builtin_registry().names())
    if (!ops.count(std::string(name))) unknown += " " + std::string(name);
  EXPECT_EQ(unknown, "") << "runtime kernels no IR op names";
}

// ir/ops.toml declares per op the backends that run it; each declaration must match what the
// backend implements, both ways (a claim without an implementation, an implementation without a
// claim). aarch64 is code generation plus the runtime built for it: it follows from both. CUDA
// has no backend yet, so no op may claim it. (Eager is checked where it is used: the tracer
// refuses to record an op whose schema does not declare eager.)
TEST(OpCoverage, SchemaBackendsMatchImplementations) {
  auto ctx = jit::make_context();
  const std::set<std::string> ops = dialect_ops(*ctx);
  std::set<std::string> in_schema;
  std::string mismatches;
  auto check = [&](const ir::OpSchema& s, uint32_t backend, const char* name, bool implemented) {
    const bool claimed = (s.backends & backend) != 0;
    if (claimed != implemented)
      mismatches += "\n  " + std::string(s.name) + ": " + name +
                    (claimed ? " claimed, not implemented" : " implemented, not claimed");
  };
  for (const ir::OpSchema& s : ir::op_schemas()) {
    const std::string op(s.name);
    in_schema.insert(op);
    const bool structural = kStructural.count(op) != 0;
    const bool runtime = rt::builtin_registry().find(op) != nullptr;
    const bool llvm = codegen::lowers_op("kiln." + op);
    check(s, ir::kBackendInterpreter, "interpreter", jit::interpreter_supports("kiln." + op));
    check(s, ir::kBackendRuntime, "runtime", runtime);
    check(s, ir::kBackendLlvm, "llvm", llvm);
    check(s, ir::kBackendAarch64, "aarch64", llvm && (runtime || structural));
    check(s, ir::kBackendCuda, "cuda", false);
  }
  EXPECT_EQ(mismatches, "") << "ir/ops.toml's backends differ from the implementations";
  EXPECT_EQ(in_schema, ops) << "the schema and the registered dialect list different ops";
}

// lowers_op trusts the schema for the ops it marks lowering = "loop" (the ScalarLoop trait): here
// code generation must really have their scalar formula. Each such op with one or two operands
// that verifies without attributes (the unary, binary and comparison families; gelu, leaky_relu,
// clamp and to are compiled against eager in test_compile.cpp) is lowered to loops, alone and
// unfused, in float32 and float64.
TEST(OpCoverage, EveryLoopLoweredOpHasAScalarFormula) {
  auto ctx = jit::make_context();
  int checked = 0;
  std::string missing;
  // A copy: parsing loads dialects, which grows the context's list.
  const llvm::SmallVector<mlir::RegisteredOperationName> registered(ctx->getRegisteredOperations());
  for (mlir::RegisteredOperationName name : registered) {
    if (name.getDialectNamespace() != "kiln" || !name.hasTrait<ir::traits::ScalarLoop>()) continue;
    const ir::OpSchema* s = ir::find_op_schema(name.getStringRef());
    ASSERT_NE(s, nullptr) << name.getStringRef().str();
    if (s->num_results != 1 || s->num_operands < 1 || s->num_operands > 2) continue;
    for (const char* elem : {"f32", "f64"}) {
      const std::string t = std::string("tensor<4x") + elem + ">";
      std::string args = "%a: " + t, operands = "%a", types = t;
      if (s->num_operands == 2) args += ", %b: " + t, operands += ", %b", types += ", " + t;
      // The result element type: the input's, or i1 (comparisons): whichever verifies.
      mlir::OwningOpRef<mlir::ModuleOp> module;
      for (const std::string r : {std::string(elem), std::string("i1")}) {
        const std::string rt = "tensor<4x" + r + ">";
        const std::string text = "func.func @forward(" + args + ") -> " + rt + " {\n  %r = \"" +
                                 name.getStringRef().str() + "\"(" + operands + ") : (" + types +
                                 ") -> " + rt + "\n  return %r : " + rt + "\n}";
        mlir::ScopedDiagnosticHandler quiet(ctx.get(),
                                            [](mlir::Diagnostic&) { return mlir::success(); });
        module = mlir::parseSourceString<mlir::ModuleOp>(text, ctx.get());
        if (module) break;
      }
      if (!module) continue;  // needs attributes: compiled elsewhere
      std::string error;
      codegen::LowerOptions options;
      options.fuse_elementwise = false;
      if (!codegen::lower_to_loops(*module, options, &error))
        missing += "\n  " + name.getStringRef().str() + " (" + elem + "): " + error;
      ++checked;
    }
  }
  EXPECT_GE(checked, 2 * 30);
  EXPECT_EQ(missing, "") << "ops the schema lowers as loops without a formula in codegen";
}

}  // namespace
}  // namespace kiln

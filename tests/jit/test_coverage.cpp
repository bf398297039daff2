// Op coverage across backends: every op of the kiln dialect runs in the reference interpreter, has
// a kernel in the runtime's builtin registry (so whatever a trace records can be saved and run)
// and a lowering in code generation (JIT and AOT); every runtime kernel is an op of the dialect
// (no kernel an artifact cannot name).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "kiln/codegen/lower.h"
#include "kiln/runtime/registry.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"

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

}  // namespace
}  // namespace kiln

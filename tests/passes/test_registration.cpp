#include <gtest/gtest.h>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include "kiln/ir/KilnDialect.h"
#include "kiln/passes/Passes.h"

TEST(Passes, CleanupIsRegisteredByName) {
  kiln::passes::register_passes();
  EXPECT_NE(mlir::PassInfo::lookup("kiln-cleanup"), nullptr);
}

TEST(Passes, CleanupRemovesRedundantRelu) {
  mlir::DialectRegistry registry;
  kiln::ir::register_dialects(registry);
  mlir::MLIRContext ctx(registry);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(R"(
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = kiln.relu %x : tensor<4xf32> -> tensor<4xf32>
      %1 = kiln.relu %0 : tensor<4xf32> -> tensor<4xf32>
      %2 = kiln.relu %1 : tensor<4xf32> -> tensor<4xf32>
      return %2 : tensor<4xf32>
    })",
                                                        &ctx);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&ctx);
  pm.addNestedPass<mlir::func::FuncOp>(kiln::passes::create_cleanup_pass());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  int relus = 0;
  module->walk([&](kiln::ir::ReluOp) { ++relus; });
  EXPECT_EQ(relus, 1);
}

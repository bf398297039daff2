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

TEST(Passes, EveryPassAndPipelineIsRegisteredByName) {
  kiln::passes::register_passes();
  kiln::passes::register_passes();  // a second call is harmless
  for (const char* name :
       {"kiln-cleanup", "kiln-freeze", "kiln-fold-batch-norm", "kiln-fuse-epilogues",
        "kiln-eliminate-gradients", "kiln-fuse-elementwise", "kiln-choose-layout"}) {
    EXPECT_NE(mlir::PassInfo::lookup(name), nullptr) << name;
  }
  EXPECT_NE(mlir::PassPipelineInfo::lookup("kiln-inference-pipeline"), nullptr);
  EXPECT_NE(mlir::PassPipelineInfo::lookup("kiln-training-pipeline"), nullptr);
}

TEST(Passes, MemoryPlanHookIsAppendedToThePipelines) {
  mlir::DialectRegistry registry;
  kiln::ir::register_dialects(registry);
  mlir::MLIRContext ctx(registry);
  int calls = 0;
  kiln::passes::PipelineOptions options;
  options.memory_plan = [&](mlir::OpPassManager&) { ++calls; };
  mlir::PassManager pm(&ctx);
  kiln::passes::build_inference_pipeline(pm, options);
  kiln::passes::build_training_pipeline(pm, options);
  EXPECT_EQ(calls, 2);
  // Without an explicit one, the registered hook is used.
  kiln::passes::set_memory_plan_hook([&](mlir::OpPassManager&) { calls += 10; });
  kiln::passes::build_inference_pipeline(pm);
  EXPECT_EQ(calls, 12);
  kiln::passes::set_memory_plan_hook({});
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

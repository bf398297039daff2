// Building kiln ops from C++: inferred result types and verifier failures.
#include <gtest/gtest.h>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include "kiln/ir/KilnDialect.h"

using namespace mlir;

namespace {
struct IrTest : ::testing::Test {
  IrTest() {
    DialectRegistry registry;
    kiln::ir::register_dialects(registry);
    ctx.appendDialectRegistry(registry);
    ctx.loadAllAvailableDialects();
  }
  MLIRContext ctx;
};
}  // namespace

TEST_F(IrTest, BinaryOpsBroadcastAndPromote) {
  OpBuilder b(&ctx);
  auto loc = b.getUnknownLoc();
  auto module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());
  auto f32x3x1 = RankedTensorType::get({3, 1}, b.getF32Type());
  auto f64x4 = RankedTensorType::get({4}, b.getF64Type());
  auto fn = b.create<func::FuncOp>(loc, "f", b.getFunctionType({f32x3x1, f64x4}, {}));
  b.setInsertionPointToStart(fn.addEntryBlock());
  auto add =
      b.create<kiln::ir::AddOp>(loc, fn.getArgument(0), fn.getArgument(1), b.getF64FloatAttr(1.0));
  EXPECT_EQ(add.getType(), RankedTensorType::get({3, 4}, b.getF64Type()));
  b.create<func::ReturnOp>(loc);
  EXPECT_TRUE(succeeded(verify(module)));
  module->destroy();
}

TEST_F(IrTest, MatmulInfersBatchAndRejectsMismatch) {
  OpBuilder b(&ctx);
  auto loc = b.getUnknownLoc();
  auto lhs = RankedTensorType::get({5, 1, 2, 3}, b.getF32Type());
  auto rhs = RankedTensorType::get({4, 3, 7}, b.getF32Type());
  auto module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());
  auto bad_rhs = RankedTensorType::get({4, 2, 7}, b.getF32Type());
  auto fn = b.create<func::FuncOp>(loc, "g", b.getFunctionType({lhs, rhs, bad_rhs}, {}));
  b.setInsertionPointToStart(fn.addEntryBlock());
  auto mm = b.create<kiln::ir::MatmulOp>(loc, fn.getArgument(0), fn.getArgument(1));
  EXPECT_EQ(mm.getType(), RankedTensorType::get({5, 4, 2, 7}, b.getF32Type()));

  std::string diag;
  ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic& d) {
    diag = d.str();
    return success();
  });
  SmallVector<Type> types;
  kiln::ir::MatmulOp::Adaptor adaptor(ValueRange{fn.getArgument(0), fn.getArgument(2)});
  EXPECT_TRUE(failed(kiln::ir::MatmulOp::inferReturnTypes(&ctx, loc, adaptor, types)));
  EXPECT_NE(diag.find("contraction sizes differ"), std::string::npos) << diag;
  module->destroy();
}

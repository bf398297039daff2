// Building kiln ops from C++: inferred result types and verifier failures.
#include <gtest/gtest.h>

#include <set>
#include <string>

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

// Ops built without result types (the builders of InferTypeOpInterface): each type below is
// computed by hand from the op's definition (PyTorch's shape and dtype rules).
TEST_F(IrTest, OpsBuiltWithoutResultTypesInferThem) {
  OpBuilder b(&ctx);
  auto loc = b.getUnknownLoc();
  auto module = ModuleOp::create(loc);
  b.setInsertionPointToEnd(module.getBody());
  auto t = [&](ArrayRef<int64_t> shape, Type e) { return RankedTensorType::get(shape, e); };
  Type f32 = b.getF32Type(), f64 = b.getF64Type(), i32 = b.getI32Type(), i64 = b.getI64Type(),
       i1 = b.getI1Type();
  SmallVector<Type> args = {t({1, 3, 9, 9}, f32), t({8, 3, 3, 3}, f32), t({2, 5}, i32),
                            t({2, 1}, f32),       t({3}, f64),          t({2, 3}, i1),
                            t({4, 3}, f64),       t({5, 7}, f32),       t({4}, i64),
                            t({2}, i64),          t({3, 1, 3, 3}, f32), t({8, 3, 1, 1}, f32)};
  auto fn = b.create<func::FuncOp>(loc, "f", b.getFunctionType(args, {}));
  b.setInsertionPointToStart(fn.addEntryBlock());
  auto arg = [&](int i) { return fn.getArgument(i); };
  auto attr = [&](const char* name, Attribute a) { return b.getNamedAttr(name, a); };
  Value none = b.create<kiln::ir::NoneOp>(loc);
  // The op's result types as its InferTypeOpInterface computes them from operands and
  // attributes (through a result-less op that holds them, erased after).
  auto build = [&](StringRef name, ValueRange operands, ArrayRef<NamedAttribute> attrs) {
    SmallVector<Type> types;
    Operation* op = b.create(loc, b.getStringAttr(name), operands, TypeRange{}, attrs);
    auto iface = op->getName().getInterface<InferTypeOpInterface>();
    if (!iface) {
      ADD_FAILURE() << name.str() << " does not infer its result types";
      op->erase();
      return types;
    }
    EXPECT_TRUE(
        succeeded(iface->inferReturnTypes(&ctx, loc, op->getOperands(), op->getRawDictionaryAttrs(),
                                          op->getPropertiesStorage(), op->getRegions(), types)))
        << name.str();
    op->erase();
    return types;
  };
  // conv2d: 9 + 2*1 - 3 = 8, / 2 + 1 = 5.
  EXPECT_EQ(build("kiln.conv2d", {arg(0), arg(1), none},
                  {attr("stride", b.getDenseI64ArrayAttr({2, 2})),
                   attr("padding", b.getDenseI64ArrayAttr({1, 1})),
                   attr("dilation", b.getDenseI64ArrayAttr({1, 1})),
                   attr("groups", b.getI64IntegerAttr(1))}),
            SmallVector<Type>{t({1, 8, 5, 5}, f32)});
  // sum of int32 over dim 1 is int64; exp of int32 is float32.
  EXPECT_EQ(
      build("kiln.sum", {arg(2)},
            {attr("dims", b.getDenseI64ArrayAttr({1})), attr("keepdim", b.getBoolAttr(false))}),
      SmallVector<Type>{t({2}, i64)});
  EXPECT_EQ(build("kiln.exp", {arg(2)}, {}), SmallVector<Type>{t({2, 5}, f32)});
  EXPECT_EQ(build("kiln.neg", {arg(2)}, {}), SmallVector<Type>{t({2, 5}, i32)});
  // where broadcasts [2, 3], [2, 1], [3] and promotes f32 with f64.
  EXPECT_EQ(build("kiln.where", {arg(5), arg(3), arg(4)}, {}), SmallVector<Type>{t({2, 3}, f64)});
  // cat along 0 of [2, 1] f32 would not match [4, 3]: cat [4, 3] f64 with itself.
  EXPECT_EQ(build("kiln.cat", {arg(6), arg(6)}, {attr("dim", b.getI64IntegerAttr(0))}),
            SmallVector<Type>{t({8, 3}, f64)});
  // topk: values and int64 indices; one_hot with classes from the data: a dynamic dim.
  EXPECT_EQ(build("kiln.topk", {arg(7)},
                  {attr("k", b.getI64IntegerAttr(2)), attr("dim", b.getI64IntegerAttr(1)),
                   attr("largest", b.getBoolAttr(true)), attr("sorted", b.getBoolAttr(true))}),
            (SmallVector<Type>{t({5, 2}, f32), t({5, 2}, i64)}));
  EXPECT_EQ(build("kiln.one_hot", {arg(8)}, {attr("num_classes", b.getI64IntegerAttr(-1))}),
            SmallVector<Type>{t({4, ShapedType::kDynamic}, i64)});
  EXPECT_EQ(build("kiln.to", {arg(7)}, {attr("dtype", b.getI64IntegerAttr(1))}),
            SmallVector<Type>{t({5, 7}, f64)});
  // Result types that are parameters of the op, from the attributes that record them: a random
  // draw's size and dtype (and the next generator state), interpolate's output size, the input
  // size a pooling gradient scatters back to.
  auto size = [&](const char* name, ArrayRef<int64_t> v) {
    return attr(name, b.getDenseI64ArrayAttr(v));
  };
  EXPECT_EQ(build("kiln.uniform", {arg(9)},
                  {attr("low", b.getF64FloatAttr(0)), attr("high", b.getF64FloatAttr(1)),
                   size("size", {3, 4}), attr("dtype", b.getI64IntegerAttr(1))}),
            (SmallVector<Type>{t({3, 4}, f64), t({2}, i64)}));
  EXPECT_EQ(build("kiln.randint", {arg(9)},
                  {attr("low", b.getI64IntegerAttr(0)), attr("high", b.getI64IntegerAttr(7)),
                   size("size", {6}), attr("dtype", b.getI64IntegerAttr(6))}),
            (SmallVector<Type>{t({6}, i32), t({2}, i64)}));
  EXPECT_EQ(
      build("kiln.dropout_mask", {arg(9)}, {attr("p", b.getF64FloatAttr(0.5)), size("size", {5})}),
      (SmallVector<Type>{t({5}, i1), t({2}, i64)}));
  EXPECT_EQ(
      build("kiln.interpolate", {arg(0)},
            {attr("mode", b.getI64IntegerAttr(1)), attr("align_corners", b.getBoolAttr(false)),
             attr("scale_h", b.getF64FloatAttr(0)), attr("scale_w", b.getF64FloatAttr(0)),
             size("output_size", {4, 6})}),
      SmallVector<Type>{t({1, 3, 4, 6}, f32)});
  EXPECT_EQ(build("kiln.avg_pool2d_backward", {arg(0)},
                  {size("kernel", {2, 2}), size("stride", {2, 2}), size("padding", {0, 0}),
                   attr("ceil_mode", b.getBoolAttr(false)),
                   attr("count_include_pad", b.getBoolAttr(true)), size("input_size", {18, 19})}),
            SmallVector<Type>{t({1, 3, 18, 19}, f32)});
  EXPECT_EQ(build("kiln.adaptive_avg_pool2d_backward", {arg(0)}, {size("input_size", {20, 30})}),
            SmallVector<Type>{t({1, 3, 20, 30}, f32)});
  // mbconv without expansion: depthwise 3x3 stride 2 pad 1 on 9x9 gives 5x5, projected to 8.
  auto f64_attr = [&](const char* name) { return attr(name, b.getF64FloatAttr(0)); };
  auto act = [&](const char* name) { return attr(name, b.getI64IntegerAttr(0)); };
  EXPECT_EQ(build("kiln.mbconv", {arg(0), none, none, arg(10), none, arg(11), none, none},
                  {size("stride", {2, 2}), size("padding", {1, 1}), act("expand_activation"),
                   f64_attr("expand_clamp_min"), f64_attr("expand_clamp_max"), act("dw_activation"),
                   f64_attr("dw_clamp_min"), f64_attr("dw_clamp_max"), act("project_activation"),
                   f64_attr("project_clamp_min"), f64_attr("project_clamp_max"), act("strategy")}),
            SmallVector<Type>{t({1, 8, 5, 5}, f32)});
}

// Every op infers its result types except the structural ops whose types come from elsewhere:
// a constant's from its value, kiln.fused's from the ops a pass fused into its region, kiln.yield
// (no results) from its parent's (kiln.none's fixed type is inferred by the ODS).
TEST_F(IrTest, EveryOpInfersItsResultTypesButTheStructuralOps) {
  const std::set<std::string> structural = {"kiln.constant", "kiln.fused", "kiln.yield"};
  std::set<std::string> without;
  int with = 0;
  for (RegisteredOperationName name : ctx.getRegisteredOperations()) {
    if (name.getDialectNamespace() != "kiln") continue;
    if (name.hasInterface<InferTypeOpInterface>())
      ++with;
    else
      without.insert(name.getStringRef().str());
  }
  EXPECT_EQ(without, structural);
  EXPECT_GE(with, 100);
}

// The artifact writer on hand-written modules: frozen constants (dense_resource blobs, dense
// literals, splats stored as one element, i1 masks) become weights, offsets come from --kiln-plan-memory when it ran
// and from the writer's own fallback when it did not; missing parameter weights are named.

#include <gtest/gtest.h>

#include <cstring>

#include "kiln/codegen/artifact.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/model.h"
#include "kiln/trace/module.h"
#include "kiln/trace/trace.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace kiln {
namespace {

// w = [1, 2, 3, 4] as a little-endian f32 resource blob (alignment word 4 first).
constexpr const char* kModule = R"(
func.func @forward(%x: tensor<4xf32>, %p: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>)
    attributes {kiln.arg_names = ["x", "scale"]} {
  %w = kiln.constant dense_resource<kiln_w> : tensor<4xf32> : tensor<4xf32>
  %m = kiln.constant dense<[true, false, true, true]> : tensor<4xi1> : tensor<4xi1>
  %s = kiln.constant dense<2.0> : tensor<4xf32> : tensor<4xf32>
  %0 = kiln.mul %x, %w : tensor<4xf32>, tensor<4xf32>
  %1 = kiln.add %0, %s : tensor<4xf32>, tensor<4xf32>
  %2 = kiln.mul %1, %p : tensor<4xf32>, tensor<4xf32>
  return %2, %m : tensor<4xf32>, tensor<4xi1>
}
{-#
  dialect_resources: {
    builtin: {
      kiln_w: "0x040000000000803F000000400000404000008040"
    }
  }
#-}
)";

struct Written {
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> write(bool plan, const std::vector<float>* scale) {
  auto ctx = jit::make_context();
  mlir::ModuleOp m = jit::parse_module(*ctx, kModule);
  if (plan) {
    m->getRegion(0).front().front().setAttr(
        "kiln.num_inputs", mlir::IntegerAttr::get(mlir::IntegerType::get(ctx.get(), 64), 1));
    mlir::PassManager pm(ctx.get());
    pm.addNestedPass<mlir::func::FuncOp>(passes::create_plan_memory_pass());
    EXPECT_TRUE(mlir::succeeded(pm.run(m)));
  }
  codegen::ArtifactOptions o;
  o.num_inputs = 1;
  o.output_names = {"y", "mask"};
  if (scale) {
    o.weights["scale"] = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(scale->data()),
                                                  scale->size() * sizeof(float));
  }
  std::vector<uint8_t> bytes;
  try {
    bytes = codegen::write_artifact(m, o);
  } catch (...) {
    m->erase();
    throw;
  }
  m->erase();
  return bytes;
}

TEST(Writer, ConstantsAndParametersBecomeWeights) {
  const std::vector<float> scale = {0.5f, -1.0f, 2.0f, 10.0f};
  for (bool plan : {false, true}) {
    auto model = rt::Model::from_bytes(write(plan, &scale));
    rt::Session s(model);
    std::vector<float> x = {1.0f, 1.5f, -2.0f, 0.25f};
    TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{4}, DType::Float32);
    auto out = s.run({xt.get()});
    const float w[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; ++i) {
      EXPECT_FLOAT_EQ(out[0]->data_ptr<float>()[i], (x[i] * w[i] + 2.0f) * scale[i]) << i;
    }
    ASSERT_EQ(out[1]->dtype(), DType::Bool);
    const bool mask[] = {true, false, true, true};
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out[1]->data_ptr<bool>()[i], mask[i]);
    // Planned: the in-place chain needs one 16-byte value (64 aligned); unplanned: one per value.
    EXPECT_EQ(model->arena_bytes(), plan ? 64u : 256u) << "plan " << plan;
    EXPECT_EQ(model->outputs()[1].name, "mask");
    // w and the scale parameter (16 bytes each), the mask (4) and the splat 2.0 stored as one
    // element (4 bytes, not 16).
    EXPECT_EQ(model->stats().weight_bytes, 16u + 16u + 4u + 4u);
  }
}

TEST(Writer, MissingParameterWeightsAreNamed) {
  try {
    write(true, nullptr);
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no weights given for parameter arguments: scale"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kiln

#include <gtest/gtest.h>

#include "mlir/IR/MLIRContext.h"

#include "kiln/trace/module.h"

TEST(Trace, ContextLoadsKilnAndUpstreamDialects) {
  auto ctx = kiln::jit::make_context();
  for (const char* name : {"kiln", "func", "arith", "tensor", "scf"}) {
    EXPECT_NE(ctx->getLoadedDialect(name), nullptr) << name;
  }
}

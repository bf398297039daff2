#include <gtest/gtest.h>

#include "kiln/codegen/target.h"

TEST(Codegen, HostTargetIsKnownToLLVM) {
  auto t = kiln::codegen::host_target();
  EXPECT_FALSE(t.triple.empty());
  EXPECT_FALSE(t.cpu.empty());
  std::string err;
  EXPECT_TRUE(kiln::codegen::target_available(t.triple, &err)) << err;
}

TEST(Codegen, CrossTargetAarch64IsBuiltIn) {
  std::string err;
  EXPECT_TRUE(kiln::codegen::target_available("aarch64-linux-gnu", &err)) << err;
  EXPECT_FALSE(kiln::codegen::target_available("not-a-real-triple", &err));
  EXPECT_FALSE(err.empty());
}

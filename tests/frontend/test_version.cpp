#include <gtest/gtest.h>

#include <regex>

#include "kiln/kiln.h"

TEST(Frontend, VersionIsSemver) {
  EXPECT_TRUE(std::regex_match(kiln::version(), std::regex(R"(\d+\.\d+\.\d+)")));
}

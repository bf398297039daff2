// Splat weights (format version 3): a constant whose elements are all one value is stored as that
// one element and expanded by the loader, for every dtype width, against the value it names.

#include <gtest/gtest.h>

#include <cstring>

#include "artifact_builder.h"
#include "kiln/runtime/model.h"

namespace kiln {
namespace {

using testing::ArtifactSpec;

// y = x + c, c a [2,3] splat weight of value 2.5 stored in 4 bytes.
ArtifactSpec splat_add_spec() {
  ArtifactSpec a;
  a.version = 3;
  a.blobs = {{"c", testing::bytes_of(std::vector<float>{2.5f})}};
  a.slots = {{fb::SlotKind::Arena, fb::DType::Float32, {2, 3}, 0, 0},    // 0: x
             {fb::SlotKind::Weight, fb::DType::Float32, {2, 3}, 0, 0},   // 1: c (splat)
             {fb::SlotKind::Arena, fb::DType::Float32, {2, 3}, 64, 0}};  // 2: y
  a.splat_slots = {1};
  a.instrs = {{"add", {0, 1}, {2}, {}}};
  a.inputs = {{"x", 0}};
  a.outputs = {{"y", 2}};
  a.arena_bytes = 128;
  return a;
}

TEST(ArtifactSplat, OneStoredElementIsEveryElement) {
  auto model = rt::Model::from_bytes(splat_add_spec().build());
  EXPECT_EQ(model->stats().weight_bytes, 4u);
  rt::Session session(model);
  std::vector<float> x = {1, -2, 3, -4, 5, -6};
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{2, 3}, DType::Float32);
  auto y = session.run({xt.get()});
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y[0]->data_ptr<float>()[i], x[i] + 2.5f) << i;
}

TEST(ArtifactSplat, ChecksNameWhatIsWrong) {
  auto error_of = [](const ArtifactSpec& a) -> std::string {
    try {
      rt::Model::from_bytes(a.build());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  ArtifactSpec a = splat_add_spec();
  a.version = 2;
  EXPECT_NE(error_of(a).find("slot 1: a splat weight needs format version 3"), std::string::npos)
      << error_of(a);
  a = splat_add_spec();
  a.blobs[0].second.resize(2);  // less than one float32
  EXPECT_NE(error_of(a).find("slot 1: needs 4 bytes"), std::string::npos) << error_of(a);
  a = splat_add_spec();
  a.splat_slots = {};  // the same blob read as a full [2,3] weight: too short
  EXPECT_NE(error_of(a).find("slot 1: needs 24 bytes"), std::string::npos) << error_of(a);
}

}  // namespace
}  // namespace kiln

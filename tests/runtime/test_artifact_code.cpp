// Compiled code in hand-built artifacts: an ELF shared object travels in the file and is loaded
// with memfd_create + dlopen; compiled instructions and generated instructions (compiled code
// with a portable form, format version 3) against the formula they compute, on every path the
// loader can take (code run, code for another CPU, native code refused, imports bound or
// unknown). The object is built for the host by tests/CMakeLists.txt (not in the aarch64 cross
// build).

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>

#include "artifact_builder.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/registry.h"

namespace kiln {
namespace {

using testing::ArtifactSpec;
using testing::InstrSpec;
using testing::random_floats;

#if defined(KILN_TEST_COMPILED_SO) && defined(__x86_64__)

std::string error_of(const std::vector<uint8_t>& bytes, const rt::LoadOptions& options = {}) {
  try {
    rt::Model::from_bytes(bytes, rt::builtin_registry(), options);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<uint8_t> compiled_object() {
  std::ifstream f(KILN_TEST_COMPILED_SO, std::ios::binary);
  EXPECT_TRUE(f) << KILN_TEST_COMPILED_SO;
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)),
                              std::istreambuf_iterator<char>());
}

// An instruction that calls compiled code: the symbol receives the operands' data pointers.
TEST(Artifact, CompiledFunctionFromEmbeddedSharedObject) {
  const std::vector<uint8_t> elf = compiled_object();
  ArtifactSpec a;
  a.blobs = {{"code:x86_64", elf}};
  a.slots = {{fb::SlotKind::Arena, fb::DType::Float32, {8}, 0, 0},
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 64, 0},
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 128, 0},
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 192, 0}};
  InstrSpec call;
  call.symbol = "kiln_test_axpb";
  call.inputs = {0, 1};
  call.outputs = {2};
  a.instrs = {call, {"relu", {2}, {3}, {}}};  // compiled code and a runtime kernel, mixed
  a.inputs = {{"x", 0}, {"y", 1}};
  a.outputs = {{"z", 3}};
  a.arena_bytes = 256;
  a.code = {{"x86_64-unknown-linux-gnu", 0, {"kiln_test_axpb"}}};
  auto model = rt::Model::from_bytes(a.build());
  EXPECT_EQ(model->stats().code_bytes, elf.size());
  rt::Session s(model);
  std::vector<float> x = random_floats(8, 21), y = random_floats(8, 22);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{8}, DType::Float32);
  TensorImplPtr yt = kiln::from_blob(y.data(), std::vector<int64_t>{8}, DType::Float32);
  auto z = s.run({xt.get(), yt.get()});
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(z[0]->data_ptr<float>()[i], std::max(2.0f * x[i] + y[i], 0.0f));
  }
  // The profile tells generated code from library kernels (kiln bench --profile's split).
  s.enable_profiling();
  s.run({xt.get(), yt.get()});
  const auto profile = s.profile();
  ASSERT_EQ(profile.size(), 2u);
  EXPECT_TRUE(profile[0].generated) << profile[0].what;
  EXPECT_FALSE(profile[1].generated) << profile[1].what;
  // A service that does not trust its files refuses native code at load.
  rt::LoadOptions no_native;
  no_native.allow_native_code = false;
  try {
    rt::Model::from_bytes(a.build(), rt::builtin_registry(), no_native);
    ADD_FAILURE() << "expected the code object to be refused";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("code object 0 (x86_64-unknown-linux-gnu): it is native code"),
        std::string::npos)
        << e.what();
  }
  // A symbol the code object does not define is a load-time error.
  a.code[0].symbols = {"kiln_test_missing"};
  a.instrs[0].symbol = "kiln_test_missing";
  EXPECT_NE(error_of(a.build()).find("kiln_test_missing"), std::string::npos);
  // A blob that is not an ELF object is rejected before dlopen.
  a.blobs[0].second.assign(100, 0);
  EXPECT_NE(error_of(a.build()).find("not an ELF shared object"), std::string::npos);
}

// z = 2x + y as a generated instruction: kiln_test_axpb, or its portable form (x + x) + y with
// runtime kernels into its own slot, yielded into z. Then relu(z).
ArtifactSpec generated_axpb_spec() {
  ArtifactSpec a;
  a.version = 3;
  a.blobs = {{"code:x86_64", compiled_object()}};
  a.slots = {{fb::SlotKind::Arena, fb::DType::Float32, {8}, 0, 0},     // 0: x
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 64, 0},    // 1: y
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 128, 0},   // 2: z
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 192, 0},   // 3: relu(z)
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 256, 0},   // 4: x + x
             {fb::SlotKind::Arena, fb::DType::Float32, {8}, 320, 0}};  // 5: (x + x) + y
  InstrSpec gen;
  gen.control = fb::Control::Generated;
  gen.symbol = "kiln_test_axpb";
  gen.inputs = {0, 1};
  gen.outputs = {2};
  gen.body_size = 2;
  gen.yields = {5};
  a.instrs = {gen, {"add", {0, 0}, {4}, {}}, {"add", {4, 1}, {5}, {}}, {"relu", {2}, {3}, {}}};
  a.inputs = {{"x", 0}, {"y", 1}};
  a.outputs = {{"z", 3}};
  a.arena_bytes = 384;
  a.code = {{"x86_64-unknown-linux-gnu", 0, {"kiln_test_axpb"}}};
  return a;
}

// Runs the model on fixed inputs and checks relu(2x + y); returns the session's profile.
std::vector<rt::Session::InstructionTime> expect_axpb(const std::shared_ptr<const rt::Model>& m) {
  rt::Session s(m);
  s.enable_profiling();
  std::vector<float> x = random_floats(8, 31), y = random_floats(8, 32);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{8}, DType::Float32);
  TensorImplPtr yt = kiln::from_blob(y.data(), std::vector<int64_t>{8}, DType::Float32);
  auto z = s.run({xt.get(), yt.get()});
  for (int i = 0; i < 8; ++i)
    EXPECT_FLOAT_EQ(z[0]->data_ptr<float>()[i], std::max(2.0f * x[i] + y[i], 0.0f)) << i;
  return s.profile();
}

TEST(Artifact, GeneratedInstructionRunsItsCodeOnThisCpu) {
  auto model = rt::Model::from_bytes(generated_axpb_spec().build());
  EXPECT_EQ(model->stats().generated_instructions, 1u);
  EXPECT_EQ(model->stats().native_instructions, 1u);
  ASSERT_EQ(model->stats().code_objects.size(), 1u);
  EXPECT_TRUE(model->stats().code_objects[0].loaded);
  const auto profile = expect_axpb(model);
  // The portable form never runs, so the profile lists the call and relu only.
  ASSERT_EQ(profile.size(), 2u);
  EXPECT_TRUE(profile[0].generated) << profile[0].what;
  EXPECT_EQ(profile[0].runs, 1u);
  EXPECT_FALSE(profile[1].generated);
}

TEST(Artifact, GeneratedInstructionRunsItsPortableFormWithoutUsableCode) {
  auto expect_portable = [](const ArtifactSpec& a, const rt::LoadOptions& options,
                            const std::string& why) {
    auto model = rt::Model::from_bytes(a.build(), rt::builtin_registry(), options);
    EXPECT_EQ(model->stats().native_instructions, 0u);
    ASSERT_EQ(model->stats().code_objects.size(), a.code.size());
    EXPECT_FALSE(model->stats().code_objects.back().loaded);
    EXPECT_NE(model->stats().code_objects.back().why_not.find(why), std::string::npos)
        << model->stats().code_objects.back().why_not;
    const auto profile = expect_axpb(model);
    for (const auto& p : profile) EXPECT_FALSE(p.generated) << p.what;
  };
  rt::LoadOptions no_native;
  no_native.allow_native_code = false;
  expect_portable(generated_axpb_spec(), no_native, "allow_native_code is off");
  ArtifactSpec other_arch = generated_axpb_spec();
  other_arch.code[0].triple = "aarch64-unknown-linux-gnu";
  expect_portable(other_arch, {}, "another architecture");
  ArtifactSpec other_cpu = generated_axpb_spec();
  other_cpu.code[0].features = {"avx2", "a-feature-no-cpu-has"};
  expect_portable(other_cpu, {}, "lacks: a-feature-no-cpu-has");
  ArtifactSpec unknown_import = generated_axpb_spec();
  unknown_import.code[0].imports = {"kiln_abi_no_such_function"};
  expect_portable(unknown_import, {}, "kiln_abi_no_such_function");
  // A second object defining only what the first did is not loaded.
  ArtifactSpec twice = generated_axpb_spec();
  twice.code.push_back(twice.code[0]);
  auto model = rt::Model::from_bytes(twice.build());
  EXPECT_TRUE(model->stats().code_objects[0].loaded);
  EXPECT_FALSE(model->stats().code_objects[1].loaded);
  EXPECT_EQ(model->stats().native_instructions, 1u);
}

TEST(Artifact, GeneratedInstructionIsVerifiedWhicheverFormRuns) {
  for (bool native : {true, false}) {
    rt::LoadOptions options;
    options.allow_native_code = native;
    ArtifactSpec a = generated_axpb_spec();
    a.version = 2;  // generated instructions came with version 3
    EXPECT_NE(error_of(a.build(), options).find("needs format version 3"), std::string::npos);
    a = generated_axpb_spec();
    a.slots[5].shape = {4};  // the portable form yields a value of another shape
    EXPECT_NE(error_of(a.build(), options).find("portable-form yield 0 is [4] f32"),
              std::string::npos)
        << error_of(a.build(), options);
    a = generated_axpb_spec();
    a.instrs[0].body_size = 9;  // past the program's end
    EXPECT_NE(error_of(a.build(), options).find("extends past the end"), std::string::npos);
    a = generated_axpb_spec();
    a.instrs[2].inputs = {4, 3};  // the portable form reads a slot nothing wrote yet
    EXPECT_NE(error_of(a.build(), options).find("before any instruction writes it"),
              std::string::npos);
    a = generated_axpb_spec();
    a.slots[2].offset = 16;  // the call's output overlaps its input x without being its alias
    EXPECT_NE(error_of(a.build(), options).find("without being its exact alias"),
              std::string::npos);
  }
}

// Imports are bound before any call: the code reports a failure through the runtime's
// kiln_abi_set_error, and the run fails naming the instruction.
TEST(Artifact, GeneratedCodeCallsTheRuntimeThroughItsImports) {
  ArtifactSpec a = generated_axpb_spec();
  a.instrs[0].symbol = "kiln_test_fails";
  a.code[0].symbols = {"kiln_test_fails"};
  a.code[0].imports = {"kiln_abi_set_error"};
  auto model = rt::Model::from_bytes(a.build());
  EXPECT_EQ(model->stats().native_instructions, 1u);
  rt::Session s(model);
  std::vector<float> x(8, 1.0f), y(8, 2.0f);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{8}, DType::Float32);
  TensorImplPtr yt = kiln::from_blob(y.data(), std::vector<int64_t>{8}, DType::Float32);
  try {
    s.run({xt.get(), yt.get()});
    ADD_FAILURE() << "expected the run to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "instruction 0 (kiln_test_fails): the compiled code failed on purpose"),
              std::string::npos)
        << e.what();
  }
  // The same file without native code runs (its portable form computes 2x + y).
  rt::LoadOptions no_native;
  no_native.allow_native_code = false;
  expect_axpb(rt::Model::from_bytes(a.build(), rt::builtin_registry(), no_native));
}

// z = 2 (a b) + t: a matmul (a [4, 8] by b [8, 8]) and the chain as a generated instruction
// whose block form (kiln_test_twice_plus_block) the matmul runs on each block of its output, z in
// y's bytes; the portable form (y + y) + t into slots of its own.
ArtifactSpec block_epilogue_spec() {
  ArtifactSpec a;
  a.version = 3;
  a.blobs = {{"code:x86_64", compiled_object()}};
  a.slots = {{fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 0, 0},     // 0: a
             {fb::SlotKind::Arena, fb::DType::Float32, {8, 8}, 128, 0},   // 1: b
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 384, 0},   // 2: t
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 512, 0},   // 3: y = a b
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 512, 0},   // 4: z, in y's bytes
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 640, 0},   // 5: y + y
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 768, 0}};  // 6: (y + y) + t
  InstrSpec gen;
  gen.control = fb::Control::Generated;
  gen.symbol = "kiln_test_twice_plus";
  gen.block_epilogue = "kiln_test_twice_plus_block";
  gen.inputs = {3, 2};
  gen.outputs = {4};
  gen.body_size = 2;
  gen.yields = {6};
  a.instrs = {{"matmul", {0, 1}, {3}, {}}, gen, {"add", {3, 3}, {5}, {}}, {"add", {5, 2}, {6}, {}}};
  a.inputs = {{"a", 0}, {"b", 1}, {"t", 2}};
  a.outputs = {{"z", 4}};
  a.arena_bytes = 896;
  a.code = {
      {"x86_64-unknown-linux-gnu", 0, {"kiln_test_twice_plus", "kiln_test_twice_plus_block"}}};
  return a;
}

// Runs the model on fixed inputs against 2 (a b) + t in double; returns the session's profile.
std::vector<rt::Session::InstructionTime> expect_twice_plus(
    const std::shared_ptr<const rt::Model>& m) {
  rt::Session s(m);
  s.enable_profiling();
  std::vector<float> a = random_floats(32, 41), b = random_floats(64, 42),
                     t = random_floats(32, 43);
  TensorImplPtr at = kiln::from_blob(a.data(), std::vector<int64_t>{4, 8}, DType::Float32);
  TensorImplPtr bt = kiln::from_blob(b.data(), std::vector<int64_t>{8, 8}, DType::Float32);
  TensorImplPtr tt = kiln::from_blob(t.data(), std::vector<int64_t>{4, 8}, DType::Float32);
  auto z = s.run({at.get(), bt.get(), tt.get()});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 8; ++j) {
      double y = 0;
      for (int k = 0; k < 8; ++k) y += double(a[i * 8 + k]) * b[k * 8 + j];
      EXPECT_NEAR(z[0]->data_ptr<float>()[i * 8 + j], 2 * y + t[i * 8 + j], 1e-5) << i << "," << j;
    }
  return s.profile();
}

TEST(Artifact, BlockEpilogueRunsInsideTheProductBeforeIt) {
  auto model = rt::Model::from_bytes(block_epilogue_spec().build());
  EXPECT_EQ(model->stats().native_instructions, 1u);
  EXPECT_EQ(model->stats().block_epilogues, 1u);
  // The chain is not an instruction of its own any more: one row, the matmul with it.
  const auto profile = expect_twice_plus(model);
  ASSERT_EQ(profile.size(), 1u);
  EXPECT_NE(profile[0].what.find("matmul (+ generated epilogue)"), std::string::npos)
      << profile[0].what;
  // Without native code: the matmul, then the portable form (two adds).
  rt::LoadOptions no_native;
  no_native.allow_native_code = false;
  auto portable =
      rt::Model::from_bytes(block_epilogue_spec().build(), rt::builtin_registry(), no_native);
  EXPECT_EQ(portable->stats().block_epilogues, 0u);
  EXPECT_EQ(expect_twice_plus(portable).size(), 4u);  // matmul, the region, two adds
  // Code that defines the chain's symbol but not its block form: the chain's own call.
  ArtifactSpec no_block = block_epilogue_spec();
  no_block.code[0].symbols = {"kiln_test_twice_plus"};
  auto unblocked = rt::Model::from_bytes(no_block.build());
  EXPECT_EQ(unblocked->stats().native_instructions, 1u);
  EXPECT_EQ(unblocked->stats().block_epilogues, 0u);
  EXPECT_EQ(expect_twice_plus(unblocked).size(), 2u);
}

TEST(Artifact, BlockEpilogueIsVerifiedWhicheverFormRuns) {
  for (bool native : {true, false}) {
    rt::LoadOptions options;
    options.allow_native_code = native;
    auto error = [&](const ArtifactSpec& a) { return error_of(a.build(), options); };
    ArtifactSpec a = block_epilogue_spec();
    a.instrs[0].kernel = "add";  // not a product
    EXPECT_NE(error(a).find("follows a conv2d, conv2d_fused, linear, linear_fused or matmul, "
                            "not add"),
              std::string::npos)
        << error(a);
    a = block_epilogue_spec();
    a.slots[4].offset = 256;  // its output is not the product's bytes (it overlaps b's)
    EXPECT_NE(error(a).find("the product's float32 output in place"), std::string::npos)
        << error(a);
    a = block_epilogue_spec();
    a.slots[4].offset = 896;  // nor here, where it overlaps nothing
    a.arena_bytes = 1024;
    EXPECT_NE(error(a).find("the product's float32 output in place"), std::string::npos)
        << error(a);
    a = block_epilogue_spec();
    a.instrs[1].inputs = {2, 2};  // does not read the product's output
    EXPECT_NE(error(a).find("reads the output of matmul"), std::string::npos) << error(a);
    a = block_epilogue_spec();  // first in the program: no product before it
    a.instrs = {a.instrs[1], {"add", {2, 2}, {5}, {}}, a.instrs[3], a.instrs[0]};
    a.instrs[0].inputs = {2, 2};
    EXPECT_NE(error(a).find("a block epilogue follows the product"), std::string::npos) << error(a);
    a = block_epilogue_spec();
    a.slots[2].offset = 512;  // t, read by the chain, in the bytes the matmul writes
    a.slots[2].shape = {4, 8};
    EXPECT_NE(error(a).find("input slot 2 overlaps the output of matmul"), std::string::npos)
        << error(a);
    a = block_epilogue_spec();
    a.instrs[1].block_epilogue = a.instrs[1].symbol;
    EXPECT_NE(error(a).find("names a symbol of its own"), std::string::npos) << error(a);
    a = block_epilogue_spec();
    a.instrs[0].block_epilogue = "kiln_test_twice_plus_block";  // on a kernel instruction
    EXPECT_NE(error(a).find("only a generated instruction names a block epilogue or prologue"),
              std::string::npos)
        << error(a);
  }
}

// out = (2y + t) w^T: the chain as a generated instruction whose prologue form
// (kiln_test_twice_plus_prologue) the linear after it runs to compute its input block by block;
// the portable form (y + y) + t.
ArtifactSpec block_prologue_spec() {
  ArtifactSpec a;
  a.version = 3;
  a.blobs = {{"code:x86_64", compiled_object()}};
  a.slots = {{fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 0, 0},     // 0: y
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 128, 0},   // 1: t
             {fb::SlotKind::Arena, fb::DType::Float32, {6, 8}, 256, 0},   // 2: w
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 448, 0},   // 3: x = 2y + t
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 576, 0},   // 4: y + y
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 704, 0},   // 5: (y + y) + t
             {fb::SlotKind::Arena, fb::DType::Float32, {4, 6}, 832, 0}};  // 6: x w^T
  InstrSpec gen;
  gen.control = fb::Control::Generated;
  gen.symbol = "kiln_test_twice_plus";
  gen.block_prologue = "kiln_test_twice_plus_prologue";
  gen.inputs = {0, 1};
  gen.outputs = {3};
  gen.body_size = 2;
  gen.yields = {5};
  a.instrs = {
      gen, {"add", {0, 0}, {4}, {}}, {"add", {4, 1}, {5}, {}}, {"linear", {3, 2, -1}, {6}, {}}};
  a.inputs = {{"y", 0}, {"t", 1}, {"w", 2}};
  a.outputs = {{"out", 6}};
  a.arena_bytes = 928;
  a.code = {
      {"x86_64-unknown-linux-gnu", 0, {"kiln_test_twice_plus", "kiln_test_twice_plus_prologue"}}};
  return a;
}

// Runs the model against (2y + t) w^T in double; returns the session's profile.
std::vector<rt::Session::InstructionTime> expect_prologue_linear(
    const std::shared_ptr<const rt::Model>& m, const char* what) {
  rt::Session s(m);
  s.enable_profiling();
  std::vector<float> y = random_floats(32, 51), t = random_floats(32, 52),
                     w = random_floats(48, 53);
  TensorImplPtr yt = kiln::from_blob(y.data(), std::vector<int64_t>{4, 8}, DType::Float32);
  TensorImplPtr tt = kiln::from_blob(t.data(), std::vector<int64_t>{4, 8}, DType::Float32);
  TensorImplPtr wt = kiln::from_blob(w.data(), std::vector<int64_t>{6, 8}, DType::Float32);
  auto out = s.run({yt.get(), tt.get(), wt.get()});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 6; ++j) {
      double want = 0;
      for (int k = 0; k < 8; ++k) want += (2.0 * y[i * 8 + k] + t[i * 8 + k]) * w[j * 8 + k];
      EXPECT_NEAR(out[0]->data_ptr<float>()[i * 6 + j], want, 1e-5)
          << what << ": " << i << "," << j;
    }
  return s.profile();
}

TEST(Artifact, BlockPrologueRunsInsideTheProductAfterIt) {
  auto model = rt::Model::from_bytes(block_prologue_spec().build());
  EXPECT_EQ(model->stats().block_prologues, 1u);
  const auto profile = expect_prologue_linear(model, "prologue");
  ASSERT_EQ(profile.size(), 1u);
  EXPECT_NE(profile[0].what.find("linear (+ generated prologue)"), std::string::npos)
      << profile[0].what;
  rt::LoadOptions no_native;
  no_native.allow_native_code = false;
  auto portable =
      rt::Model::from_bytes(block_prologue_spec().build(), rt::builtin_registry(), no_native);
  EXPECT_EQ(portable->stats().block_prologues, 0u);
  EXPECT_EQ(expect_prologue_linear(portable, "portable").size(),
            4u);  // the region, two adds, linear
}

TEST(Artifact, BlockPrologueIsVerifiedWhicheverFormRuns) {
  for (bool native : {true, false}) {
    rt::LoadOptions options;
    options.allow_native_code = native;
    auto error = [&](const ArtifactSpec& a) { return error_of(a.build(), options); };
    ArtifactSpec a = block_prologue_spec();
    a.instrs[3] = {"relu", {3}, {6}, {}};  // not a linear or matmul
    a.slots[6].shape = {4, 8};
    a.arena_bytes = 960;
    EXPECT_NE(error(a).find("precedes a linear, linear_fused or matmul in its region, not relu"),
              std::string::npos)
        << error(a);
    a = block_prologue_spec();
    a.instrs.pop_back();  // nothing after it
    a.outputs = {{"x", 3}};
    EXPECT_NE(error(a).find("not the region's end"), std::string::npos) << error(a);
    a = block_prologue_spec();
    a.outputs.push_back({"x", 3});  // its value is a model output too
    EXPECT_NE(error(a).find("is read by linear's input 0 alone"), std::string::npos) << error(a);
    a = block_prologue_spec();
    a.instrs[3].inputs = {2, 3, -1};  // the linear reads it as its weight
    a.slots[6].shape = {6, 4};
    EXPECT_NE(error(a).find("computes the float32 input 0 of linear"), std::string::npos)
        << error(a);
    a = block_prologue_spec();
    a.slots[6].offset = 128;  // the linear's output over t, which the prologue reads meanwhile
    a.arena_bytes = 832;
    EXPECT_NE(error(a).find("input slot 1 overlaps the output of linear"), std::string::npos)
        << error(a);
    a = block_prologue_spec();
    a.slots[2] = {fb::SlotKind::Arena, fb::DType::Float32, {4, 8}, 448, 0};  // w in x's bytes
    a.slots[6].shape = {4, 4};
    a.arena_bytes = 896;
    EXPECT_NE(error(a).find("linear's input 1 shares bytes with the block prologue's output"),
              std::string::npos)
        << error(a);
    a = block_prologue_spec();
    a.instrs[0].block_epilogue = "kiln_test_twice_plus_block";  // both forms at once
    EXPECT_NE(error(a).find("no block epilogue beside it"), std::string::npos) << error(a);
    a = block_prologue_spec();
    a.instrs[3].block_prologue = "kiln_test_twice_plus_prologue";  // on a kernel instruction
    EXPECT_NE(error(a).find("only a generated instruction names a block epilogue or prologue"),
              std::string::npos)
        << error(a);
  }
}

#endif

}  // namespace
}  // namespace kiln

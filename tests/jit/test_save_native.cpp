// Artifacts carrying generated code (kiln::jit::SaveOptions::native_code): fused elementwise
// chains, softmax and layer norm saved as generated instructions with their portable form; the
// code runs where the CPU matches, the runtime kernels everywhere else, both against eager.

#include <gtest/gtest.h>

#include <cstdlib>

#include "helpers.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/target.h"

namespace kiln {
namespace {

using test::max_rel_error;
using test::rnd;

// softmax(s / 8 + mask) (attention's), layer_norm(p + r) and a GELU chain, around a matmul (a
// library kernel). Returns the matmul and the attention weights.
TensorList block(const TensorList& in, const TensorList& w) {
  const Tensor p = softmax(in[0] * 0.125 + in[1], -1);
  const int64_t d[] = {16};
  const Tensor h = layer_norm(p + in[2], d, w[0], w[1]);
  const Tensor g = gelu(h) * 2.0 + 1.0;
  return {matmul(g, w[2]), p};
}

struct Block {
  TensorList inputs{rnd({2, 8, 16}, 1), rnd({2, 8, 16}, 2, 0.5), rnd({2, 8, 16}, 3)};
  TensorList weights{rnd({16}, 4), rnd({16}, 5), rnd({16, 12}, 6)};

  std::vector<uint8_t> save(const std::vector<std::string>& native_code) const {
    jit::TraceOptions options;
    const char* names[] = {"ln.weight", "ln.bias", "proj"};
    for (int i = 0; i < 3; ++i) options.named_captures.push_back({names[i], weights[i]});
    autograd::NoGradGuard no_grad;
    jit::TracedFunction traced =
        jit::trace([&](const TensorList& in) { return block(in, weights); }, inputs, options);
    jit::SaveOptions so;
    so.native_code = native_code;
    return jit::save_to_bytes(traced, so);
  }

  // Runs the model and compares both outputs with eager.
  void expect_matches_eager(const std::shared_ptr<const rt::Model>& model,
                            const std::string& what) const {
    rt::Session session(model);
    auto out = session.run({inputs[0].impl(), inputs[1].impl(), inputs[2].impl()});
    const TensorList want = block(inputs, weights);
    ASSERT_EQ(out.size(), 2u) << what;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_LE(max_rel_error(Tensor(out[i]), want[i]), 1e-5) << what << ", output " << i;
  }
};

TEST(NativeCode, GeneratedGroupsRunTheirCodeOnThisCpu) {
  const Block b;
  const std::vector<uint8_t> bytes = b.save({"host"});
  auto model = rt::Model::from_bytes(bytes);
  const rt::ModelStats& st = model->stats();
  // At least the softmax with its scale-and-mask producer, and the layer norm with its add.
  EXPECT_GE(st.generated_instructions, 2u);
  EXPECT_EQ(st.native_instructions, st.generated_instructions);
  ASSERT_EQ(st.code_objects.size(), 1u);
  EXPECT_TRUE(st.code_objects[0].loaded) << st.code_objects[0].why_not;
  EXPECT_GT(st.code_bytes, 0u);
  b.expect_matches_eager(model, "generated code");
  rt::Session session(model);
  session.enable_profiling();
  session.run({b.inputs[0].impl(), b.inputs[1].impl(), b.inputs[2].impl()});
  size_t generated = 0, library = 0;
  for (const auto& p : session.profile()) (p.generated ? generated : library) += 1;
  // (Chains a product runs as its block epilogue or prologue are not instructions of their own:
  // here the GELU chain, which the matmul by a constant, a linear, computes block by block.)
  EXPECT_EQ(generated + st.block_epilogues + st.block_prologues, st.generated_instructions);
  EXPECT_EQ(st.block_prologues, 1u);
  EXPECT_GE(library, 1u);  // the matmul

  // The same file where native code is not allowed: the portable form, same results.
  rt::LoadOptions no_native;
  no_native.allow_native_code = false;
  auto portable = rt::Model::from_bytes(bytes, rt::builtin_registry(), no_native);
  EXPECT_EQ(portable->stats().native_instructions, 0u);
  b.expect_matches_eager(portable, "portable form");
  // A file without generated code runs the same kernels (and holds no code).
  auto plain = rt::Model::from_bytes(b.save({}));
  EXPECT_EQ(plain->stats().generated_instructions, 0u);
  EXPECT_EQ(plain->stats().code_bytes, 0u);
  b.expect_matches_eager(plain, "no generated code");
}

// Objects for several x86-64 levels: the runtime loads the first its CPU runs.
TEST(NativeCode, TheFirstObjectThisCpuRunsIsLoaded) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "x86-64 targets";
#else
  const Block b;
  auto model = rt::Model::from_bytes(b.save({"x86-64-v3", "x86-64"}));
  const auto& objects = model->stats().code_objects;
  ASSERT_EQ(objects.size(), 2u);
  EXPECT_EQ(objects[0].loaded, rt::has_feature(rt::host_target(), "avx2")) << objects[0].why_not;
  EXPECT_TRUE(objects[0].loaded || objects[1].loaded);
  EXPECT_FALSE(objects[0].loaded && objects[1].loaded);
  EXPECT_EQ(model->stats().native_instructions, model->stats().generated_instructions);
  b.expect_matches_eager(model, "x86-64 levels");
#endif
}

// Code for another architecture only: listed, not loaded, the portable form runs.
TEST(NativeCode, CodeForAnotherArchitectureLeavesThePortableForm) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "cross-links from x86-64";
#else
  if (std::system("command -v aarch64-linux-gnu-gcc > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "no aarch64 cross toolchain (scripts/bootstrap.sh installs it)";
  const Block b;
  auto model = rt::Model::from_bytes(b.save({"aarch64"}));
  ASSERT_EQ(model->stats().code_objects.size(), 1u);
  EXPECT_EQ(model->stats().code_objects[0].target_triple.rfind("aarch64", 0), 0u);
  EXPECT_FALSE(model->stats().code_objects[0].loaded);
  EXPECT_GE(model->stats().generated_instructions, 2u);
  EXPECT_EQ(model->stats().native_instructions, 0u);
  b.expect_matches_eager(model, "aarch64 code on x86-64");
#endif
}

// Groups inside a loop body: an LSTM traced without gradients is one loop whose cell's gate
// math is a fused elementwise group.
TEST(NativeCode, GroupsInsideALoopBody) {
  auto lstm = std::make_shared<nn::LSTM>(6, 8);
  const Tensor x = rnd({5, 2, 6}, 11);
  autograd::NoGradGuard no_grad;
  jit::TraceOptions options;
  for (const auto& [name, t] : lstm->named_parameters())
    options.named_captures.push_back({name, t});
  auto fn = [&](const TensorList& in) {
    const nn::RNNOutput o = (*lstm)(in[0]);
    return TensorList{o.output, o.h_n, o.c_n};
  };
  jit::TracedFunction traced = jit::trace(fn, {x}, options);
  jit::SaveOptions so;
  so.native_code = {"host"};
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced, so));
  EXPECT_GE(model->stats().native_instructions, 1u);
  rt::Session session(model);
  for (uint32_t seed : {11u, 12u}) {
    const Tensor xi = rnd({5, 2, 6}, seed);
    auto out = session.run({xi.impl()});
    const TensorList want = fn({xi});
    ASSERT_EQ(out.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LE(max_rel_error(Tensor(out[i]), want[i]), 1e-5) << "output " << i;
  }
}

// The copies the portable plan makes of views (a permute, a strided slice, a select, an expand:
// its values are dense) and a layer norm without weight or bias (absent operands) are generated
// too; the portable form computes the same.
TEST(NativeCode, ViewCopiesAndNormsWithoutAffine) {
  auto fn = [](const TensorList& in) {
    const int64_t d[] = {24};
    const Tensor t = in[0].permute({1, 0, 2});                            // [5, 3, 24], transposed
    const Tensor s = in[0].slice(2, 1, 24, 2);                            // [3, 5, 12], strided
    const Tensor e = in[0].select(1, 2).unsqueeze(1).expand({3, 4, 24});  // broadcast
    return TensorList{t, s, e, layer_norm(in[0], d)};
  };
  const TensorList in = {rnd({3, 5, 24}, 21)};
  autograd::NoGradGuard no_grad;
  jit::TracedFunction traced = jit::trace(fn, in);
  jit::SaveOptions so;
  so.native_code = {"host"};
  const std::vector<uint8_t> bytes = jit::save_to_bytes(traced, so);
  const TensorList want = fn(in);
  for (bool native : {true, false}) {
    rt::LoadOptions lo;
    lo.allow_native_code = native;
    auto model = rt::Model::from_bytes(bytes, rt::builtin_registry(), lo);
    if (native) {
      EXPECT_GE(model->stats().generated_instructions, 5u);
      EXPECT_EQ(model->stats().native_instructions, model->stats().generated_instructions);
    }
    rt::Session session(model);
    auto out = session.run({in[0].impl()});
    ASSERT_EQ(out.size(), 4u);
    for (size_t i = 0; i < 4; ++i)
      EXPECT_LE(max_rel_error(Tensor(out[i]), want[i]), 1e-5)
          << (native ? "native" : "portable") << ", output " << i;
  }
}

TEST(NativeCode, AnUnknownTargetIsAnErrorNamingIt) {
  try {
    Block().save({"sparc-sun-solaris"});
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sparc"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kiln

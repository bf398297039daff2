// Block epilogues and prologues in artifacts (SaveOptions::native_code; kiln.fbs
// Instruction.block_epilogue / block_prologue): the elementwise chain after a conv2d, linear or
// matmul saved as generated code that the product's runtime kernel runs on each block of its
// output, in place, and the chain computing a linear's or matmul's input as code the product
// runs for each block of rows it reads, instead of instructions of their own; the portable form
// (and a runtime without the code) runs products and chains one after the other. All against
// eager.

#include <gtest/gtest.h>

#include "helpers.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/thread_pool.h"

namespace kiln {
namespace {

using test::max_rel_error;
using test::rnd;

// Chains after each kind of product: a hardswish times a per-channel scale after a conv (its
// bias folded into the conv), QuickGELU plus a per-token model input after a linear (a block
// reads an input the session may pass straight from the caller), Gemma 2's soft-capping after a
// batched matmul of two inputs; and a linear whose value is returned too, so that its chain
// cannot map the product's blocks in place (it stays an instruction of its own).
//
// And chains whose value is only a product's input, computed by the product block by block: a
// gated unit silu(g) * u into a linear (a LLaMA feed-forward's down projection), and a chain
// into a matmul by a [K, N] input.
struct Net {
  TensorList inputs{rnd({2, 16, 20, 20}, 1), rnd({3, 40, 64}, 2),    rnd({3, 40, 1}, 3),
                    rnd({2, 4, 24, 32}, 4),  rnd({2, 4, 32, 24}, 5), rnd({3, 40, 96}, 12),
                    rnd({3, 40, 96}, 13),    rnd({40, 64}, 14),      rnd({64, 56}, 15)};
  TensorList weights{rnd({24, 16, 3, 3}, 6, 0.1), rnd({24}, 7),       rnd({1, 24, 1, 1}, 8),
                     rnd({80, 64}, 9, 0.1),       rnd({80}, 10, 0.1), rnd({48, 64}, 11, 0.1),
                     rnd({64, 96}, 16, 0.1),      rnd({64}, 17, 0.1)};

  TensorList forward(const TensorList& x) const {
    const TensorList& w = weights;
    const Tensor c = conv2d(x[0], w[0], w[1], 1, 1);
    const Tensor l = linear(x[1], w[3], w[4]);
    const Tensor m = matmul(x[3], x[4]);
    const Tensor shared = linear(x[1], w[5]);
    return {c * clamp(c + 3.0, 0.0, 6.0) / 6.0 * w[2],
            l * sigmoid(l * 1.702) + x[2],
            tanh(m / 30.0) * 30.0,
            shared,
            relu(shared * 0.5 - 0.1),
            linear(x[5] * sigmoid(x[5]) * x[6], w[6], w[7]),
            matmul(tanh(x[7]) * 2.0 + 1.0, x[8])};
  }

  std::vector<uint8_t> save(const std::vector<std::string>& native_code,
                            bool block_epilogues = true, bool block_prologues = true) const {
    jit::TraceOptions options;
    for (size_t i = 0; i < weights.size(); ++i)
      options.named_captures.push_back({"w" + std::to_string(i), weights[i]});
    autograd::NoGradGuard no_grad;
    jit::TracedFunction traced =
        jit::trace([&](const TensorList& in) { return forward(in); }, inputs, options);
    jit::SaveOptions so;
    so.native_code = native_code;
    so.block_epilogues = block_epilogues;
    so.block_prologues = block_prologues;
    return jit::save_to_bytes(traced, so);
  }

  void expect_matches_eager(const std::shared_ptr<const rt::Model>& model,
                            const std::string& what) const {
    rt::Session session(model);
    std::vector<const TensorImpl*> in;
    for (const Tensor& t : inputs) in.push_back(t.impl());
    autograd::NoGradGuard no_grad;
    const TensorList want = forward(inputs);
    for (int run = 0; run < 2; ++run) {  // a second run reuses the arena
      auto out = session.run(in);
      ASSERT_EQ(out.size(), want.size()) << what;
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_LE(max_rel_error(Tensor(out[i]), want[i]), 1e-5) << what << ", output " << i;
    }
  }
};

TEST(ArtifactBlockEpilogues, ProductsRunTheirChainsOnEachBlock) {
  const Net net;
  const std::vector<uint8_t> bytes = net.save({"host"});
  auto model = rt::Model::from_bytes(bytes);
  const rt::ModelStats& st = model->stats();
  // The conv's, the linear's and the matmul's chains; not the chain of the returned linear.
  EXPECT_EQ(st.block_epilogues, 3u);
  // The gated unit and the matmul's input.
  EXPECT_EQ(st.block_prologues, 2u);
  EXPECT_EQ(st.native_instructions, st.generated_instructions);
  for (int threads : {1, 2}) {
    test::ScopedThreads t(threads);
    net.expect_matches_eager(model, "block epilogues, " + std::to_string(threads) + " threads");
  }
  rt::Session session(model);
  session.enable_profiling();
  std::vector<const TensorImpl*> in;
  for (const Tensor& t : net.inputs) in.push_back(t.impl());
  session.run(in);
  size_t with_epilogue = 0, with_prologue = 0;
  for (const auto& p : session.profile()) {
    with_epilogue += p.what.find("(+ generated epilogue)") != std::string::npos;
    with_prologue += p.what.find("(+ generated prologue)") != std::string::npos;
  }
  EXPECT_EQ(with_epilogue, 3u);
  EXPECT_EQ(with_prologue, 2u);

  // The same file without native code: products and chains one after the other.
  rt::LoadOptions no_native;
  no_native.allow_native_code = false;
  auto portable = rt::Model::from_bytes(bytes, rt::builtin_registry(), no_native);
  EXPECT_EQ(portable->stats().block_epilogues + portable->stats().block_prologues, 0u);
  net.expect_matches_eager(portable, "portable form");
  // Saved without one block form or both: those chains instructions of their own, the same
  // results.
  for (const auto& [epilogues, prologues] :
       {std::pair{false, true}, {true, false}, {false, false}}) {
    auto m = rt::Model::from_bytes(net.save({"host"}, epilogues, prologues));
    EXPECT_EQ(m->stats().block_epilogues, epilogues ? 3u : 0u);
    EXPECT_EQ(m->stats().block_prologues, prologues ? 2u : 0u);
    EXPECT_EQ(m->stats().native_instructions, m->stats().generated_instructions);
    net.expect_matches_eager(m, std::string("block epilogues ") + (epilogues ? "on" : "off") +
                                    ", prologues " + (prologues ? "on" : "off"));
  }
  // Nor does a file without generated code have any.
  auto plain = rt::Model::from_bytes(net.save({}));
  EXPECT_EQ(plain->stats().block_epilogues, 0u);
  net.expect_matches_eager(plain, "no generated code");
}

}  // namespace
}  // namespace kiln

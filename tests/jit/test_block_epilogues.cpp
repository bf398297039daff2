// Elementwise chains after convolutions, linear layers and matmuls compiled as the products' block
// epilogues (passes/FuseBlockEpilogues.cpp, codegen/src/lower/block_epilogue.cpp), and chains
// computing a linear's input as its block prologue (passes/FuseBlockPrologues.cpp): the same
// results as eager and as the chains compiled as kernels of their own, for every convolution
// algorithm the heuristics may pick (weights frozen and prepared, or not), operands broadcast
// per channel, per row and per column, and runs that cross rows of the innermost dim. Each test
// also counts the chains the pipeline marks, since the results alone would match if a chain
// stopped taking the block path.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "helpers.h"
#include "kiln/control_flow.h"
#include "kiln/jit/compile.h"
#include "kiln/jit/save.h"
#include "kiln/kiln.h"
#include "kiln/optim.h"
#include "kiln/passes/Passes.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/target.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/trace.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

using namespace kiln;
using kiln::test::max_rel_error;
using kiln::test::rnd;

namespace {

jit::CompileOptions blocked(bool on, int vector_bits) {
  jit::CompileOptions o = kiln::test::at_vector_width(vector_bits);
  o.block_epilogues = on;
  return o;
}

// How many ops the pipeline jit::compile runs (the training pipeline, without a memory plan)
// marks with `attr` (ir::kBlockEpilogueAttr or kBlockPrologueAttr).
int marked(const std::function<TensorList(const TensorList&)>& fn, const TensorList& in,
           bool frozen, const char* attr) {
  jit::TracedFunction traced = jit::trace(fn, in);
  if (frozen) jit::freeze(traced);
  mlir::PassManager pm(&traced.context());
  passes::PipelineOptions po;
  po.plan_memory = false;
  passes::build_training_pipeline(pm, po);
  EXPECT_TRUE(mlir::succeeded(pm.run(traced.module())));
  const std::string text = traced.str();
  int n = 0;
  for (size_t at = text.find(attr); at != std::string::npos; at = text.find(attr, at + 1)) ++n;
  return n;
}
// The runtime entry points the code jit::compile generates calls (from its optimized LLVM IR,
// KILN_CODEGEN_DUMP), so that a test sees which path the lowering took.
std::string generated_calls(const jit::TracedFunction& traced, jit::CompileOptions o) {
  const std::string path =
      testing::TempDir() + "/kiln_block_test_" + std::to_string(getpid()) + ".ll";
  o.memory_cache = false;
  o.disk_cache = false;
  setenv("KILN_CODEGEN_DUMP", path.c_str(), 1);
  jit::compile(traced, o);
  unsetenv("KILN_CODEGEN_DUMP");
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(path.c_str());
  return ss.str();
}
int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
// Calls of runtime entry points whose name ends with `suffix` ("_epilogue").
int calls_ending(const std::string& ir, const std::string& suffix) {
  const std::string call = "call void @kiln_abi_";
  int n = 0;
  for (size_t at = ir.find(call); at != std::string::npos; at = ir.find(call, at + 1)) {
    const size_t name = at + call.size(), open = ir.find('(', name);
    if (open != std::string::npos && open - name >= suffix.size() &&
        ir.compare(open - suffix.size(), suffix.size(), suffix) == 0)
      ++n;
  }
  return n;
}

// The traced function compiled with block prologues and without, at every vector width, run
// on the host's description (one block of rows) and one with small caches (many blocks, the
// last partial): each result as eager's (`want`) and as the chains as their own kernels.
void expect_prologues_match(const jit::TracedFunction& traced, const TensorList& in,
                            const TensorList& want) {
  const rt::TargetDescription saved = rt::active_target();
  for (int bits : kiln::test::kVectorWidths) {
    jit::CompileOptions separate_options = blocked(false, bits);
    separate_options.block_prologues = false;
    const jit::CompiledFunction separate = jit::compile(traced, separate_options);
    const jit::CompiledFunction blocks = jit::compile(traced, blocked(true, bits));
    for (const char* spec : {"host", "host,l1d=4K,l2=8K,l3=64K"}) {
      SCOPED_TRACE(testing::Message() << "vector_bits " << bits << " " << spec);
      rt::set_active_target(rt::parse_target(spec));
      const TensorList sep = separate(in), got = blocks(in);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_LE(max_rel_error(got[k], want[k]), 1e-5);
        EXPECT_LE(max_rel_error(got[k], sep[k]), 1e-5);
      }
    }
    rt::set_active_target(saved);
  }
}

constexpr const char* kEpilogue = "kiln.block_epilogue";
constexpr const char* kPrologue = "kiln.block_prologue";

struct ConvCase {
  int64_t N, C, H, W, O, K, stride, pad, groups;
};

}  // namespace

// conv -> (y * scale[c] + r) * sigmoid(y) + row[w]: five ops no fixed epilogue takes, the conv's
// value read twice; row[w] broadcasts over the rows, so the chain's innermost dim is the width and
// the GEMM's blocks (runs of output positions) cross it.
TEST(BlockEpilogues, ConvChainsMatchEagerOnEveryAlgorithm) {
  kiln::test::ScopedThreads threads;
  const ConvCase cases[] = {
      {2, 16, 20, 20, 24, 3, 1, 1, 1},   // 3x3 stride 1 on a large map
      {1, 3, 40, 41, 32, 3, 2, 1, 1},    // few input channels (a stem)
      {2, 12, 14, 14, 12, 3, 1, 1, 12},  // depthwise
      {2, 40, 9, 9, 70, 1, 1, 0, 1},     // 1x1
      {2, 24, 7, 7, 96, 3, 1, 1, 1},     // a small map, many channels
      {1, 8, 11, 13, 10, 5, 2, 2, 2},    // grouped, strided
  };
  uint32_t seed = 1;
  for (const ConvCase& c : cases) {
    const int64_t Ho = (c.H + 2 * c.pad - c.K) / c.stride + 1;
    const int64_t Wo = (c.W + 2 * c.pad - c.K) / c.stride + 1;
    Tensor w = rnd({c.O, c.C / c.groups, c.K, c.K}, seed++, 0.3), b = rnd({c.O}, seed++);
    Tensor scale = rnd({c.O, 1, 1}, seed++), row = rnd({Wo}, seed++);
    auto fn = [&](const TensorList& in) {
      Tensor y = conv2d(in[0], w, b, c.stride, c.pad, 1, c.groups);
      return TensorList{(y * scale + in[1]) * sigmoid(y) + row};
    };
    const TensorList in = {rnd({c.N, c.C, c.H, c.W}, seed++), rnd({c.N, c.O, Ho, Wo}, seed++)};
    const Tensor want = fn(in)[0];
    for (bool frozen : {false, true}) {
      EXPECT_EQ(marked(fn, in, frozen, kEpilogue), 1);
      jit::TracedFunction traced = jit::trace(fn, in);
      if (frozen) jit::freeze(traced);
      EXPECT_EQ(calls_ending(generated_calls(traced, blocked(true, -1)), "_epilogue"), 1);
      for (int bits : kiln::test::kVectorWidths) {
        SCOPED_TRACE(testing::Message() << "N" << c.N << " C" << c.C << " " << c.H << "x" << c.W
                                        << " O" << c.O << " k" << c.K << " g" << c.groups
                                        << (frozen ? " frozen" : "") << " vector_bits " << bits);
        const Tensor separate = jit::compile(traced, blocked(false, bits))(in)[0];
        const Tensor got = jit::compile(traced, blocked(true, bits))(in)[0];
        EXPECT_LE(max_rel_error(got, want), 1e-5);
        EXPECT_LE(max_rel_error(got, separate), 1e-6);
      }
    }
  }
}

// linear (its bias and GELU taken by the fixed epilogue) -> hardswish written out, times a
// per-feature gain, plus a per-row offset: the fused linear's block epilogue, on a 3-D input,
// with several products in one function, one of whose chains reads another product's value.
TEST(BlockEpilogues, LinearChainsMatchEager) {
  kiln::test::ScopedThreads threads;
  Tensor w1 = rnd({96, 40}, 11, 0.2), b1 = rnd({96}, 12), gain = rnd({96}, 13);
  Tensor w2 = rnd({33, 96}, 14, 0.2);
  auto fn = [&](const TensorList& in) {
    Tensor h = gelu(linear(in[0], w1, b1));
    Tensor hs = h * clamp(h + 3.0, 0.0, 6.0) / 6.0 * gain + in[1];
    Tensor z = linear(hs, w2);
    return TensorList{leaky_relu(z, 0.2) - tanh(z) * 0.5};
  };
  const TensorList in = {rnd({3, 50, 40}, 15), rnd({3, 50, 1}, 16)};
  const Tensor want = fn(in)[0];
  for (bool frozen : {false, true}) {
    EXPECT_EQ(marked(fn, in, frozen, kEpilogue), 2);
    EXPECT_EQ(marked(fn, in, frozen, kPrologue), 0);  // hs stays the first linear's epilogue
    jit::TracedFunction traced = jit::trace(fn, in);
    if (frozen) jit::freeze(traced);
    EXPECT_EQ(calls_ending(generated_calls(traced, blocked(true, -1)), "_epilogue"), 2);
    for (int bits : kiln::test::kVectorWidths) {
      SCOPED_TRACE(testing::Message()
                   << (frozen ? "frozen" : "weights as arguments") << " vector_bits " << bits);
      const Tensor separate = jit::compile(traced, blocked(false, bits))(in)[0];
      const Tensor got = jit::compile(traced, blocked(true, bits))(in)[0];
      EXPECT_LE(max_rel_error(got, want), 1e-5);
      EXPECT_LE(max_rel_error(got, separate), 1e-6);
    }
  }
}

// matmul -> 30 * tanh(y / 30) * gain + offset (logit soft-capping, then a scale per column and
// an offset per row): on every shape rule of torch.matmul (one GEMM, a batch folded into the rows,
// broadcast batches, vector x matrix; matrix x vector, which no GEMM runs), with operands as
// arguments, and a frozen right operand read by two products (so it stays a matmul, its packed
// form kept by the call site).
TEST(BlockEpilogues, MatmulChainsMatchEager) {
  kiln::test::ScopedThreads threads;
  struct Case {
    std::vector<int64_t> a, b;
  };
  const Case cases[] = {
      {{37, 20}, {20, 45}},       {{3, 17, 20}, {20, 45}}, {{2, 1, 9, 20}, {3, 20, 33}},
      {{4, 17, 20}, {4, 20, 45}}, {{20}, {20, 45}},        {{37, 20}, {20}}};
  uint32_t seed = 100;
  auto capped = [](const Tensor& y) { return tanh(y / 30.0) * 30.0; };
  for (const Case& c : cases) {
    const Tensor probe = matmul(rnd(c.a, seed), rnd(c.b, seed + 1));
    const int64_t cols = probe.size(-1);
    const int64_t rows = probe.dim() >= 2 ? probe.size(-2) : 1;
    Tensor gain = rnd({cols}, seed + 2),
           offset = probe.dim() >= 2 ? rnd({rows, 1}, seed + 3) : rnd({1}, seed + 3);
    auto fn = [&](const TensorList& in) {
      return TensorList{capped(matmul(in[0], in[1]) * 4.0) * gain + offset};
    };
    const TensorList in = {rnd(c.a, seed + 4), rnd(c.b, seed + 5)};
    seed += 6;
    const Tensor want = fn(in)[0];
    EXPECT_EQ(marked(fn, in, false, kEpilogue), 1);
    jit::TracedFunction traced = jit::trace(fn, in);
    EXPECT_EQ(count_of(generated_calls(traced, blocked(true, -1)),
                       "call void @kiln_abi_matmul_epilogue("),
              1);
    for (int bits : kiln::test::kVectorWidths) {
      SCOPED_TRACE(testing::Message() << "a rank " << c.a.size() << " b rank " << c.b.size()
                                      << " vector_bits " << bits);
      const Tensor separate = jit::compile(traced, blocked(false, bits))(in)[0];
      const Tensor got = jit::compile(traced, blocked(true, bits))(in)[0];
      EXPECT_LE(max_rel_error(got, want), 1e-5);
      EXPECT_LE(max_rel_error(got, separate), 1e-6);
    }
  }
  Tensor w = rnd({40, 56}, 200, 0.3), gain = rnd({56}, 201);
  auto fn = [&](const TensorList& in) {
    return TensorList{capped(matmul(in[0], w) * 4.0) * gain, relu(matmul(in[1], w))};
  };
  const TensorList in = {rnd({2, 30, 40}, 202), rnd({7, 40}, 203)};
  const TensorList want = fn(in);
  EXPECT_EQ(marked(fn, in, true, kEpilogue), 2);
  jit::TracedFunction traced = jit::trace(fn, in);
  jit::freeze(traced);
  for (int bits : kiln::test::kVectorWidths) {
    SCOPED_TRACE(testing::Message() << "frozen right operand, vector_bits " << bits);
    const TensorList got = jit::compile(traced, blocked(true, bits))(in);
    EXPECT_LE(max_rel_error(got[0], want[0]), 1e-5);
    EXPECT_LE(max_rel_error(got[1], want[1]), 1e-5);
  }
}

// A product whose value is needed after its chain too (returned, or reduced later as a training
// step's backward reads its forward values): the chain still runs on each block, into its own
// buffer, for a conv, a linear and a batched matmul, at every vector width, frozen and not.
TEST(BlockEpilogues, SharedValuesKeepTheirOwnBuffer) {
  kiln::test::ScopedThreads threads;
  Tensor wc = rnd({12, 6, 3, 3}, 61, 0.3), wl = rnd({33, 40}, 62, 0.2), s = rnd({33}, 63);
  auto fn = [&](const TensorList& in) {
    Tensor c = conv2d(in[0], wc, {}, 1, 1);
    Tensor cz = c * sigmoid(c);
    Tensor l = linear(in[1], wl);
    Tensor lz = tanh(l) * s;
    Tensor m = matmul(in[2], in[3]);
    Tensor mz = clamp(m * 0.125, -1.0, std::nullopt);
    const int64_t all[] = {0, 1};
    return TensorList{cz, c, lz, sum(l, all), mz, m};
  };
  const TensorList in = {rnd({2, 6, 9, 11}, 64), rnd({3, 20, 40}, 65), rnd({2, 17, 24}, 66),
                         rnd({2, 24, 19}, 67)};
  const TensorList want = fn(in);
  for (bool frozen : {false, true}) {
    EXPECT_EQ(marked(fn, in, frozen, kEpilogue), 3);
    jit::TracedFunction traced = jit::trace(fn, in);
    if (frozen) jit::freeze(traced);
    EXPECT_EQ(calls_ending(generated_calls(traced, blocked(true, -1)), "_epilogue"), 3);
    for (int bits : kiln::test::kVectorWidths) {
      SCOPED_TRACE(testing::Message()
                   << (frozen ? "frozen" : "weights as arguments") << " vector_bits " << bits);
      const TensorList got = jit::compile(traced, blocked(true, bits))(in);
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) EXPECT_LE(max_rel_error(got[k], want[k]), 1e-5);
    }
  }
}

// A training step (forward, backward, SGD update) of an MLP whose activation is written out,
// QuickGELU l * sigmoid(1.702 l): the backward's products take the chains after them as block
// epilogues (the activation's derivative after the hidden gradient's matmul, the SGD update after
// a weight gradient's), and the compiled step follows eager step for step.
TEST(BlockEpilogues, TrainingStepWithAWrittenOutActivationFollowsEager) {
  auto make = [] {
    return TensorList{rnd({48, 16}, 81, 0.3).requires_grad_(), zeros({48}).requires_grad_(),
                      rnd({5, 48}, 82, 0.3).requires_grad_()};
  };
  auto step = [](TensorList& p) {
    auto sgd = std::make_shared<optim::SGD>(std::vector<Tensor>(p.begin(), p.end()),
                                            optim::SGDOptions(0.1));
    return [&p, sgd](const TensorList& x) {
      Tensor l = linear(x[0], p[0], p[1]);
      Tensor h = l * sigmoid(l * 1.702);
      Tensor loss = cross_entropy(linear(h, p[2]), x[1]);
      sgd->zero_grad();
      loss.backward();
      sgd->step();
      return TensorList{loss.detach()};
    };
  };
  const Tensor x = rnd({24, 16}, 83);
  const Tensor y = tensor({0.0, 2.0, 1.0, 4.0, 3.0, 2.0, 0.0, 1.0, 1.0, 3.0, 4.0, 0.0,
                           2.0, 2.0, 1.0, 0.0, 3.0, 4.0, 1.0, 2.0, 0.0, 3.0, 1.0, 4.0},
                          DType::Int64);
  TensorList eager_params = make(), compiled_params = make();
  auto eager_step = step(eager_params);
  auto traced_step = step(compiled_params);
  jit::TraceOptions options;
  options.named_captures = {{"fc1.weight", compiled_params[0]},
                            {"fc1.bias", compiled_params[1]},
                            {"fc2.weight", compiled_params[2]}};
  jit::TracedFunction traced = jit::trace(traced_step, {x, y}, options);  // step 1, eagerly
  eager_step({x, y});
  EXPECT_GE(calls_ending(generated_calls(traced, blocked(true, -1)), "_epilogue"), 1);
  const jit::CompiledFunction compiled = jit::compile(traced, blocked(true, 0));
  for (int s = 0; s < 3; ++s) {
    const Tensor eager_loss = eager_step({x, y})[0];
    const Tensor compiled_loss = compiled({x, y})[0];
    EXPECT_LE(kiln::test::max_abs_diff(compiled_loss, eager_loss), 1e-5) << "step " << s;
    for (size_t i = 0; i < compiled_params.size(); ++i)
      EXPECT_LE(kiln::test::max_abs_diff(compiled_params[i], eager_params[i]), 1e-5)
          << "parameter " << i << " after step " << s;
  }
}

// A linear's input computed by an elementwise chain, as the linear's block prologue: relu(x + r) *
// mask[row] before the first linear (whose own epilogue chain runs too), exp(u * 0.1) * 0.5
// before the second (a fused linear: bias, residual and relu). On the host's description (one block
// of rows) and one with small caches (many blocks, the last partial), frozen and not, at every
// vector width: the same as eager and as the chains as kernels of their own.
TEST(BlockPrologues, LinearInputsMatchEager) {
  kiln::test::ScopedThreads threads;
  Tensor w1 = rnd({96, 40}, 31, 0.2), b1 = rnd({96}, 32), w2 = rnd({24, 96}, 33, 0.2);
  Tensor b2 = rnd({24}, 38);
  auto fn = [&](const TensorList& in) {
    Tensor h = linear(relu(in[0] + in[1]) * in[2], w1, b1);
    return TensorList{tanh(h) * 0.5 + h, relu(linear(exp(in[3] * 0.1) * 0.5, w2, b2) + in[4])};
  };
  const TensorList in = {rnd({3, 70, 40}, 34), rnd({3, 70, 40}, 35), rnd({3, 70, 1}, 36),
                         rnd({3, 70, 96}, 37), rnd({3, 70, 24}, 39)};
  const TensorList want = fn(in);
  for (bool frozen : {false, true}) {
    EXPECT_EQ(marked(fn, in, frozen, kPrologue), 2);
    EXPECT_EQ(marked(fn, in, frozen, kEpilogue), 1);
    jit::TracedFunction traced = jit::trace(fn, in);
    if (frozen) jit::freeze(traced);
    const std::string calls = generated_calls(traced, blocked(true, -1));
    EXPECT_EQ(count_of(calls, "call void @kiln_abi_linear_prologue("), 1);
    EXPECT_EQ(count_of(calls, "call void @kiln_abi_linear_fused_prologue("), 1);
    SCOPED_TRACE(frozen ? "frozen" : "weights as arguments");
    expect_prologues_match(traced, in, want);
  }
}

// A matmul by a matrix (an argument, and a frozen constant) whose input is a chain, with a chain
// after it too: relu(x + r) * mask[row] @ W, then 30 * tanh(y / 30).
TEST(BlockPrologues, MatmulInputsMatchEager) {
  kiln::test::ScopedThreads threads;
  Tensor w = rnd({40, 56}, 51, 0.3);
  auto fn = [&](const TensorList& in) {
    Tensor y = matmul(relu(in[0] + in[1]) * in[2], in[3]);
    Tensor z = matmul(exp(in[0] * 0.1), w);
    return TensorList{tanh(y / 30.0) * 30.0, z};
  };
  const TensorList in = {rnd({3, 70, 40}, 52), rnd({3, 70, 40}, 53), rnd({3, 70, 1}, 54),
                         rnd({40, 33}, 55)};
  const TensorList want = fn(in);
  for (bool frozen : {false, true}) {
    EXPECT_EQ(marked(fn, in, frozen, kPrologue), 2);
    jit::TracedFunction traced = jit::trace(fn, in);
    if (frozen) jit::freeze(traced);
    EXPECT_EQ(calls_ending(generated_calls(traced, blocked(true, -1)), "matmul_prologue"), 2);
    SCOPED_TRACE(frozen ? "frozen" : "weights as arguments");
    expect_prologues_match(traced, in, want);
  }
}

// In a loop body, reading the carried value: h = tanh(linear(relu(h + u) * 0.5, w)) for five
// steps; the saved artifact (whose plan runs the chain as its own instruction) agrees too.
TEST(BlockPrologues, InsideALoopBodyAndSaved) {
  Tensor w = rnd({32, 32}, 41, 0.3);
  auto fn = [&](const TensorList& in) {
    return loop(5,
                [&](const Tensor&, const TensorList& c) {
                  return TensorList{tanh(linear(relu(c[0] + in[1]) * 0.5, w))};
                },
                {in[0]});
  };
  const TensorList in = {rnd({6, 32}, 42), rnd({6, 32}, 43)};
  const Tensor want = fn(in)[0];
  EXPECT_EQ(marked(fn, in, false, kPrologue), 1);
  jit::TracedFunction traced = jit::trace(fn, in);
  for (int bits : kiln::test::kVectorWidths) {
    SCOPED_TRACE(testing::Message() << "vector_bits " << bits);
    EXPECT_LE(max_rel_error(jit::compile(traced, blocked(true, bits))(in)[0], want), 1e-5);
  }
  auto model = rt::Model::from_bytes(jit::save_to_bytes(traced));
  rt::Session session(model);
  std::vector<const TensorImpl*> args{in[0].impl(), in[1].impl()};
  EXPECT_LE(max_rel_error(Tensor(session.run(args)[0]), want), 1e-5);
}

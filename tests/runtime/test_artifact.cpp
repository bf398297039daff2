// The artifact loader, verifier and executor on hand-built artifacts (no MLIR involved):
// results against naive float64 loops, every truncation and single-byte corruption of a valid
// file rejected cleanly, guards, unknown kernels, sessions on several threads, state updates.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <thread>

#include "artifact_builder.h"
#include "kiln/runtime/model.h"
#include "kiln/runtime/registry.h"
#include "kiln/runtime/views.h"

namespace kiln {
namespace {

using testing::ArtifactSpec;
using testing::InstrSpec;
using testing::linear_relu_spec;
using testing::random_floats;

// relu(x W^T + b) in float64.
std::vector<double> reference_linear_relu(const std::vector<float>& x, const std::vector<float>& w,
                                          const std::vector<float>& b) {
  std::vector<double> y(8);
  for (int i = 0; i < 2; ++i) {
    for (int o = 0; o < 4; ++o) {
      double acc = b[o];
      for (int k = 0; k < 3; ++k) acc += double(x[i * 3 + k]) * w[o * 3 + k];
      y[i * 4 + o] = std::max(acc, 0.0);
    }
  }
  return y;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    rt::Model::from_bytes(bytes);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Registry, HasTheZooOpsAndRejectsUnknownNames) {
  const rt::Registry& r = rt::builtin_registry();
  for (const char* name : {"conv2d",
                           "conv2d_fused",
                           "linear",
                           "linear_fused",
                           "relu",
                           "add",
                           "batch_norm",
                           "max_pool2d",
                           "adaptive_avg_pool2d",
                           "view",
                           "reshape",
                           "softmax",
                           "layer_norm",
                           "gelu",
                           "matmul",
                           "embedding",
                           "clamp",
                           "mean",
                           "cat",
                           "transpose",
                           "permute",
                           "sigmoid",
                           "tanh",
                           "mul",
                           "slice",
                           "select",
                           "stack",
                           "dropout",
                           "hardtanh_fake_never"}) {
    if (std::string(name) == "hardtanh_fake_never") {
      EXPECT_EQ(r.find(name), nullptr);
    } else {
      EXPECT_NE(r.find(name), nullptr) << name;
    }
  }
  const rt::KernelDef* conv = r.find("conv2d");
  EXPECT_EQ(conv->min_inputs, 3);
  EXPECT_EQ(conv->num_outputs, 1);
  EXPECT_EQ(conv->attrs.size(), 4u);  // stride, padding, dilation, groups (ir/ops.toml)
  EXPECT_EQ(r.find("max_pool2d")->num_outputs, 2);
}

// Every builtin kernel takes its signature from the op schema, and its decoder reads only the
// attributes its op has: given each attribute of the signature (plausible values), and again
// with only the required ones (the optional ones then read as the schema's defaults), decoding
// succeeds. A decoder shared by several ops that reads another op's attribute fails here.
TEST(Registry, EveryDecoderReadsOnlyItsSignature) {
  const rt::Registry& r = rt::builtin_registry();
  ASSERT_GT(rt::op_signatures().size(), 100u);
  const int64_t two[] = {1, 1};
  int decoded = 0;
  for (std::string_view name : r.names()) {
    const rt::KernelDef* def = r.find(name);
    const rt::OpSignature* sig = rt::find_op_signature(name);
    ASSERT_NE(sig, nullptr) << name << " is registered but not in the schema";
    EXPECT_EQ(def->attrs.data(), sig->attrs.data()) << name;
    EXPECT_EQ(def->num_outputs, sig->num_outputs) << name;
    if (!def->decode) continue;
    for (const bool optional_too : {true, false}) {
      std::vector<rt::AttrValue> values;
      for (const rt::AttrSpec& spec : def->attrs) {
        if (!spec.required && !optional_too) continue;
        rt::AttrValue v{spec.name, spec.type};
        v.i = 1;  // a dim, a count, an enum's second value, true
        v.f = 0.5;
        v.ints = two;
        values.push_back(v);
      }
      try {
        def->decode(rt::AttrMap(name, values, def->attrs));
        ++decoded;
      } catch (const Error& e) {
        ADD_FAILURE() << name << (optional_too ? " (all attributes)" : " (required only)") << ": "
                      << e.what();
      }
    }
  }
  EXPECT_GT(decoded, 100);
}

TEST(Artifact, LinearReluMatchesFloat64Reference) {
  const auto w = random_floats(12, 1), b = random_floats(4, 2), x = random_floats(6, 3);
  auto model = rt::Model::from_bytes(linear_relu_spec(w, b).build());
  ASSERT_EQ(model->inputs().size(), 1u);
  EXPECT_EQ(model->inputs()[0].name, "x");
  EXPECT_EQ(model->outputs()[0].shape, Dims({2, 4}));
  rt::Session session(model);
  TensorImplPtr xt =
      kiln::from_blob(const_cast<float*>(x.data()), std::vector<int64_t>{2, 3}, DType::Float32);
  const std::vector<double> want = reference_linear_relu(x, w, b);
  for (int rep = 0; rep < 3; ++rep) {  // the arena is reused: results must not drift
    auto y = session.run({xt.get()});
    ASSERT_EQ(y.size(), 1u);
    ASSERT_EQ(y[0]->sizes(), Dims({2, 4}));
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[0]->data_ptr<float>()[i], want[i], 1e-5) << i;
  }
  // run_into writes the caller's buffer.
  std::vector<float> out(8, -7.0f);
  TensorImplPtr ot = kiln::from_blob(out.data(), std::vector<int64_t>{2, 4}, DType::Float32);
  TensorImpl* outs[] = {ot.get()};
  const TensorImpl* ins[] = {xt.get()};
  session.run_into(ins, outs);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(out[i], want[i], 1e-5);
}

TEST(Artifact, ProfilingTimesEveryInstruction) {
  const auto w = random_floats(12, 1), b = random_floats(4, 2), x = random_floats(6, 3);
  auto model = rt::Model::from_bytes(linear_relu_spec(w, b).build());
  rt::Session session(model);
  TensorImplPtr xt =
      kiln::from_blob(const_cast<float*>(x.data()), std::vector<int64_t>{2, 3}, DType::Float32);
  session.run({xt.get()});
  EXPECT_TRUE(session.profile().empty());  // off by default
  session.enable_profiling();
  for (int r = 0; r < 3; ++r) session.run({xt.get()});
  const auto p = session.profile();
  ASSERT_EQ(p.size(), model->stats().num_instructions);
  double total = 0;
  for (size_t k = 0; k < p.size(); ++k) {
    EXPECT_EQ(p[k].index, k);
    EXPECT_EQ(p[k].runs, 3u);
    EXPECT_GE(p[k].total_ms, 0.0);
    EXPECT_FALSE(p[k].generated) << p[k].what;  // runtime kernels
    total += p[k].total_ms;
  }
  EXPECT_GT(total, 0.0);
  EXPECT_EQ(p[0].what.rfind("linear -> [2,4] f32", 0), 0u) << p[0].what;
  session.enable_profiling(false);
  session.run({xt.get()});
  EXPECT_TRUE(session.profile().empty());
}

// max_pool2d's indices are an optional output: computed when the plan reads them (here a model
// output), discarded (not computed) when nothing does.
TEST(Artifact, UnreadOptionalOutputsAreDiscarded) {
  using K = fb::AttrKind;
  for (bool indices_are_output : {false, true}) {
    ArtifactSpec a;
    a.slots = {
        {fb::SlotKind::Arena, fb::DType::Float32, {1, 2, 4, 4}, 0, 0},    // 0 x
        {fb::SlotKind::Arena, fb::DType::Float32, {1, 2, 2, 2}, 128, 0},  // 1 y
        {fb::SlotKind::Arena, fb::DType::Int64, {1, 2, 2, 2}, 192, 0},    // 2 indices
    };
    a.instrs = {{"max_pool2d",
                 {0},
                 {1, 2},
                 {{"kernel", K::Ints, 0, 0, {2, 2}},
                  {"stride", K::Ints, 0, 0, {2, 2}},
                  {"padding", K::Ints, 0, 0, {0, 0}},
                  {"dilation", K::Ints, 0, 0, {1, 1}}}}};
    a.inputs = {{"x", 0}};
    a.outputs = {{"y", 1}};
    if (indices_are_output) a.outputs.push_back({"indices", 2});
    a.arena_bytes = 256;
    auto model = rt::Model::from_bytes(a.build());
    EXPECT_EQ(model->describe_plan().find("(discarded)") != std::string::npos, !indices_are_output);
    rt::Session s(model);
    auto x = random_floats(32, 21);
    TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{1, 2, 4, 4}, DType::Float32);
    auto out = s.run({xt.get()});
    ASSERT_EQ(out.size(), indices_are_output ? 2u : 1u);
    for (int c = 0; c < 2; ++c)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
          float best = -INFINITY;
          int64_t at = -1;
          for (int u = 0; u < 2; ++u)
            for (int v = 0; v < 2; ++v) {
              const int64_t k = (2 * i + u) * 4 + 2 * j + v;
              if (x[c * 16 + k] > best) best = x[c * 16 + k], at = k;
            }
          const int o = (c * 2 + i) * 2 + j;
          EXPECT_EQ(out[0]->data_ptr<float>()[o], best);
          if (indices_are_output) EXPECT_EQ(out[1]->data_ptr<int64_t>()[o], at);
        }
  }
}

// Inputs are read in place from the caller's tensor when nothing writes over their arena bytes
// while they are read: contiguous and strided inputs alternate (the latter are copied), and an
// in-place kernel over the input's bytes never writes into the caller's tensor.
TEST(Artifact, InputsReadInPlaceOrCopied) {
  const auto w = random_floats(12, 1), b = random_floats(4, 2), x = random_floats(6, 3);
  auto model = rt::Model::from_bytes(linear_relu_spec(w, b).build());
  rt::Session session(model);
  const std::vector<double> want = reference_linear_relu(x, w, b);
  std::vector<float> xt_data(x), wide(12, 99.0f);  // a [2,3] strided view of a [3,4] buffer
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 3; ++c) wide[c * 4 + r] = x[r * 3 + c];
  TensorImplPtr dense = kiln::from_blob(xt_data.data(), std::vector<int64_t>{2, 3}, DType::Float32);
  TensorImplPtr strided = kiln::views::transpose(
      *kiln::views::slice(*kiln::from_blob(wide.data(), std::vector<int64_t>{3, 4}, DType::Float32),
                          1, 0, 2, 1),
      0, 1);
  ASSERT_FALSE(strided->is_contiguous());
  for (const TensorImpl* in : {dense.get(), strided.get(), dense.get(), strided.get()}) {
    auto y = session.run({in});
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(y[0]->data_ptr<float>()[i], want[i], 1e-5) << i;
  }
  EXPECT_EQ(xt_data, x);  // the caller's input is never written

  // relu computed in place over the input's slot: the input must be copied, not written.
  ArtifactSpec a;
  a.slots = {{fb::SlotKind::Arena, fb::DType::Float32, {2, 3}, 0, 0},
             {fb::SlotKind::Arena, fb::DType::Float32, {2, 3}, 0, 0}};
  a.instrs = {{"relu", {0}, {1}, {}}};
  a.inputs = {{"x", 0}};
  a.outputs = {{"y", 1}};
  a.arena_bytes = 64;
  rt::Session inplace(rt::Model::from_bytes(a.build()));
  auto y = inplace.run({dense.get()});
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[0]->data_ptr<float>()[i], std::max(x[i], 0.0f)) << i;
  EXPECT_EQ(xt_data, x);
}

// LoadOptions::prepare_weights = false: nothing is prepared (no extra memory) and the results
// equal the prepared ones up to rounding (Winograd, packed GEMMs). The seed artifact has a
// Winograd conv, an mbconv block, a channels-across-lanes conv and that conv as a conv2d_avgpool.
TEST(Artifact, WeightsUnpreparedGiveTheSameResults) {
  const std::string path = std::string(KILN_TEST_DATA_DIR) + "/../../fuzz/corpus/conv_blocks.kiln";
  rt::LoadOptions plain_options;
  plain_options.prepare_weights = false;
  auto prepared = rt::Model::load(path),
       plain = rt::Model::load(path, rt::builtin_registry(), plain_options);
  rt::Session a(prepared), b(plain);
  const rt::PreparedStats pa = prepared->prepared_stats(), pb = plain->prepared_stats();
  EXPECT_TRUE(pa.ready && pb.ready);
  EXPECT_GT(pa.bytes, 0u);
  EXPECT_EQ(pa.counts.size(), 4u);
  EXPECT_EQ(pb.bytes, 0u);
  EXPECT_TRUE(pb.counts.empty());
  auto x = random_floats(8 * 16 * 16, 31);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{1, 8, 16, 16}, DType::Float32);
  auto ya = a.run({xt.get()}), yb = b.run({xt.get()});
  ASSERT_EQ(ya.size(), 2u);
  for (size_t k = 0; k < ya.size(); ++k) {
    double scale = 0, err = 0;
    for (int64_t i = 0; i < ya[k]->numel(); ++i) {
      const double va = ya[k]->data_ptr<float>()[i], vb = yb[k]->data_ptr<float>()[i];
      scale = std::max(scale, std::abs(va));
      err = std::max(err, std::abs(va - vb));
    }
    EXPECT_GT(scale, 0.0) << "output " << k;
    EXPECT_LE(err, 1e-4 * scale) << "output " << k;
  }
}

TEST(Artifact, GuardsNameTheInputExpectedAndActual) {
  auto model =
      rt::Model::from_bytes(linear_relu_spec(random_floats(12, 1), random_floats(4, 2)).build());
  rt::Session session(model);
  std::vector<float> x(8);
  TensorImplPtr bad = kiln::from_blob(x.data(), std::vector<int64_t>{2, 4}, DType::Float32);
  try {
    session.run({bad.get()});
    FAIL() << "no guard error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input \"x\": expected [2,3] f32, got [2,4] f32"),
              std::string::npos)
        << e.what();
  }
  std::vector<double> xd(6);
  TensorImplPtr bad_dtype = kiln::from_blob(xd.data(), std::vector<int64_t>{2, 3}, DType::Float64);
  EXPECT_THROW(session.run({bad_dtype.get()}), Error);
  EXPECT_THROW(session.run({}), Error);
  // Named inputs: unknown and missing names are errors that say so.
  std::vector<float> xs(6, 1.0f);
  TensorImplPtr good = kiln::from_blob(xs.data(), std::vector<int64_t>{2, 3}, DType::Float32);
  std::pair<std::string_view, const TensorImpl*> named[] = {{"x", good.get()}};
  EXPECT_EQ(session.run_named(named)[0]->sizes(), Dims({2, 4}));
  std::pair<std::string_view, const TensorImpl*> wrong[] = {{"y", good.get()}};
  try {
    session.run_named(wrong);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no input \"y\""), std::string::npos) << e.what();
  }
}

TEST(Artifact, UnknownKernelsAreAllListedAtLoad) {
  ArtifactSpec a = linear_relu_spec(random_floats(12, 1), random_floats(4, 2));
  a.instrs[0].kernel = "frobnicate";
  a.instrs[1].kernel = "warp_drive";
  const std::string e = error_of(a.build());
  EXPECT_NE(e.find("unknown kernels"), std::string::npos) << e;
  EXPECT_NE(e.find("frobnicate"), std::string::npos) << e;
  EXPECT_NE(e.find("warp_drive"), std::string::npos) << e;
}

TEST(Artifact, SemanticChecksNameWhatIsWrong) {
  auto base = [] { return linear_relu_spec(random_floats(12, 1), random_floats(4, 2)); };
  struct Case {
    const char* what;
    std::function<void(ArtifactSpec&)> mutate;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"arena offset", [](ArtifactSpec& a) { a.slots[3].offset = 1 << 20; }, "outside the arena"},
      {"misaligned", [](ArtifactSpec& a) { a.slots[3].offset = 66; }, "not aligned"},
      {"weight index", [](ArtifactSpec& a) { a.slots[1].weight = 9; }, "weight index 9"},
      {"weight too small",
       [](ArtifactSpec& a) {
         a.slots[1].shape = {40, 3};
       },
       "needs 480 bytes"},
      {"operand range", [](ArtifactSpec& a) { a.instrs[0].inputs[0] = 77; }, "out of range"},
      {"required operand", [](ArtifactSpec& a) { a.instrs[0].inputs[1] = -1; }, "is required"},
      {"write weight", [](ArtifactSpec& a) { a.instrs[1].outputs[0] = 1; },
       "weights are read-only"},
      {"read before write", [](ArtifactSpec& a) { std::swap(a.instrs[0], a.instrs[1]); },
       "before any instruction writes it"},
      {"arity", [](ArtifactSpec& a) { a.instrs[1].inputs.push_back(0); }, "expected 1 inputs"},
      {"version", [](ArtifactSpec& a) { a.version = 99; }, "format version 99"},
      {"huge dims",
       [](ArtifactSpec& a) {
         a.slots[3].shape = {1ll << 40, 1ll << 40};
       },
       "overflows"},
      {"negative dim",
       [](ArtifactSpec& a) {
         a.slots[3].shape = {-2, 4};
       },
       "negative dimension"},
      {"huge arena", [](ArtifactSpec& a) { a.arena_bytes = 1ull << 62; }, "exceeds the limit"},
      // 2 GB where the values end at byte 96: a flipped bit a session would allocate and zero.
      {"arena past its values", [](ArtifactSpec& a) { a.arena_bytes = 128 + (1ull << 31); },
       "extends past its last value, which ends at byte 96"},
      {"bad dtype", [](ArtifactSpec& a) { a.slots[0].dtype = static_cast<fb::DType>(42); },
       "unknown dtype 42"},
      {"foreign target", [](ArtifactSpec& a) { a.target_triple = "riscv64-unknown-linux-gnu"; },
       "riscv64"},
      {"cpu feature", [](ArtifactSpec& a) { a.cpu_features = {"quantum"}; }, "unknown CPU feature"},
      {"attr missing",
       [](ArtifactSpec& a) {
         a.instrs[1] = {"softmax", {3}, {4}, {}};
       },
       "missing attribute 'dim'"},
      {"attr type",
       [](ArtifactSpec& a) {
         a.instrs[1] = {"softmax", {3}, {4}, {{"dim", fb::AttrKind::Ints, 0, 0, {1}}}};
       },
       "attribute 'dim': expected int"},
      {"output never written", [](ArtifactSpec& a) { a.instrs.pop_back(); }, "never written"},
      {"input slot kind", [](ArtifactSpec& a) { a.inputs[0].second = 1; }, "not an arena slot"},
      // linear's output on its input's bytes: only elementwise kernels and views may alias.
      {"overlap", [](ArtifactSpec& a) { a.slots[3].offset = 0; }, "cannot run in place"},
      {"partial alias",
       [](ArtifactSpec& a) {
         a.slots[4].offset = 80;  // relu's [80, 112) half over linear's [64, 96)
       },
       "without being its exact alias"},
  };
  for (const Case& c : cases) {
    ArtifactSpec a = base();
    c.mutate(a);
    const std::string e = error_of(a.build());
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": got \"" << e << "\"";
  }
}

TEST(Artifact, ControlFlowRunsTheTakenBranchAndTheLoop) {
  const std::vector<uint8_t> file = testing::control_flow_spec().build();
  rt::LoadOptions bounded;
  bounded.max_instruction_runs = 2;  // the loop's body runs 3 times
  try {
    rt::Model::from_bytes(file, rt::builtin_registry(), bounded);
    ADD_FAILURE() << "a loop beyond max_instruction_runs loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("runs 3 times"), std::string::npos) << e.what();
  }
  bounded.max_instruction_runs = 3;
  EXPECT_NO_THROW(rt::Model::from_bytes(file, rt::builtin_registry(), bounded));
  auto model = rt::Model::from_bytes(file);
  rt::Session session(model);
  std::vector<float> x = {1.5f, -2.0f, 0.25f, -0.5f};
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{4}, DType::Float32);
  for (const bool p : {true, false, true}) {
    bool flag = p;
    TensorImplPtr pt = kiln::from_blob(&flag, std::vector<int64_t>{}, DType::Bool);
    auto out = session.run({xt.get(), pt.get()});
    for (int i = 0; i < 4; ++i) {
      const double y = p ? std::max(double(x[i]), 0.0) : -double(x[i]);
      EXPECT_EQ(out[0]->data_ptr<float>()[i], y) << p << " " << i;
      EXPECT_EQ(out[1]->data_ptr<float>()[i], 8 * y) << p << " " << i;
    }
  }
}

TEST(Artifact, ControlFlowChecksNameWhatIsWrong) {
  struct Case {
    const char* what;
    std::function<void(ArtifactSpec&)> mutate;
    const char* expect;
  };
  const std::vector<Case> cases = {
      {"version 1", [](ArtifactSpec& a) { a.version = 1; }, "control flow needs format version 2"},
      {"region past the end", [](ArtifactSpec& a) { a.instrs[3].body_size = 7; },
       "extend past the end of the enclosing program"},
      {"nested region past its parent",
       [](ArtifactSpec& a) {
         a.instrs[0].body_size = 0;  // the then-branch is empty, the else-branch holds 1 + ...
         a.instrs[0].else_size = 1;
         a.instrs[0].yields = {0};
         InstrSpec loop = a.instrs[3];  // a loop (over x) whose body lies outside the branch
         loop.inputs = {0};
         a.instrs.insert(a.instrs.begin() + 1, loop);
       },
       "extend past the end of the enclosing region"},
      {"branch value read after the if", [](ArtifactSpec& a) { a.instrs[3].inputs = {3}; },
       "reads slot 3 before"},
      {"yield from the other branch", [](ArtifactSpec& a) { a.instrs[0].else_yields = {3}; },
       "else-branch yield 0 (slot 3) holds no value"},
      {"yield count",
       [](ArtifactSpec& a) {
         a.instrs[0].yields = {3, 4};
       },
       "2 then-branch yield for 1 values"},
      {"yield shape", [](ArtifactSpec& a) { a.slots[6].shape = {2}; }, "loop-body yield 0 is"},
      {"predicate size", [](ArtifactSpec& a) { a.slots[1].shape = {2}; }, "one-element predicate"},
      {"counter dtype", [](ArtifactSpec& a) { a.slots[8].dtype = fb::DType::Float32; },
       "not a 0-dim int64 arena slot"},
      {"step", [](ArtifactSpec& a) { a.instrs[3].step = 0; }, "step must be positive"},
      {"loop else-region", [](ArtifactSpec& a) { a.instrs[3].else_size = 1; },
       "a loop has no else-region"},
      {"carried count", [](ArtifactSpec& a) { a.instrs[3].carried = {}; }, "carried slots"},
      {"counter on a branch", [](ArtifactSpec& a) { a.instrs[0].counter = 1000000; },
       "counter slot 1000000 out of range"},
      {"valid counter on a branch", [](ArtifactSpec& a) { a.instrs[0].counter = 8; },
       "a loop's counter or carried slots on a branch"},
      {"else yields on a loop", [](ArtifactSpec& a) { a.instrs[3].else_yields = {6}; },
       "else-branch yields on a loop"},
      {"kernel on a control instruction", [](ArtifactSpec& a) { a.instrs[0].kernel = "relu"; },
       "names no kernel or symbol"},
      {"unknown control",
       [](ArtifactSpec& a) { a.instrs[0].control = static_cast<fb::Control>(9); },
       "unknown control kind 9"},
      {"nesting depth",
       [](ArtifactSpec& a) {
         // 70 Ifs, each the then-branch of the one before, around the If of the spec.
         a.instrs.erase(a.instrs.begin() + 3, a.instrs.end());
         a.outputs = {{"y", 2}};
         std::vector<InstrSpec> chain;
         for (uint32_t d = 0; d < 70; ++d) {
           InstrSpec in = a.instrs[0];
           in.body_size = 72 - d;
           in.else_size = 0;
           chain.push_back(in);
         }
         a.instrs.insert(a.instrs.begin(), chain.begin(), chain.end());
       },
       "nested deeper than 64"},
  };
  for (const Case& c : cases) {
    ArtifactSpec a = testing::control_flow_spec();
    c.mutate(a);
    const std::string e = error_of(a.build());
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.what << ": got \"" << e << "\"";
  }
}

// Every prefix of a valid file, and every single-byte corruption of it, either loads or is
// rejected with kiln::Error; one that loads runs or fails with kiln::Error (never a crash).
TEST(Artifact, TruncationsAndByteFlipsFailCleanly) {
  const std::vector<uint8_t> good =
      linear_relu_spec(random_floats(12, 1), random_floats(4, 2)).build();
  ASSERT_EQ(error_of(good), "");
  for (size_t n = 0; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + n);
    EXPECT_NE(error_of(cut), "") << "prefix of " << n << " bytes loaded";
  }
  std::vector<float> x(6, 0.5f);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{2, 3}, DType::Float32);
  int loaded = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    for (uint8_t flip : {0x01, 0x80, 0xff}) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= flip;
      std::shared_ptr<const rt::Model> m;
      try {
        m = rt::Model::from_bytes(bad);
      } catch (const Error&) {
        continue;
      }
      ++loaded;
      try {
        rt::Session s(m);
        if (m->inputs().size() == 1 && m->inputs()[0].shape == Dims({2, 3}) &&
            m->inputs()[0].dtype == DType::Float32) {
          s.run({xt.get()});
        }
      } catch (const Error&) {
      }
    }
  }
  EXPECT_GT(loaded, 0);  // weight bytes and names flip harmlessly
}

TEST(Artifact, SessionsRunConcurrently) {
  const auto w = random_floats(12, 4), b = random_floats(4, 5);
  auto model = rt::Model::from_bytes(linear_relu_spec(w, b).build());
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      rt::Session s(model);
      for (int rep = 0; rep < 200; ++rep) {
        const auto x = random_floats(6, 100 + t * 1000 + rep);
        TensorImplPtr xt = kiln::from_blob(const_cast<float*>(x.data()), std::vector<int64_t>{2, 3},
                                           DType::Float32);
        auto y = s.run({xt.get()});
        const auto want = reference_linear_relu(x, w, b);
        for (int i = 0; i < 8; ++i)
          bad[t] += std::fabs(y[0]->data_ptr<float>()[i] - want[i]) > 1e-5;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

// A training-step artifact: w <- w - 0.5 * g each call, in the session's own copy of w.
TEST(Artifact, StateUpdatesPersistPerSession) {
  ArtifactSpec a;
  const std::vector<float> w0 = {1, 2, 3, 4};
  a.blobs = {{"w", testing::bytes_of(w0)}};
  a.slots = {
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 0, 0},   // 0: g
      {fb::SlotKind::Weight, fb::DType::Float32, {4}, 0, 0},  // 1: w
      {fb::SlotKind::Arena, fb::DType::Float32, {4}, 64, 0},  // 2: w - 0.5 g
  };
  a.instrs = {{"sub", {1, 0}, {2}, {{"alpha", fb::AttrKind::Float, 0, 0.5, {}}}}};
  a.inputs = {{"g", 0}};
  a.outputs = {{"loss_proxy", 2}};
  a.state = {{2, 0}};
  a.arena_bytes = 128;
  auto model = rt::Model::from_bytes(a.build());
  rt::Session s1(model), s2(model);
  std::vector<float> g = {1, 1, 2, -2};
  TensorImplPtr gt = kiln::from_blob(g.data(), std::vector<int64_t>{4}, DType::Float32);
  s1.run({gt.get()});
  s1.run({gt.get()});
  s2.run({gt.get()});
  const TensorImpl* w1 = s1.state("w");
  const TensorImpl* w2 = s2.state("w");
  ASSERT_TRUE(w1 && w2);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(w1->data_ptr<float>()[i], w0[i] - 1.0f * g[i]);
    EXPECT_FLOAT_EQ(w2->data_ptr<float>()[i], w0[i] - 0.5f * g[i]);
  }
}

// Views and copies of the shape kernels against index arithmetic.
// Attributes near the int64 limits (a file may carry any): a slice step of INT64_MAX is one
// element (its size and stride arithmetic once overflowed), and filling an int64 with 2^63 (which
// passed a `<= double(INT64_MAX)` check, an undefined conversion) is refused by name.
TEST(Artifact, ExtremeAttributesRunCorrectlyOrFailByName) {
  using K = fb::AttrKind;
  const int64_t max = std::numeric_limits<int64_t>::max();
  ArtifactSpec a;
  a.slots = {
      {fb::SlotKind::Arena, fb::DType::Float32, {2, 3, 4}, 0, 0},    // 0: x
      {fb::SlotKind::Arena, fb::DType::Float32, {2, 1, 4}, 128, 0},  // 1: x[:, 1::max]
  };
  a.instrs = {
      {"slice",
       {0},
       {1},
       {{"dim", K::Int, 1}, {"start", K::Int, 1}, {"end", K::Int, max}, {"step", K::Int, max}}}};
  a.inputs = {{"x", 0}};
  a.outputs = {{"s", 1}};
  a.arena_bytes = 192;
  rt::Session s(rt::Model::from_bytes(a.build()));
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = float(i);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{2, 3, 4}, DType::Float32);
  auto y = s.run({xt.get()});
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(y[0]->data_ptr<float>()[i * 4 + k], x[i * 12 + 4 + k]);

  ArtifactSpec f;
  f.slots = {
      {fb::SlotKind::Arena, fb::DType::Int64, {2}, 0, 0},   // 0: x
      {fb::SlotKind::Arena, fb::DType::Int64, {2}, 64, 0},  // 1: fill(x, 2^63)
  };
  f.instrs = {{"fill", {0}, {1}, {{"value", K::Float, 0, 9223372036854775808.0}}}};
  f.inputs = {{"x", 0}};
  f.outputs = {{"y", 1}};
  f.arena_bytes = 128;
  rt::Session fs(rt::Model::from_bytes(f.build()));
  int64_t xi[2] = {1, 2};
  TensorImplPtr xit = kiln::from_blob(xi, std::vector<int64_t>{2}, DType::Int64);
  try {
    fs.run({xit.get()});
    ADD_FAILURE() << "expected kiln::Error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("instruction 0 (fill)"), std::string::npos) << m;
    EXPECT_NE(m.find("does not fit i64"), std::string::npos) << m;
  }
}

TEST(Artifact, ShapeKernelsCopyStridedViews) {
  ArtifactSpec a;
  a.slots = {
      {fb::SlotKind::Arena, fb::DType::Float32, {2, 3, 4}, 0, 0},       // 0: x
      {fb::SlotKind::Arena, fb::DType::Float32, {4, 2, 3}, 128, 0},     // 1: permute(2,0,1)
      {fb::SlotKind::Arena, fb::DType::Float32, {2, 2, 4}, 256, 0},     // 2: slice dim1 [1:3]
      {fb::SlotKind::Arena, fb::DType::Float32, {3, 4}, 384, 0},        // 3: select dim0 idx 1
      {fb::SlotKind::Arena, fb::DType::Float32, {6, 4}, 128 + 384, 0},  // 4: view of x
  };
  using K = fb::AttrKind;
  a.instrs = {
      {"permute", {0}, {1}, {{"dims", K::Ints, 0, 0, {2, 0, 1}}}},
      {"slice",
       {0},
       {2},
       {{"dim", K::Int, 1}, {"start", K::Int, 1}, {"end", K::Int, 3}, {"step", K::Int, 1}}},
      {"select", {0}, {3}, {{"dim", K::Int, 0}, {"index", K::Int, 1}}},
      {"view", {0}, {4}, {{"shape", K::Ints, 0, 0, {6, 4}}}},
  };
  a.inputs = {{"x", 0}};
  a.outputs = {{"p", 1}, {"s", 2}, {"sel", 3}, {"v", 4}};
  a.arena_bytes = 640;
  auto model = rt::Model::from_bytes(a.build());
  rt::Session s(model);
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = float(i);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{2, 3, 4}, DType::Float32);
  auto y = s.run({xt.get()});
  auto X = [&](int i, int j, int k) { return x[i * 12 + j * 4 + k]; };
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) EXPECT_EQ(y[0]->data_ptr<float>()[k * 6 + i * 3 + j], X(i, j, k));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 4; ++k)
        EXPECT_EQ(y[1]->data_ptr<float>()[i * 8 + j * 4 + k], X(i, j + 1, k));
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k) EXPECT_EQ(y[2]->data_ptr<float>()[j * 4 + k], X(1, j, k));
  for (int i = 0; i < 24; ++i) EXPECT_EQ(y[3]->data_ptr<float>()[i], x[i]);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// conv2d_fused and linear_fused: act(op(x) + bias + residual) against float64 loops.
TEST(Artifact, FusedConvAndLinearMatchFloat64) {
  using K = fb::AttrKind;
  const int C = 2, O = 3, H = 5, W = 5;
  const auto w = random_floats(O * C * 3 * 3, 11), b = random_floats(O, 12);
  const auto lw = random_floats(4 * 75, 13), lb = random_floats(4, 14);
  ArtifactSpec a;
  a.blobs = {{"w", testing::bytes_of(w)},
             {"b", testing::bytes_of(b)},
             {"lw", testing::bytes_of(lw)},
             {"lb", testing::bytes_of(lb)}};
  a.slots = {
      {fb::SlotKind::Arena, fb::DType::Float32, {1, C, H, W}, 0, 0},    // 0 x
      {fb::SlotKind::Arena, fb::DType::Float32, {1, O, H, W}, 256, 0},  // 1 residual
      {fb::SlotKind::Weight, fb::DType::Float32, {O, C, 3, 3}, 0, 0},   // 2 w
      {fb::SlotKind::Weight, fb::DType::Float32, {O}, 0, 1},            // 3 b
      {fb::SlotKind::Arena, fb::DType::Float32, {1, O, H, W}, 640, 0},  // 4 conv out
      {fb::SlotKind::Arena, fb::DType::Float32, {1, 75}, 640, 0},       // 5 view
      {fb::SlotKind::Weight, fb::DType::Float32, {4, 75}, 0, 2},        // 6 lw
      {fb::SlotKind::Weight, fb::DType::Float32, {4}, 0, 3},            // 7 lb
      {fb::SlotKind::None, fb::DType::Float32, {}, 0, 0},               // 8 none
      {fb::SlotKind::Arena, fb::DType::Float32, {1, 4}, 1024, 0},       // 9 linear out
  };
  a.instrs = {
      {"conv2d_fused",
       {0, 2, 3, 1},
       {4},
       {{"stride", K::Ints, 0, 0, {1, 1}},
        {"padding", K::Ints, 0, 0, {1, 1}},
        {"dilation", K::Ints, 0, 0, {1, 1}},
        {"groups", K::Int, 1},
        {"activation", K::Int, 1}}},
      {"view", {4}, {5}, {{"shape", K::Ints, 0, 0, {1, 75}}}},
      // relu6-style clamp to [-0.1, 0.2], no residual
      {"linear_fused",
       {5, 6, 7, 8},
       {9},
       {{"activation", K::Int, 3},
        {"clamp_min", K::Float, 0, -0.1},
        {"clamp_max", K::Float, 0, 0.2}}},
  };
  a.inputs = {{"x", 0}, {"residual", 1}};
  a.outputs = {{"conv", 4}, {"y", 9}};
  a.arena_bytes = 1088;
  auto model = rt::Model::from_bytes(a.build());
  rt::Session s(model);
  auto x = random_floats(C * H * W, 15), r = random_floats(O * H * W, 16);
  TensorImplPtr xt = kiln::from_blob(x.data(), std::vector<int64_t>{1, C, H, W}, DType::Float32);
  TensorImplPtr rt_ = kiln::from_blob(r.data(), std::vector<int64_t>{1, O, H, W}, DType::Float32);
  auto y = s.run({xt.get(), rt_.get()});
  std::vector<double> conv(O * H * W);
  for (int o = 0; o < O; ++o)
    for (int i = 0; i < H; ++i)
      for (int j = 0; j < W; ++j) {
        double acc = b[o];
        for (int c = 0; c < C; ++c)
          for (int u = 0; u < 3; ++u)
            for (int v = 0; v < 3; ++v) {
              const int ii = i + u - 1, jj = j + v - 1;
              if (ii < 0 || jj < 0 || ii >= H || jj >= W) continue;
              acc += double(x[(c * H + ii) * W + jj]) * w[((o * C + c) * 3 + u) * 3 + v];
            }
        acc += r[(o * H + i) * W + j];
        conv[(o * H + i) * W + j] = std::max(acc, 0.0);
      }
  for (int k = 0; k < O * H * W; ++k) EXPECT_NEAR(y[0]->data_ptr<float>()[k], conv[k], 1e-4) << k;
  for (int n = 0; n < 4; ++n) {
    double acc = lb[n];
    for (int k = 0; k < 75; ++k) acc += conv[k] * lw[n * 75 + k];
    EXPECT_NEAR(y[1]->data_ptr<float>()[n], std::min(std::max(acc, -0.1), 0.2), 1e-4) << n;
  }
}

}  // namespace
}  // namespace kiln

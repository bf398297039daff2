// kiln::jit::compile_aot end to end: zoo models traced, compiled to standalone executables with
// their weights frozen in, run as separate processes on .npy files, outputs equal eager (max
// relative error <= 1e-4). The .npy files are written and read with the frontend's own
// read_npy/write_npy, independently of the runtime's reader inside the executable.

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "helpers.h"
#include "kiln/control_flow.h"
#include "kiln/jit/aot.h"
#include "kiln/kiln.h"
#include "kiln/models.h"
#include "kiln/runtime/aot_model.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_rel_error;
using kiln::test::rnd;

namespace {

struct Scratch {
  std::filesystem::path path;
  Scratch() {
    std::string t = (std::filesystem::temp_directory_path() / "kiln-jit-aot-XXXXXX").string();
    path = mkdtemp(t.data());
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& n) const { return (path / n).string(); }
};

int run(const std::string& cmd, std::string* output) {
  return kiln::test::run_command(cmd, output);
}

jit::TracedFunction trace_eval(nn::Module& model, const Tensor& example) {
  model.eval();
  return jit::trace(model, {example});
}

// Compiles model for `target`, runs the executable (under `runner`, e.g. qemu) on `input` and
// returns its output.
Tensor run_aot(nn::Module& model, const Tensor& trace_input, const Tensor& input,
               const std::string& target = "host", const std::string& runner = "") {
  autograd::NoGradGuard no_grad;
  jit::TracedFunction traced = trace_eval(model, trace_input);
  Scratch dir;
  jit::AotOptions o;
  o.output = dir / "model";
  o.target = target;
  const jit::AotResult r = jit::compile_aot(traced, o);
  EXPECT_EQ(r.files.size(), 1u);
  write_npy(dir / "x.npy", input);
  std::string out;
  const int rc = run(runner + o.output + " " + dir / "x.npy -o " + dir / "y.npy", &out);
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) return Tensor();
  return read_npy(dir / "y.npy");
}

void expect_aot_matches_eager(nn::Module& model, const Tensor& trace_input, const Tensor& input) {
  model.eval();
  autograd::NoGradGuard no_grad;
  Tensor eager = model.forward(input);
  Tensor got = run_aot(model, trace_input, input);
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.sizes(), eager.sizes());
  EXPECT_LE(max_rel_error(got, eager), 1e-4);
}

}  // namespace

TEST(JitAot, MLP) {
  auto m = models::mlp({20, 64, 32, 5});
  expect_aot_matches_eager(*m, rnd({3, 20}, 1), rnd({3, 20}, 2));
}

TEST(JitAot, LeNet) {
  auto m = models::lenet();
  expect_aot_matches_eager(*m, rnd({2, 1, 28, 28}, 3), rnd({2, 1, 28, 28}, 4));
}

TEST(JitAot, ResNet18) {
  auto m = models::resnet18(10);
  expect_aot_matches_eager(*m, rnd({1, 3, 64, 64}, 5), rnd({1, 3, 64, 64}, 6));
}

TEST(JitAot, MobileNetV2) {
  auto m = models::mobilenet_v2(10);
  expect_aot_matches_eager(*m, rnd({2, 3, 64, 64}, 7), rnd({2, 3, 64, 64}, 8));
}

// Token inputs: the executable reads int64 .npy files.
TEST(JitAot, TransformerClassifier) {
  auto m = models::transformer_classifier(50, 5);
  expect_aot_matches_eager(*m, randint(0, 50, {2, 12}), randint(0, 50, {2, 12}));
}

TEST(JitAot, LSTMClassifier) {
  auto m = models::lstm_classifier(50, 5, 16, 32);
  expect_aot_matches_eager(*m, randint(0, 50, {3, 7}), randint(0, 50, {3, 7}));
}

TEST(JitAot, SharedObjectWithHeaderAndEmbeddedWeights) {
  autograd::NoGradGuard no_grad;
  auto m = models::mlp({6, 8, 3});
  m->eval();
  jit::TracedFunction traced = trace_eval(*m, rnd({2, 6}, 9));
  Scratch dir;
  jit::AotOptions o;
  o.emit = "so";
  o.name = "mlp";
  o.output = dir / "libmlp.so";
  const jit::AotResult r = jit::compile_aot(traced, o);
  ASSERT_EQ(r.files.size(), 2u);
  std::string out;
  // The header declares one input (the weights are inside the library) and its shape.
  ASSERT_EQ(run("grep -c 'MLP_NUM_INPUTS 1$' " + dir / "libmlp.h", &out), 0) << out;
  ASSERT_EQ(run("grep -c 'MLP_INPUT0_SHAPE {2, 6}' " + dir / "libmlp.h", &out), 0) << out;
  ASSERT_EQ(run("grep -c 'MLP_OUTPUT0_SHAPE {2, 3}' " + dir / "libmlp.h", &out), 0) << out;
}

TEST(JitAot, BadOptionsAreRefused) {
  Tensor w = rnd({3, 4}, 10);
  Tensor x = rnd({3, 4}, 11);
  jit::TraceOptions topts;
  topts.named_captures = {{"w", w}};
  Scratch dir;
  jit::AotOptions o;
  o.output = dir / "step";
  autograd::NoGradGuard no_grad;
  jit::TracedFunction fwd =
      jit::trace([&](const TensorList& in) { return TensorList{relu(in[0] * w)}; }, {x}, topts);
  o.target = "riscv64-linux-gnu";
  EXPECT_THROW(jit::compile_aot(fwd, o), Error);
  o.target = "host";
  o.emit = "dll";
  EXPECT_THROW(jit::compile_aot(fwd, o), Error);
}

// A function that updates a captured tensor in place (an optimizer step's shape) keeps it as
// state: the shared object's info reaches it and each run updates it.
TEST(JitAot, SharedObjectOfAStepKeepsItsState) {
  Tensor w = rnd({3, 4}, 10);
  const Tensor w0 = w.clone();
  Tensor x = rnd({3, 4}, 11);
  auto step = [&](const TensorList& in) {
    autograd::NoGradGuard no_grad;
    sub_(w, in[0], 0.1);
    return TensorList{sum(w)};
  };
  jit::TraceOptions topts;
  topts.named_captures = {{"w", w}};
  jit::TracedFunction traced = jit::trace(step, {x}, topts);
  ASSERT_EQ(traced.mutated_captures().size(), 1u);
  Scratch dir;
  jit::AotOptions o;
  o.output = dir / "libstep.so";
  o.emit = "so";
  jit::compile_aot(traced, o);
  void* lib = dlopen(o.output.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  using RunFn = int (*)(const void* const*, void* const*);
  using InfoFn = const kiln_model_info* (*)();
  auto run_fn = reinterpret_cast<RunFn>(dlsym(lib, "model_run"));
  auto info_fn = reinterpret_cast<InfoFn>(dlsym(lib, "model_info"));
  ASSERT_TRUE(run_fn && info_fn);
  const kiln_model_info& info = *info_fn();
  ASSERT_EQ(info.num_state, 1);
  EXPECT_STREQ(info.state[0].name, "w");
  const std::vector<int64_t> dims = {3, 4};
  auto state = [&] {
    return Tensor(kiln::from_blob(info.state_data[0], dims, DType::Float32)).clone();
  };
  // The trace took one step: the state starts after it.
  EXPECT_LE(max_rel_error(state(), w0 - x * 0.1), 1e-6);
  const Tensor x2 = rnd({3, 4}, 12);
  float loss = 0;
  const void* in[] = {x2.data()};
  void* out[] = {&loss};
  ASSERT_EQ(run_fn(in, out), 0);
  const Tensor want = w0 - x * 0.1 - x2 * 0.1;
  EXPECT_LE(max_rel_error(state(), want), 1e-6);
  EXPECT_NEAR(loss, sum(want).item<float>(), 1e-4);
  dlclose(lib);
  // Its runtime's worker threads outlive dlclose: the object stays mapped.
  void* again = dlopen(o.output.c_str(), RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(again, nullptr) << "the shared object was unmapped by dlclose";
  if (again) dlclose(again);
}

// arm64 under qemu: a small CNN compiled for aarch64-linux-gnu equals eager on the host. Run by
// the CTest aarch64/qemu_model (tests/codegen/aarch64_qemu.sh) after the cross runtime build.
TEST(JitAotAarch64, DISABLED_LeNetUnderQemuMatchesEager) {
  const char* dir = std::getenv("KILN_AARCH64_RUNTIME_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "KILN_AARCH64_RUNTIME_DIR not set";
  auto m = models::lenet();
  m->eval();
  autograd::NoGradGuard no_grad;
  Tensor x = rnd({2, 1, 28, 28}, 12);
  Tensor eager = m->forward(x);
  Tensor got = run_aot(*m, rnd({2, 1, 28, 28}, 11), x, "aarch64-linux-gnu",
                       "qemu-aarch64 -L /usr/aarch64-linux-gnu ");
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.sizes(), eager.sizes());
  EXPECT_LE(max_rel_error(got, eager), 1e-4);
}

// A transformer classifier for aarch64 under qemu: its layer norms as row kernels and its
// elementwise chains through the vector pipeline at NEON's 128 bits.
TEST(JitAotAarch64, DISABLED_TransformerUnderQemuMatchesEager) {
  const char* dir = std::getenv("KILN_AARCH64_RUNTIME_DIR");
  if (!dir || !*dir) GTEST_SKIP() << "KILN_AARCH64_RUNTIME_DIR not set";
  auto m = models::transformer_classifier(50, 5);
  m->eval();
  autograd::NoGradGuard no_grad;
  Tensor x = randint(0, 50, {2, 12});
  Tensor eager = m->forward(x);
  Tensor got = run_aot(*m, randint(0, 50, {2, 12}), x, "aarch64-linux-gnu",
                       "qemu-aarch64 -L /usr/aarch64-linux-gnu ");
  ASSERT_TRUE(got.defined());
  ASSERT_EQ(got.sizes(), eager.sizes());
  EXPECT_LE(max_rel_error(got, eager), 1e-4);
}

// `kiln compile` on the trace's text with its weights in a .safetensors file: the arguments named
// like the file's tensors are frozen, the rest are the executable's inputs.
TEST(JitAot, CliCompilesTracedModuleWithSafetensorsWeights) {
  auto m = models::lenet();
  m->eval();
  autograd::NoGradGuard no_grad;
  jit::TracedFunction traced = trace_eval(*m, rnd({1, 1, 28, 28}, 13));
  Scratch dir;
  { std::ofstream(dir / "lenet.mlir") << traced.str(); }
  NamedTensors weights;
  for (const auto& [name, p] : m->named_parameters()) weights.emplace_back(name, p);
  for (const auto& [name, b] : m->named_buffers()) weights.emplace_back(name, b);
  write_safetensors(dir / "lenet.safetensors", weights);

  const std::string kiln = KILN_CLI_PATH;
  std::string out;
  ASSERT_EQ(run(kiln + " compile " + dir / "lenet.mlir" + " --weights " +
                    dir / "lenet.safetensors" + " --emit exe -o " + dir / "lenet",
                &out),
            0)
      << out;
  EXPECT_NE(out.find("1 input(s)"), std::string::npos) << out;
  Tensor x = rnd({1, 1, 28, 28}, 14);
  write_npy(dir / "x.npy", x);
  out.clear();
  ASSERT_EQ(run(dir / "lenet " + dir / "x.npy -o " + dir / "y.npy", &out), 0) << out;
  EXPECT_LE(max_rel_error(read_npy(dir / "y.npy"), m->forward(x)), 1e-4);

  // Clear errors for what cannot work.
  out.clear();
  EXPECT_NE(run(kiln + " compile " + dir / "lenet.mlir" + " --emit exe", &out), 0);
  EXPECT_NE(out.find("-o OUT is required"), std::string::npos) << out;
  out.clear();
  EXPECT_NE(run(kiln + " compile " + dir / "m.kiln" + " --emit so -o " + dir / "x", &out), 0);
  EXPECT_NE(out.find("cannot open"), std::string::npos) << out;  // the artifact path, missing
  out.clear();
  EXPECT_NE(run(kiln + " compile " + dir / "lenet.mlir" + " --emit exe --target sparc-sun -o " +
                    dir / "x",
                &out),
            0);
  EXPECT_NE(out.find("not supported"), std::string::npos) << out;
}

// Two models as relocatable objects (--emit obj, different --name) link into one C program with
// the static runtime: their symbols (NAME_run, NAME_info, NAME_entry) do not collide, and each
// computes its own model.
TEST(JitAot, ObjectsOfTwoModelsLinkIntoOneProgram) {
  autograd::NoGradGuard no_grad;
  auto a = models::mlp({4, 8, 3});
  auto b = models::mlp({4, 8, 3});
  a->eval();
  b->eval();
  Scratch dir;
  for (auto [model, name] : {std::pair{a, "net_a"}, std::pair{b, "net_b"}}) {
    jit::AotOptions o;
    o.emit = "obj";
    o.name = name;
    o.output = dir / (std::string(name) + ".o");
    jit::compile_aot(trace_eval(*model, rnd({2, 4}, 15)), o);
  }
  Tensor x = rnd({2, 4}, 16);
  std::ostringstream c;
  c << "#include <stdio.h>\n#include <stdint.h>\n"
    << "int net_a_run(const void* const*, void* const*);\n"
    << "int net_b_run(const void* const*, void* const*);\n"
    << "int main(void) {\n  const float x[8] = {";
  for (int i = 0; i < 8; ++i)
    c << (i ? ", " : "") << std::hexfloat << x.data_ptr<float>()[i] << "f";
  c << "};\n  float ya[6], yb[6];\n  const void* in[1] = {x};\n"
    << "  void* oa[1] = {ya};\n  void* ob[1] = {yb};\n"
    << "  if (net_a_run(in, oa) || net_b_run(in, ob)) return 3;\n"
    << "  for (int i = 0; i < 6; ++i) printf(\"%.9g\\n\", ya[i]);\n"
    << "  for (int i = 0; i < 6; ++i) printf(\"%.9g\\n\", yb[i]);\n  return 0;\n}\n";
  { std::ofstream(dir / "main.c") << c.str(); }
  std::string out;
  ASSERT_EQ(run("cc -c -o " + dir / "main.o " + dir / "main.c", &out), 0) << out;
  ASSERT_EQ(run("c++ -o " + dir / "prog " + dir / "main.o " + dir / "net_a.o " + dir / "net_b.o " +
                    KILN_RUNTIME_DIR + "/libkiln_runtime.a -pthread " + KILN_HOST_LINK_FLAGS,
                &out),
            0)
      << out;
  out.clear();
  ASSERT_EQ(run(dir / "prog", &out), 0) << out;
  std::istringstream is(out);
  std::vector<float> got;
  for (float v; is >> v;) got.push_back(v);
  ASSERT_EQ(got.size(), 12u);
  const Tensor ya = a->forward(x), yb = b->forward(x);
  const Dims shape{2, 3};
  EXPECT_LE(max_rel_error(tensor(std::vector<float>(got.begin(), got.begin() + 6), shape), ya),
            1e-5);
  EXPECT_LE(max_rel_error(tensor(std::vector<float>(got.begin() + 6, got.end()), shape), yb), 1e-5);
  EXPECT_GT(max_rel_error(ya, yb), 1e-3);  // the two models really differ
}

// A value read back while tracing is checked by the executable too: an input giving another value
// fails with the guard's message (naming this file) instead of replaying the traced branch.
TEST(JitAot, ExecutableChecksGuards) {
  auto branchy = [](const TensorList& x) {
    if (sum(x[0]).item<float>() > 0) return TensorList{x[0] * 2.0};
    return TensorList{x[0] * -1.0};
  };
  jit::TraceOptions quiet;
  quiet.warn_on_read_back = false;
  jit::TracedFunction traced = jit::trace(branchy, {ones({3})}, quiet);
  Scratch dir;
  jit::AotOptions o;
  o.output = dir / "branchy";
  jit::compile_aot(traced, o);
  std::string out;
  write_npy(dir / "same.npy", tensor({0.0, 1.0, 2.0}));
  ASSERT_EQ(run(o.output + " " + dir / "same.npy -o " + dir / "y.npy", &out), 0) << out;
  EXPECT_FLOAT_EQ(read_npy(dir / "y.npy").index({2}).item<float>(), 4.0f);
  write_npy(dir / "other.npy", full({3}, -1.0));
  out.clear();
  EXPECT_NE(run(o.output + " " + dir / "other.npy -o " + dir / "y.npy", &out), 0);
  EXPECT_NE(out.find("test_aot.cpp"), std::string::npos) << out;
  EXPECT_NE(out.find("this input gives -3"), std::string::npos) << out;
}

// kiln::cond and kiln::loop compile into the executable: another input takes the other branch.
TEST(JitAot, ExecutableRunsBranchesAndLoops) {
  auto fn = [](const TensorList& in) {
    const Tensor& x = in[0];
    return cond(
        gt(x.sum(), zeros({})),
        [&] {
          return loop(4,
                      [](const Tensor& i, const TensorList& c) {
                        return TensorList{c[0] * 0.5 + i.to(DType::Float32)};
                      },
                      {x});
        },
        [&] { return TensorList{x - 1.0}; });
  };
  const Tensor x = abs(rnd({3}, 1));
  jit::TracedFunction traced = jit::trace(fn, {x});
  Scratch dir;
  jit::AotOptions o;
  o.output = dir / "branchy";
  jit::compile_aot(traced, o);
  for (const Tensor& in : {x, -x}) {
    std::string out;
    write_npy(dir / "x.npy", in);
    ASSERT_EQ(run(o.output + " " + dir / "x.npy -o " + dir / "y.npy", &out), 0) << out;
    EXPECT_LE(max_rel_error(read_npy(dir / "y.npy"), fn({in})[0]), 1e-6);
  }
}

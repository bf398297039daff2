// AOT compilation of a hand-written LLVM IR model: objects for the host and arm64, a standalone
// executable (.npy in, .npy out, no LLVM/MLIR inside) and a shared object + C header embedded
// in a C program; outputs against a float64 reference.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "aot_test_util.h"
#include "kiln/codegen/aot.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/target.h"
#include "llvm/AsmParser/Parser.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Target/TargetMachine.h"

namespace cg = kiln::codegen;
using kiln::aot_test::CommandResult;
using kiln::aot_test::LinearReluModel;
using kiln::aot_test::run_command;
using kiln::aot_test::ScratchDir;

namespace {

std::unique_ptr<llvm::Module> parse(llvm::LLVMContext& ctx, const std::string& ir) {
  llvm::SMDiagnostic diag;
  auto m = llvm::parseAssemblyString(ir, diag, ctx);
  if (!m) ADD_FAILURE() << "bad test IR: " << diag.getMessage().str();
  return m;
}

cg::ModelSignature signature_of(const LinearReluModel& m) {
  cg::ModelSignature s;
  s.inputs.push_back({"x", 0, {m.N, m.K}});
  s.outputs.push_back({"y", 0, {m.N, m.J}});
  return s;
}

cg::AotOptions options(cg::EmitKind kind, const std::string& output,
                       const std::string& triple = "host") {
  cg::AotOptions o;
  o.target = cg::resolve_target(triple);
  o.kind = kind;
  o.output = output;
  o.runtime_dir = KILN_RUNTIME_DIR;
  o.uses_runtime_errors = false;  // the hand-written IR calls no runtime kernel
  // The flags the host runtime was built with (the asan preset's -fsanitize=...).
  std::istringstream flags(KILN_HOST_LINK_FLAGS);
  if (o.target.triple == cg::host_target().triple)
    for (std::string f; flags >> f;) o.link_args.push_back(f);
  return o;
}

std::vector<float> random_input(const LinearReluModel& m, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd;
  std::vector<float> x(m.N * m.K);
  for (auto& v : x) v = nd(gen);
  return x;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "element " << i;
}

// ELF header fields: e_type (1 = relocatable, 3 = shared/PIE) and e_machine.
std::pair<int, int> elf_type_and_machine(const std::string& bytes) {
  if (bytes.size() < 20 || bytes.compare(0, 4,
                                         "\x7f"
                                         "ELF") != 0)
    return {-1, -1};
  uint16_t type, machine;
  std::memcpy(&type, bytes.data() + 16, 2);
  std::memcpy(&machine, bytes.data() + 18, 2);
  return {type, machine};
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(Aot, ObjectForHostIsRelocatableElf) {
  LinearReluModel model(1);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  auto tm = cg::create_target_machine(cg::resolve_target("host"), 3);
  const std::string obj = cg::emit_object(*m, *tm, 3);
  EXPECT_EQ(elf_type_and_machine(obj), std::make_pair(1, 62));  // ET_REL, EM_X86_64
  EXPECT_NE(obj.find("kiln_entry"), std::string::npos);
}

TEST(Aot, ObjectForAarch64IsArm64Elf) {
  LinearReluModel model(2);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  const cg::Target t = cg::resolve_target("aarch64-linux-gnu");
  EXPECT_TRUE(cg::is_aarch64(t));
  auto tm = cg::create_target_machine(t, 3);
  const std::string obj = cg::emit_object(*m, *tm, 3);
  EXPECT_EQ(elf_type_and_machine(obj), std::make_pair(1, 183));  // ET_REL, EM_AARCH64
  EXPECT_EQ(m->getTargetTriple(), t.triple);
}

TEST(Aot, UnsupportedTargetsAreRefused) {
  EXPECT_THROW(cg::resolve_target("riscv64-linux-gnu"), cg::AotError);
  try {
    cg::resolve_target("mips-linux-gnu");
  } catch (const cg::AotError& e) {
    EXPECT_NE(std::string(e.what()).find("x86_64 and aarch64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cg::parse_emit_kind("dll"), cg::AotError);
  EXPECT_EQ(cg::parse_emit_kind("so"), cg::EmitKind::SharedLibrary);
}

TEST(Aot, ExecutableReadsNpyAndMatchesFloat64Reference) {
  ScratchDir dir;
  LinearReluModel model(3, /*n=*/4, /*k=*/37, /*j=*/9);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  cg::compile_module(*m, signature_of(model), options(cg::EmitKind::Executable, dir / "model"));

  const std::vector<float> x = random_input(model, 7);
  kiln::npy::write(dir / "x.npy", kiln::DType::Float32, {model.N, model.K}, x.data());
  const CommandResult r = run_command(dir / "model" + " " + dir / "x.npy" + " -o " + dir / "y.npy");
  ASSERT_EQ(r.rc, 0) << r.output;
  const kiln::npy::Array y = kiln::npy::read(dir / "y.npy");
  EXPECT_EQ(y.dtype, kiln::DType::Float32);
  EXPECT_EQ(y.shape, (std::vector<int64_t>{model.N, model.J}));
  std::vector<float> got(y.numel());
  std::memcpy(got.data(), y.data.data(), y.data.size());
  expect_close(got, model.reference(x));

  // --info reports the signature compiled in.
  const CommandResult info = run_command(dir / "model" + " --info");
  EXPECT_EQ(info.rc, 0);
  EXPECT_NE(info.output.find("x: float32 [4, 37]"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("y: float32 [4, 9]"), std::string::npos) << info.output;
}

// Code generated for extensions this CPU lacks is refused by the executable's main before any
// of it runs (a message naming the CPU and the extensions, not SIGILL); code for the host runs.
TEST(Aot, ExecutableRefusesACpuWithoutItsExtensions) {
  const kiln::rt::TargetDescription& host = kiln::rt::host_target();
  if (host.features.neon) GTEST_SKIP() << "x86 CPU names only";
  std::string cpu, feature;
  if (!host.features.avx512f)
    cpu = "skylake-avx512", feature = "avx512f";
  else if (!host.features.amx_int8)
    cpu = "sapphirerapids", feature = "amx-int8";
  else
    GTEST_SKIP() << "this CPU has every extension kiln checks";
  ScratchDir dir;
  LinearReluModel model(3, /*n=*/4, /*k=*/37, /*j=*/9);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  cg::AotOptions o = options(cg::EmitKind::Executable, dir / "model");
  o.target.cpu = cpu;
  o.target.features.clear();
  cg::compile_module(*m, signature_of(model), o);
  const std::vector<float> x = random_input(model, 7);
  kiln::npy::write(dir / "x.npy", kiln::DType::Float32, {model.N, model.K}, x.data());
  const CommandResult r = run_command(dir / "model" + " " + dir / "x.npy" + " -o " + dir / "y.npy");
  EXPECT_EQ(r.rc, 1) << r.output;  // kiln's error exit, not a signal
  EXPECT_NE(r.output.find("compiled for CPU '" + cpu + "'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(feature), std::string::npos) << r.output;

  // The host's code records what it uses and runs.
  auto m2 = parse(ctx, model.llvm_ir());
  cg::compile_module(*m2, signature_of(model), options(cg::EmitKind::Executable, dir / "host"));
  const CommandResult info = run_command(dir / "host" + " --info");
  EXPECT_EQ(info.rc, 0) << info.output;
  EXPECT_NE(info.output.find("avx2"), std::string::npos) << info.output;
}

TEST(Aot, ExecutableContainsNoLlvmOrMlir) {
  ScratchDir dir;
  LinearReluModel model(4);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  cg::compile_module(*m, signature_of(model), options(cg::EmitKind::Executable, dir / "model"));
  const CommandResult ldd = run_command("ldd " + dir / "model");
  ASSERT_EQ(ldd.rc, 0) << ldd.output;
  EXPECT_EQ(ldd.output.find("LLVM"), std::string::npos) << ldd.output;
  EXPECT_EQ(ldd.output.find("MLIR"), std::string::npos) << ldd.output;
  const CommandResult nm = run_command("nm -C " + dir / "model");
  ASSERT_EQ(nm.rc, 0);
  EXPECT_NE(nm.output.find("model_run"), std::string::npos);
  EXPECT_EQ(nm.output.find("llvm::"), std::string::npos);
  EXPECT_EQ(nm.output.find("mlir::"), std::string::npos);
}

TEST(Aot, ExecutableRejectsInputOfWrongShapeOrDtype) {
  ScratchDir dir;
  LinearReluModel model(5);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  cg::compile_module(*m, signature_of(model), options(cg::EmitKind::Executable, dir / "model"));

  std::vector<float> wrong(model.N * (model.K + 1));
  kiln::npy::write(dir / "bad.npy", kiln::DType::Float32, {model.N, model.K + 1}, wrong.data());
  CommandResult r = run_command(dir / "model" + " " + dir / "bad.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("expected float32 [2, 5], got float32 [2, 6]"), std::string::npos)
      << r.output;

  std::vector<double> d(model.N * model.K);
  kiln::npy::write(dir / "f64.npy", kiln::DType::Float64, {model.N, model.K}, d.data());
  r = run_command(dir / "model" + " " + dir / "f64.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("got float64 [2, 5]"), std::string::npos) << r.output;

  r = run_command(dir / "model");  // no input at all
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("expected 1 input"), std::string::npos) << r.output;

  { std::ofstream(dir / "junk.npy") << "not numpy"; }
  r = run_command(dir / "model" + " " + dir / "junk.npy");
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.output.find("bad magic"), std::string::npos) << r.output;
}

TEST(Aot, SharedObjectAndHeaderEmbedInACProgram) {
  if (!kiln::aot_test::have_program("cc")) GTEST_SKIP() << "no C compiler";
  ScratchDir dir;
  LinearReluModel model(6, 3, 8, 4);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  auto o = options(cg::EmitKind::SharedLibrary, dir / "libdense.so");
  o.prefix = "dense";
  const auto files = cg::compile_module(*m, signature_of(model), o);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1], dir / "libdense.h");
  const std::string header = read_file(dir / "libdense.h");
  EXPECT_NE(header.find("#define DENSE_INPUT0_SHAPE {3, 8}"), std::string::npos) << header;
  EXPECT_NE(header.find("int dense_run(const void* const* inputs, void* const* outputs);"),
            std::string::npos);

  // Only the model's interface is exported; the runtime inside stays private.
  const CommandResult syms = run_command("nm -D --defined-only " + dir / "libdense.so");
  ASSERT_EQ(syms.rc, 0) << syms.output;
  EXPECT_NE(syms.output.find(" T dense_run"), std::string::npos) << syms.output;
  EXPECT_NE(syms.output.find(" T dense_info"), std::string::npos) << syms.output;
  EXPECT_EQ(syms.output.find("kiln"), std::string::npos) << syms.output;

  // A C program sized entirely from the header's constants; it prints the outputs.
  const std::vector<float> x = random_input(model, 11);
  std::ostringstream c;
  c << "#include <stdio.h>\n#include \"libdense.h\"\n"
    << "static const float x[DENSE_INPUT0_NUMEL] = {";
  for (size_t i = 0; i < x.size(); ++i) c << (i ? ", " : "") << std::hexfloat << x[i] << "f";
  c << "};\nint main(void) {\n"
    << "  float y[DENSE_OUTPUT0_NUMEL];\n"
    << "  const void* in[DENSE_NUM_INPUTS] = {x};\n  void* out[DENSE_NUM_OUTPUTS] = {y};\n"
    << "  if (dense_run(in, out) != 0) return 3;\n"
    << "  for (int i = 0; i < DENSE_OUTPUT0_NUMEL; ++i) printf(\"%.9g\\n\", y[i]);\n"
    << "  return sizeof(y) == DENSE_OUTPUT0_BYTES ? 0 : 4;\n}\n";
  { std::ofstream(dir / "main.c") << c.str(); }
  const CommandResult build =
      run_command("cc -std=c99 -Wall -Werror -o " + dir / "main" + " " + dir / "main.c" + " -I" +
                  dir.path.string() + " " + dir / "libdense.so" + " -Wl,-rpath," +
                  dir.path.string() + " " + KILN_HOST_LINK_FLAGS);
  ASSERT_EQ(build.rc, 0) << build.output;
  const CommandResult run = run_command(dir / "main");
  ASSERT_EQ(run.rc, 0) << run.output;
  std::istringstream is(run.output);
  std::vector<float> got;
  for (float v; is >> v;) got.push_back(v);
  expect_close(got, model.reference(x));
}

TEST(Aot, RelocatableObjectHoldsModelAndInterface) {
  ScratchDir dir;
  LinearReluModel model(8);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  cg::compile_module(*m, signature_of(model), options(cg::EmitKind::Object, dir / "model.o"));
  const std::string obj = read_file(dir / "model.o");
  EXPECT_EQ(elf_type_and_machine(obj).first, 1);
  const CommandResult nm = run_command("nm " + dir / "model.o");
  EXPECT_NE(nm.output.find(" T model_run"), std::string::npos) << nm.output;
  EXPECT_NE(nm.output.find(" T model_info"), std::string::npos) << nm.output;
  EXPECT_NE(nm.output.find(" T kiln_entry"), std::string::npos) << nm.output;
}

TEST(Aot, MissingRuntimeLibraryIsAClearError) {
  ScratchDir dir;
  LinearReluModel model(9);
  llvm::LLVMContext ctx;
  auto m = parse(ctx, model.llvm_ir());
  auto o = options(cg::EmitKind::Executable, dir / "model");
  o.runtime_dir = dir.path.string();  // empty folder
  try {
    cg::compile_module(*m, signature_of(model), o);
    FAIL() << "expected AotError";
  } catch (const cg::AotError& e) {
    EXPECT_NE(std::string(e.what()).find("libkiln_aot_main.a"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--runtime-dir"), std::string::npos) << e.what();
  }
}

// arm64: the same model compiled for aarch64-linux-gnu, linked with the cross-built runtime and
// run under qemu-aarch64 equals the host executable and the float64 reference. Run by the CTest
// aarch64/qemu_model (tests/codegen/aarch64_qemu.sh), which cross-builds the runtime first and
// passes its folder in KILN_AARCH64_RUNTIME_DIR; disabled in the plain test list.
TEST(AotAarch64, DISABLED_QemuRunMatchesHostAndReference) {
  const char* runtime_dir = std::getenv("KILN_AARCH64_RUNTIME_DIR");
  if (!runtime_dir || !*runtime_dir) GTEST_SKIP() << "KILN_AARCH64_RUNTIME_DIR not set";
  if (!kiln::aot_test::have_program("qemu-aarch64")) GTEST_SKIP() << "qemu-aarch64 not installed";
  if (cg::find_link_driver(cg::resolve_target("aarch64-linux-gnu")).empty())
    GTEST_SKIP() << "aarch64-linux-gnu-g++ not installed";
  ScratchDir dir;
  LinearReluModel model(21, 3, 64, 10);
  const std::vector<float> x = random_input(model, 22);
  kiln::npy::write(dir / "x.npy", kiln::DType::Float32, {model.N, model.K}, x.data());
  for (const char* target : {"host", "aarch64-linux-gnu"}) {
    llvm::LLVMContext ctx;
    auto m = parse(ctx, model.llvm_ir());
    auto o = options(cg::EmitKind::Executable, dir / (std::string("model-") + target), target);
    if (std::string(target) != "host") o.runtime_dir = runtime_dir;
    cg::compile_module(*m, signature_of(model), o);
  }
  const CommandResult file = run_command("file " + dir / "model-aarch64-linux-gnu");
  if (file.rc == 0) {
    EXPECT_NE(file.output.find("aarch64"), std::string::npos) << file.output;
  }
  CommandResult r = run_command(dir / "model-host" + " " + dir / "x.npy -o " + dir / "host.npy");
  ASSERT_EQ(r.rc, 0) << r.output;
  r = run_command("qemu-aarch64 -L /usr/aarch64-linux-gnu " + dir / "model-aarch64-linux-gnu" +
                  " " + dir / "x.npy -o " + dir / "arm.npy");
  ASSERT_EQ(r.rc, 0) << r.output;
  const kiln::npy::Array host = kiln::npy::read(dir / "host.npy");
  const kiln::npy::Array arm = kiln::npy::read(dir / "arm.npy");
  ASSERT_EQ(arm.shape, host.shape);
  std::vector<float> got(arm.numel()), want(host.numel());
  std::memcpy(got.data(), arm.data.data(), arm.data.size());
  std::memcpy(want.data(), host.data.data(), host.data.size());
  expect_close(got, model.reference(x));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "arm64 vs host, element " << i;
}

// A kernel error recorded by the runtime during model_run (kiln_abi_set_error) comes back as a
// non-zero return code, and the executable prints the runtime's message.
TEST(Aot, RuntimeErrorInsideTheModelIsReportedByTheExecutable) {
  ScratchDir dir;
  const std::string ir =
      "@msg = private unnamed_addr constant [29 x i8] c\"conv2d: weight has 3 dims!!!\\00\"\n"
      "declare void @kiln_abi_set_error(ptr)\n"
      "define void @kiln_entry(ptr %buffers) {\n"
      "  call void @kiln_abi_set_error(ptr @msg)\n"
      "  ret void\n"
      "}\n";
  llvm::LLVMContext ctx;
  auto m = parse(ctx, ir);
  cg::ModelSignature sig;
  sig.inputs.push_back({"x", 0, {2}});
  sig.outputs.push_back({"y", 0, {2}});
  auto o = options(cg::EmitKind::Executable, dir / "model");
  o.uses_runtime_errors = true;
  cg::compile_module(*m, sig, o);
  const float x[2] = {1, 2};
  kiln::npy::write(dir / "x.npy", kiln::DType::Float32, {2}, x);
  const CommandResult r = run_command(dir / "model" + " " + dir / "x.npy -o " + dir / "y.npy");
  EXPECT_EQ(r.rc, 1) << r.output;
  EXPECT_NE(r.output.find("model_run failed (code 1): conv2d: weight has 3 dims!!!"),
            std::string::npos)
      << r.output;
}

// The lowering API the JIT and AOT paths share: signatures, errors, LLVM IR, objects for the host
// and for aarch64, cache keys.
#include <gtest/gtest.h>

#include "kiln/codegen/aot.h"
#include "kiln/codegen/jit_engine.h"
#include "kiln/codegen/lower.h"
#include "kiln/ir/KilnDialect.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Target/TargetMachine.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

namespace {

const char* kModule = R"mlir(
func.func @forward(%x: tensor<4x8xf32>, %w: tensor<3x8xf32>, %i: tensor<4xi64>)
    -> (tensor<4x3xf32>, tensor<4xi1>) {
  %n = kiln.none
  %0 = kiln.linear %x, %w, %n : (tensor<4x8xf32>, tensor<3x8xf32>, none) -> tensor<4x3xf32>
  %1 = kiln.tanh %0 : tensor<4x3xf32> -> tensor<4x3xf32>
  %z = kiln.constant dense<2> : tensor<i64> : tensor<i64>
  %2 = kiln.gt %i, %z : tensor<4xi64>, tensor<i64>
  return %1, %2 : tensor<4x3xf32>, tensor<4xi1>
})mlir";

struct Parsed {
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

Parsed parse(const char* text) {
  mlir::DialectRegistry registry;
  kiln::ir::register_dialects(registry);
  kiln::codegen::register_lowering_dialects(registry);
  Parsed p;
  p.ctx = std::make_unique<mlir::MLIRContext>(registry);
  p.ctx->loadAllAvailableDialects();
  p.module = mlir::parseSourceString<mlir::ModuleOp>(text, p.ctx.get());
  return p;
}

}  // namespace

TEST(CodegenLower, SignatureListsArgumentsAndResultsWithRuntimeDtypes) {
  Parsed p = parse(kModule);
  ASSERT_TRUE(p.module);
  kiln::codegen::EntrySignature sig;
  std::string error;
  ASSERT_TRUE(kiln::codegen::lower_to_llvm_dialect(*p.module, {}, &error, &sig)) << error;
  ASSERT_EQ(sig.args.size(), 3u);
  ASSERT_EQ(sig.results.size(), 2u);
  EXPECT_EQ(sig.args[0].dtype, 0);     // float32
  EXPECT_EQ(sig.args[2].dtype, 7);     // int64
  EXPECT_EQ(sig.results[1].dtype, 8);  // bool, one byte per element
  EXPECT_EQ(sig.results[1].nbytes, 4);
  EXPECT_EQ(sig.args[1].sizes, (std::vector<int64_t>{3, 8}));
  llvm::LLVMContext llvm_ctx;
  auto ir = kiln::codegen::translate_to_llvm_ir(*p.module, llvm_ctx, &error);
  ASSERT_TRUE(ir) << error;
  llvm::Function* entry = ir->getFunction("kiln_entry");
  ASSERT_NE(entry, nullptr);
  EXPECT_FALSE(entry->isDeclaration());
  EXPECT_NE(ir->getFunction("kiln_abi_linear"), nullptr);
}

TEST(CodegenLower, SignatureWithoutLoweringAgrees) {
  Parsed p = parse(kModule);
  kiln::codegen::EntrySignature sig;
  std::string error;
  ASSERT_TRUE(kiln::codegen::entry_signature(*p.module, &sig, &error)) << error;
  EXPECT_EQ(sig.args.size(), 3u);
  EXPECT_EQ(sig.results[0].nbytes, 4 * 3 * 4);
}

TEST(CodegenLower, ObjectsForHostAndAarch64) {
  for (const char* triple : {"", "aarch64-linux-gnu"}) {
    Parsed p = parse(kModule);
    kiln::codegen::Target target;
    if (*triple) target = {triple, "generic", "+neon"};
    std::string object, error;
    kiln::codegen::EntrySignature sig;
    ASSERT_TRUE(kiln::codegen::compile_to_object(*p.module, target, {}, 2, &object, &sig, &error))
        << triple << ": " << error;
    ASSERT_GT(object.size(), 64u);
    EXPECT_EQ(object.substr(0, 4),
              "\x7f"
              "ELF");
    // e_machine: 62 = x86-64, 183 = AArch64 (little endian).
    const int machine =
        static_cast<unsigned char>(object[18]) | (static_cast<unsigned char>(object[19]) << 8);
    if (*triple) {
      EXPECT_EQ(machine, 183);
    }
  }
}

TEST(CodegenLower, VectorWidthFollowsTheTargetsCpu) {
  // Named CPUs, not the host: the width each class of machine gets.
  struct Case {
    const char* triple;
    const char* cpu;
    int bits;
  };
  for (const Case& c :
       {Case{"x86_64-linux-gnu", "znver4", 512},
        Case{"x86_64-linux-gnu", "sapphirerapids", 256},  // prefer-256-bit
        Case{"x86_64-linux-gnu", "skylake-avx512", 256}, Case{"x86_64-linux-gnu", "znver3", 256},
        Case{"x86_64-linux-gnu", "haswell", 256}, Case{"x86_64-linux-gnu", "x86-64", 128},
        Case{"aarch64-linux-gnu", "generic", 128}}) {
    auto tm = kiln::codegen::create_target_machine({c.triple, c.cpu, ""}, 2);
    ASSERT_TRUE(tm) << c.cpu;
    EXPECT_EQ(kiln::codegen::vector_register_bits(*tm), c.bits) << c.cpu;
  }
}

TEST(CodegenLower, UnloweredOpNamesOpAndPosition) {
  Parsed p = parse(R"mlir(
func.func @forward(%x: tensor<4xf32>) -> tensor<4xbf16> {
  %0 = kiln.relu %x : tensor<4xf32> -> tensor<4xf32>
  %1 = kiln.to %0 {dtype = 3 : i64} : (tensor<4xf32>) -> tensor<4xbf16>
  return %1 : tensor<4xbf16>
})mlir");
  ASSERT_TRUE(p.module);
  std::string error;
  EXPECT_FALSE(kiln::codegen::lower_to_llvm_dialect(*p.module, {}, &error));
  EXPECT_NE(error.find("'kiln.to' (op #1 of @forward"), std::string::npos) << error;
  EXPECT_NE(error.find("bf16"), std::string::npos) << error;
}

TEST(CodegenLower, CacheKeyChangesWithIrTargetAndOptions) {
  kiln::codegen::Target a{"x86_64-pc-linux-gnu", "skylake-avx512", "+avx512f"};
  kiln::codegen::Target b{"x86_64-pc-linux-gnu", "haswell", "+avx2"};
  kiln::codegen::LowerOptions o;
  const std::string k = kiln::codegen::cache_key("module", a, o, 3);
  EXPECT_EQ(k, kiln::codegen::cache_key("module", a, o, 3));
  EXPECT_NE(k, kiln::codegen::cache_key("module2", a, o, 3));
  EXPECT_NE(k, kiln::codegen::cache_key("module", b, o, 3));
  EXPECT_NE(k, kiln::codegen::cache_key("module", a, o, 2));
  o.fuse_elementwise = false;
  EXPECT_NE(k, kiln::codegen::cache_key("module", a, o, 3));
}

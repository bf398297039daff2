// The compile cache: an unchanged trace recompiles from memory, or from the object file on disk
// after the in-memory cache is gone; a change to the IR is a different key.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "helpers.h"
#include "kiln/jit/compile.h"
#include "kiln/kiln.h"
#include "kiln/trace/freeze.h"
#include "kiln/trace/trace.h"

using namespace kiln;
using kiln::test::max_rel_error;
using kiln::test::rnd;

namespace {
std::filesystem::path fresh_dir(const char* name) {
  auto dir = std::filesystem::temp_directory_path() /
             (std::string("kiln_cache_test_") + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}
}  // namespace

TEST(JitCache, MemoryCacheReturnsTheSameCodeInstantly) {
  auto fn = [](const TensorList& t) { return TensorList{sigmoid(t[0]) * 3 - t[0]}; };
  Tensor x = rnd({5, 7}, 31);
  jit::TracedFunction traced = jit::trace(fn, {x});
  jit::CompileOptions o;
  o.disk_cache = false;
  jit::CompiledFunction a = jit::compile(traced, o);
  jit::CompiledFunction b = jit::compile(traced, o);
  EXPECT_EQ(a.source(), jit::CompiledFunction::Source::Compiled);
  EXPECT_EQ(b.source(), jit::CompiledFunction::Source::MemoryCache);
  EXPECT_EQ(a.cache_key(), b.cache_key());
  EXPECT_LT(b.compile_seconds(), a.compile_seconds());
  EXPECT_LE(max_rel_error(b({x})[0], fn({x})[0]), 1e-5);
}

TEST(JitCache, DiskCacheSurvivesTheMemoryCache) {
  const auto dir = fresh_dir("disk");
  auto fn = [](const TensorList& t) { return TensorList{tanh(t[0]) + t[0] * t[0]}; };
  Tensor x = rnd({9, 4}, 32);
  jit::TracedFunction traced = jit::trace(fn, {x});
  jit::CompileOptions o;
  o.cache_dir = dir.string();
  jit::clear_memory_cache();
  jit::CompiledFunction a = jit::compile(traced, o);
  EXPECT_EQ(a.source(), jit::CompiledFunction::Source::Compiled);
  EXPECT_TRUE(std::filesystem::exists(dir / (a.cache_key() + ".o")));
  jit::clear_memory_cache();
  jit::CompiledFunction b = jit::compile(traced, o);
  EXPECT_EQ(b.source(), jit::CompiledFunction::Source::DiskCache);
  Tensor x2 = rnd({9, 4}, 33);
  EXPECT_LE(max_rel_error(b({x2})[0], fn({x2})[0]), 1e-5);
  std::filesystem::remove_all(dir);
}

TEST(JitCache, DefaultDirectoryFollowsXdgCacheHome) {
  const auto dir = fresh_dir("xdg");
  const char* old = std::getenv("XDG_CACHE_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CACHE_HOME", dir.c_str(), 1);
  auto fn = [](const TensorList& t) { return TensorList{t[0] * 4 + 1}; };
  jit::TracedFunction traced = jit::trace(fn, {rnd({3}, 34)});
  jit::clear_memory_cache();
  jit::CompiledFunction a = jit::compile(traced);
  EXPECT_TRUE(std::filesystem::exists(dir / "kiln" / (a.cache_key() + ".o")));
  if (old) {
    ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CACHE_HOME");
  }
  std::filesystem::remove_all(dir);
}

TEST(JitCache, ChangedIrIsADifferentKey) {
  auto f1 = [](const TensorList& t) { return TensorList{t[0] * 2}; };
  auto f2 = [](const TensorList& t) { return TensorList{t[0] * 3}; };
  Tensor x = rnd({4}, 35);
  jit::CompileOptions o;
  o.disk_cache = false;
  jit::CompiledFunction a = jit::compile(jit::trace(f1, {x}), o);
  jit::CompiledFunction b = jit::compile(jit::trace(f2, {x}), o);
  EXPECT_NE(a.cache_key(), b.cache_key());
  EXPECT_LE(max_rel_error(b({x})[0], x * 3), 1e-6);
}

TEST(JitCache, CorruptCachedObjectIsRecompiled) {
  const auto dir = fresh_dir("corrupt");
  auto fn = [](const TensorList& t) { return TensorList{exp(t[0]) - 1}; };
  Tensor x = rnd({6}, 36);
  jit::TracedFunction traced = jit::trace(fn, {x});
  jit::CompileOptions o;
  o.cache_dir = dir.string();
  jit::clear_memory_cache();
  jit::CompiledFunction a = jit::compile(traced, o);
  {
    std::ofstream out(dir / (a.cache_key() + ".o"), std::ios::binary | std::ios::trunc);
    out << "not an object file";
  }
  jit::clear_memory_cache();
  jit::CompiledFunction b = jit::compile(traced, o);
  EXPECT_EQ(b.source(), jit::CompiledFunction::Source::Compiled);
  EXPECT_LE(max_rel_error(b({x})[0], fn({x})[0]), 1e-5);
  std::filesystem::remove_all(dir);
}

// The key reads frozen weights' bytes (elided from the text it hashes): two frozen linears that
// differ in one weight element, in a weight large enough to be elided, are two keys and two
// codes, each computing its own values.
TEST(JitCache, FrozenWeightsThatDifferAreDifferentKeys) {
  nn::Linear a(32, 8), b(32, 8);
  {
    autograd::NoGradGuard no_grad;
    b.weight.copy_(a.weight);
    b.bias.copy_(a.bias);
    b.weight.data_ptr<float>()[77] += 0.5f;
  }
  const Tensor x = rnd({3, 32}, 37);
  jit::CompileOptions o;
  o.disk_cache = false;
  auto compiled = [&](nn::Linear& m) {
    jit::TracedFunction traced = jit::trace(m, {x});
    jit::freeze(traced);
    return jit::compile(traced, o);
  };
  jit::CompiledFunction fa = compiled(a), fb = compiled(b);
  EXPECT_NE(fa.cache_key(), fb.cache_key());
  EXPECT_EQ(compiled(a).cache_key(), fa.cache_key());  // and the same weights, the same key
  autograd::NoGradGuard no_grad;
  EXPECT_LE(max_rel_error(fa({x})[0], a.forward(x)), 1e-6);
  EXPECT_LE(max_rel_error(fb({x})[0], b.forward(x)), 1e-6);
}

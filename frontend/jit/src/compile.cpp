// kiln::jit::compile: trace → (cache | lower + LLVM O3 + object) → ORC → a callable.

#include "kiln/jit/compile.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>

#include <unistd.h>

#include "abi_symbols.h"
#include "kiln/autograd.h"
#include "kiln/codegen/jit_engine.h"
#include "kiln/ops.h"
#include "kiln/runtime/abi.h"
#include "kiln/runtime/kernels/copy.h"
#include "kiln/runtime/kernels/random.h"
#include "kiln/runtime/thread_pool.h"
#include "kiln/trace/module.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Support/xxhash.h"
#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "mlir/IR/MLIRContext.h"
#include "pipeline.h"

namespace kiln::jit {
namespace {

using Entry = void (*)(void**);

// Code loaded into the process (shared by every CompiledFunction compiled from the same IR).
// Loaded code, unloaded (its prepared weights freed first) when the last CompiledFunction and
// the memory cache let go of it.
struct Code {
  Entry entry = nullptr;
  codegen::EntrySignature signature;
  codegen::JitEngine::Loaded loaded;
  Code() = default;
  Code(const Code&) = delete;
  Code& operator=(const Code&) = delete;
  ~Code() { codegen::JitEngine::instance().unload(loaded); }
};

std::mutex g_cache_mutex;
std::unordered_map<std::string, std::shared_ptr<const Code>>& memory_cache() {
  static std::unordered_map<std::string, std::shared_ptr<const Code>> cache;
  return cache;
}

std::filesystem::path cache_dir(const CompileOptions& options) {
  if (!options.cache_dir.empty()) return options.cache_dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "kiln";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "kiln";
  }
  return std::filesystem::temp_directory_path() / "kiln-cache";
}

bool read_file(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return static_cast<bool>(in) || in.eof();
}

// Written to a temporary name and renamed, so a concurrent reader never sees half a file.
void write_file(const std::filesystem::path& path, const std::string& data) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  // A name no other writer (thread or process) uses.
  static std::atomic<uint64_t> counter{0};
  const auto tmp = path.string() + ".tmp." + std::to_string(::getpid()) + "." +
                   std::to_string(counter.fetch_add(1));
  {
    std::ofstream out(tmp, std::ios::binary);
    if (!out) return;  // an unwritable cache only costs time
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  std::filesystem::rename(tmp, path, ec);
}

std::shared_ptr<const Code> load(const std::string& object,
                                 const codegen::EntrySignature& signature) {
  std::string error;
  codegen::JitEngine::Loaded loaded =
      codegen::JitEngine::instance().load(object, "kiln_entry", abi_symbols(), &error);
  KILN_CHECK(loaded.entry != nullptr, "jit::compile", "loading the compiled code failed: ", error);
  auto code = std::make_shared<Code>();
  code->entry = reinterpret_cast<Entry>(loaded.entry);
  code->signature = signature;
  code->loaded = loaded;
  return code;
}

}  // namespace

struct CompiledFunction::Impl {
  std::shared_ptr<const Code> code;
  TensorList captures;
  std::vector<Guard> guards;
  std::vector<size_t> mutated;
  std::vector<HostValue> host_values;  // refreshed and checked before each call
  // The capture holding the random-number state ("rng_state") of a trace that draws numbers.
  std::optional<size_t> rng_capture;
  size_t num_inputs = 0;
  size_t num_outputs = 0;
  Source source = Source::Compiled;
  double seconds = 0;
  std::string key;
};

CompiledFunction::CompiledFunction() = default;
CompiledFunction::~CompiledFunction() = default;
CompiledFunction::CompiledFunction(const CompiledFunction&) = default;
CompiledFunction& CompiledFunction::operator=(const CompiledFunction&) = default;

CompiledFunction::Source CompiledFunction::source() const {
  return impl_->source;
}
double CompiledFunction::compile_seconds() const {
  return impl_->seconds;
}
const std::string& CompiledFunction::cache_key() const {
  return impl_->key;
}

void clear_memory_cache() {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  memory_cache().clear();
}

namespace {
// What the cache key reads of a module: its text with large constants elided, then a hash of
// each elided constant's bytes in walk order. Serializing the module (a frozen ResNet-18 is
// 47 MB of weights) only to hash it made a cache hit cost as much as the serialization; the
// bytes are produced only on a miss now. The module's ops are printed one by one: printing the
// module itself would encode its resource blobs, to drop them. The bytes are hashed in 1 MB
// chunks on the thread pool (a blob's hash is the hash of its chunks' hashes).
std::string module_fingerprint(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  mlir::OpPrintingFlags flags;
  flags.elideLargeElementsAttrs(16).elideLargeResourceString(64).assumeVerified();
  os << module->getAttrDictionary() << "\n";
  for (mlir::Operation& op : module.getBody()->getOperations()) op.print(os, flags);
  std::vector<llvm::ArrayRef<char>> constants;
  module->walk([&](mlir::Operation* op) {
    // Nested attributes too: the printer elides large elements wherever they stand.
    op->getAttrDictionary().walk([&](mlir::Attribute a) {
      if (auto dense = mlir::dyn_cast<mlir::DenseElementsAttr>(a)) {
        constants.push_back(dense.getRawData());
      } else if (auto resource = mlir::dyn_cast<mlir::DenseResourceElementsAttr>(a)) {
        const mlir::AsmResourceBlob* blob = resource.getRawHandle().getBlob();
        constants.push_back(blob ? blob->getData() : llvm::ArrayRef<char>());
      }
    });
  });
  // The unit of work for the thread pool, not a tuning: any size gives a sound key (changing it
  // changes every key, so cached objects are compiled again once).
  constexpr size_t kChunk = size_t(1) << 20;
  struct Chunk {
    const char* data;
    size_t size;
  };
  std::vector<Chunk> chunks;
  std::vector<size_t> first_chunk;  // per constant
  for (llvm::ArrayRef<char> c : constants) {
    first_chunk.push_back(chunks.size());
    for (size_t at = 0; at < c.size(); at += kChunk)
      chunks.push_back({c.data() + at, std::min(kChunk, c.size() - at)});
  }
  first_chunk.push_back(chunks.size());
  std::vector<uint64_t> chunk_hash(chunks.size());
  parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      chunk_hash[i] = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
          reinterpret_cast<const uint8_t*>(chunks[i].data), chunks[i].size));
  });
  for (size_t k = 0; k < constants.size(); ++k) {
    const llvm::ArrayRef<uint64_t> mine(chunk_hash.data() + first_chunk[k],
                                        first_chunk[k + 1] - first_chunk[k]);
    const uint64_t h = llvm::xxh3_64bits(llvm::ArrayRef<uint8_t>(
        reinterpret_cast<const uint8_t*>(mine.data()), mine.size() * sizeof(uint64_t)));
    os << "\n#" << llvm::format_hex_no_prefix(h, 16) << ":" << constants[k].size();
  }
  return text;
}

// The code for a module (`fingerprint` keys the caches; `bytes_of` gives the module's bytes to
// compile on a miss): from the memory cache, the disk cache, or compiled now. `signature_of`
// reads the entry signature from @forward's type (for disk hits).
std::shared_ptr<const Code> code_for(const std::string& fingerprint,
                                     const std::function<std::string()>& bytes_of,
                                     const CompileOptions& options,
                                     const std::function<codegen::EntrySignature()>& signature_of,
                                     CompiledFunction::Source* source, std::string* key_out) {
  codegen::LowerOptions lower;
  lower.fuse_elementwise = options.fuse_elementwise;
  lower.parallel_min_elements = options.parallel_min_elements;
  lower.vector_bits = options.vector_bits;
  const codegen::Target host = codegen::host_target();
  std::string keyed = fingerprint;
  if (options.optimize) {
    keyed += options.block_epilogues ? "\n#optimize" : "\n#optimize-unblocked";
    if (!options.block_prologues) keyed += "-no-prologues";
  }
  const std::string key = codegen::cache_key(keyed, host, lower, options.opt_level);
  *key_out = key;
  std::shared_ptr<const Code> code;
  *source = CompiledFunction::Source::Compiled;
  if (options.memory_cache) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto it = memory_cache().find(key);
    if (it != memory_cache().end()) {
      *source = CompiledFunction::Source::MemoryCache;
      return it->second;
    }
  }
  const std::filesystem::path object_path = cache_dir(options) / (key + ".o");
  if (options.disk_cache) {
    std::string object;
    if (read_file(object_path, &object) && !object.empty()) {
      // A cached object that no longer loads (truncated, foreign) is compiled again.
      std::string error;
      codegen::JitEngine::Loaded loaded =
          codegen::JitEngine::instance().load(object, "kiln_entry", abi_symbols(), &error);
      if (loaded.entry) {
        auto cached = std::make_shared<Code>();
        cached->entry = reinterpret_cast<Entry>(loaded.entry);
        cached->loaded = loaded;
        cached->signature = signature_of();
        code = std::move(cached);
        *source = CompiledFunction::Source::DiskCache;
      }
    }
  }
  if (!code) {
    // A private context: compiling never touches the caller's module, and compiles may overlap.
    std::unique_ptr<mlir::MLIRContext> ctx = make_context();
    mlir::ModuleOp module = parse_module(*ctx, bytes_of());
    if (options.optimize)
      optimize_for_codegen(*ctx, module, "jit::compile", options.block_epilogues,
                           options.block_prologues);
    std::string object, error;
    codegen::EntrySignature signature;
    const bool ok = codegen::compile_to_object(module, {}, lower, options.opt_level, &object,
                                               &signature, &error);
    module->erase();
    KILN_CHECK(ok, "jit::compile", error);
    if (options.disk_cache) write_file(object_path, object);
    code = load(object, signature);
  }
  if (options.memory_cache) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    memory_cache().emplace(key, code);
  }
  return code;
}

codegen::EntrySignature signature_of_module(mlir::ModuleOp module) {
  codegen::EntrySignature signature;
  std::string error;
  KILN_CHECK(codegen::entry_signature(module, &signature, &error), "jit::compile", error);
  return signature;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

CompiledFunction compile(const TracedFunction& traced, const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto impl = std::make_shared<CompiledFunction::Impl>();
  impl->code = code_for(
      module_fingerprint(traced.module()), [&] { return traced.bytecode(); }, options,
      [&] { return signature_of_module(traced.module()); }, &impl->source, &impl->key);
  impl->captures = traced.captures();
  impl->guards = traced.guards();
  impl->mutated = traced.mutated_captures();
  impl->host_values = traced.host_values();
  impl->num_inputs = traced.num_inputs();
  for (size_t i = 0; i < impl->captures.size(); ++i) {
    if (traced.arg_names()[impl->num_inputs + i] == "rng_state") impl->rng_capture = i;
  }
  // The trace's inputs and captures are the entry point's arguments, in order (a mismatch, from
  // a module edited after tracing or a stale cache entry, would index past them at run time).
  const size_t args = impl->code->signature.args.size();
  KILN_CHECK(args == impl->num_inputs + impl->captures.size(), "jit::compile", "@forward takes ",
             args, " arguments, but the trace has ", impl->num_inputs, " inputs and ",
             impl->captures.size(), " captures");
  const size_t results = impl->code->signature.results.size();
  KILN_CHECK(results >= impl->mutated.size(), "jit::compile", "@forward returns ", results,
             " values, fewer than the ", impl->mutated.size(), " in-out captures");
  impl->num_outputs = results - impl->mutated.size();
  impl->seconds = seconds_since(start);
  CompiledFunction f;
  f.impl_ = std::move(impl);
  return f;
}

CompiledFunction compile_module(const std::string& text_or_bytecode,
                                const CompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto impl = std::make_shared<CompiledFunction::Impl>();
  impl->code = code_for(
      text_or_bytecode, [&] { return text_or_bytecode; }, options,
      [&] {
        std::unique_ptr<mlir::MLIRContext> ctx = make_context();
        mlir::ModuleOp m = parse_module(*ctx, text_or_bytecode);
        codegen::EntrySignature s = signature_of_module(m);
        m->erase();
        return s;
      },
      &impl->source, &impl->key);
  const codegen::EntrySignature& sig = impl->code->signature;
  for (size_t i = 0; i < sig.args.size(); ++i) {
    impl->guards.push_back({"arg" + std::to_string(i),
                            Dims(std::span<const int64_t>(sig.args[i].sizes)),
                            static_cast<DType>(sig.args[i].dtype)});
  }
  impl->num_inputs = sig.args.size();
  impl->num_outputs = sig.results.size();
  impl->seconds = seconds_since(start);
  CompiledFunction f;
  f.impl_ = std::move(impl);
  return f;
}

TensorList CompiledFunction::operator()(const TensorList& inputs) const {
  KILN_CHECK(impl_ != nullptr, "compiled function", "called before compile()");
  const Impl& m = *impl_;
  KILN_CHECK(inputs.size() == m.num_inputs, "compiled function", "expected ", m.num_inputs,
             " inputs, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Guard& g = m.guards[i];
    KILN_CHECK(inputs[i].defined() && inputs[i].sizes() == g.sizes && inputs[i].dtype() == g.dtype,
               "compiled function", "input \"", g.name, "\": expected ", g.sizes, " ",
               dtype_short_name(g.dtype), ", got ",
               inputs[i].defined() ? inputs[i].sizes() : Dims{}, " ",
               inputs[i].defined() ? dtype_short_name(inputs[i].dtype()) : "undefined");
  }
  refresh_host_values(m.host_values, m.captures);
  // Random ops continue the process's default stream, as eager calls (and the interpreter) do.
  if (m.rng_capture) {
    int64_t* rng = m.captures[*m.rng_capture].data_ptr<int64_t>();
    rng[0] = static_cast<int64_t>(kiln::default_generator().seed());
    rng[1] = static_cast<int64_t>(kiln::default_generator().offset());
  }
  const codegen::EntrySignature& sig = m.code->signature;
  std::vector<void*> buffers;
  TensorList keep;
  auto add = [&](const Tensor& t, size_t index) {
    const codegen::BufferSpec& spec = sig.args[index];
    KILN_CHECK(static_cast<int>(t.dtype()) == spec.dtype &&
                   Dims(std::span<const int64_t>(spec.sizes)) == t.sizes(),
               "compiled function", "argument ", index, " no longer matches the trace: expected ",
               Dims(std::span<const int64_t>(spec.sizes)), ", got ", t.sizes());
    Tensor c = t.is_contiguous() ? t : t.contiguous();
    keep.push_back(c);
    buffers.push_back(c.data());
  };
  for (size_t i = 0; i < inputs.size(); ++i) add(inputs[i], i);
  for (size_t i = 0; i < m.captures.size(); ++i) add(m.captures[i], m.num_inputs + i);
  TensorList results;
  for (const codegen::BufferSpec& spec : sig.results) {
    Tensor t = kiln::empty(spec.sizes, TensorOptions(static_cast<DType>(spec.dtype)));
    buffers.push_back(t.data());
    results.push_back(t);
  }
  m.code->entry(buffers.data());
  if (char* error = kiln_abi_take_error()) {
    std::string message = error;
    kiln_abi_free_error(error);
    // A failed kiln.guard keeps its type: callers re-trace on it (SpecializedFunction).
    constexpr std::string_view kGuard = "guard: ";
    if (message.starts_with(kGuard)) throw GuardError("guard", message.substr(kGuard.size()));
    fail("compiled function", message);
  }
  // In-out captures (a training step's parameters) take their new values.
  for (size_t k = 0; k < m.mutated.size(); ++k) {
    const Tensor& dst = m.captures[m.mutated[k]];
    kernels::copy_(*dst.impl(), *results[m.num_outputs + k].impl());
    autograd::bump_version(dst);
  }
  if (m.rng_capture) {
    kiln::default_generator().set_offset(
        static_cast<uint64_t>(m.captures[*m.rng_capture].data_ptr<int64_t>()[1]));
  }
  results.resize(m.num_outputs);
  return results;
}

}  // namespace kiln::jit

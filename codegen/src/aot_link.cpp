// Linking AOT objects with the system toolchain: the compiler driver for the target (c++ on the
// host, aarch64-linux-gnu-g++ for arm64) against the static kiln_runtime (and kiln_aot_main for
// executables) built for that target. lld is used when installed (it links ~10x faster than bfd).
// The toolchain is run directly (no shell), with its output captured for the error message.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "kiln/codegen/aot.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Triple.h"

namespace kiln::codegen {
namespace {

// A temporary file removed when this goes out of scope.
struct TempFile {
  std::string path;
  TempFile(const std::string& prefix, const std::string& suffix) {
    llvm::SmallString<128> p;
    if (auto ec = llvm::sys::fs::createTemporaryFile(prefix, suffix, p))
      throw AotError("cannot create a temporary file: " + ec.message());
    path = std::string(p.str());
  }
  ~TempFile() { llvm::sys::fs::remove(path); }
  void write(const std::string& bytes) const {
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (!ec) os << bytes;
    if (ec || os.has_error()) throw AotError("cannot write '" + path + "': " + ec.message());
  }
};

std::string require_file(const std::string& dir, const std::string& name, const Target& target) {
  llvm::SmallString<256> p(dir);
  llvm::sys::path::append(p, name);
  if (!llvm::sys::fs::exists(p))
    throw AotError(name + " for " + target.triple + " not found in '" + dir + "' (" +
                   (is_aarch64(target) ? "run scripts/build_runtime_aarch64.sh"
                                       : "build the kiln_runtime and kiln_aot_main targets") +
                   ", or pass --runtime-dir)");
  return std::string(p.str());
}

void run_tool(const std::string& program, const std::vector<std::string>& args) {
  TempFile log("kiln-link", "log");
  std::vector<llvm::StringRef> argv{program};
  for (const auto& a : args) argv.push_back(a);
  const std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log.path),
                                                      llvm::StringRef(log.path)};
  std::string err;
  const int rc = llvm::sys::ExecuteAndWait(program, argv, std::nullopt, redirects, 0, 0, &err);
  if (rc == 0) return;
  std::string cmd = program;
  for (const auto& a : args) cmd += " " + a;
  std::string output;
  if (auto buf = llvm::MemoryBuffer::getFile(log.path)) output = (*buf)->getBuffer().str();
  throw AotError("link failed (exit " + std::to_string(rc) + (err.empty() ? "" : ", " + err) +
                 "): " + cmd + "\n" + output);
}

std::string header_path(const std::string& output) {
  llvm::SmallString<256> p(output);
  llvm::sys::path::replace_extension(p, "h");
  return std::string(p.str());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::string find_link_driver(const Target& target) {
  const std::vector<std::string> candidates =
      is_aarch64(target) && !llvm::Triple(host_target().triple).isAArch64()
          ? std::vector<std::string>{"aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc"}
          : std::vector<std::string>{"c++", "g++", "clang++"};
  for (const auto& name : candidates)
    if (auto p = llvm::sys::findProgramByName(name)) return *p;
  return "";
}

void link(const LinkOptions& o) {
  std::string driver = o.driver.empty() ? find_link_driver(o.target) : o.driver;
  if (driver.empty())
    throw AotError("no linker for " + o.target.triple +
                   (is_aarch64(o.target) ? ": install g++-aarch64-linux-gnu (scripts/bootstrap.sh)"
                                         : ": install g++ or clang++"));
  std::vector<std::string> args;
  if (o.kind == EmitKind::Object) {
    // One relocatable object out of the model's and the interface's.
    args = {"-r", "-nostdlib", "-o", o.output};
    args.insert(args.end(), o.objects.begin(), o.objects.end());
    run_tool(driver, args);
    return;
  }
  // lld on the host (the cross gcc looks for a target-prefixed ld and keeps its own bfd ld).
  const bool cross = is_aarch64(o.target) != llvm::Triple(host_target().triple).isAArch64();
  if (!cross && llvm::sys::findProgramByName("ld.lld")) args.push_back("-fuse-ld=lld");
  std::optional<TempFile> version_script;
  if (o.kind == EmitKind::SharedLibrary) {
    args.push_back("-shared");
    // The runtime inside starts worker threads that live to the process's end: dlclose must not
    // unmap the code they run (found by the trace fuzzer, which loads and closes many models).
    args.push_back("-Wl,-z,nodelete");
    // Export the model's interface only: the runtime inside stays private, so two models (or a
    // model and the host program's own kiln) never interpose each other's symbols.
    version_script.emplace("kiln-exports", "map");
    const std::string errors =
        o.uses_runtime_errors ? o.prefix + "_take_error; " + o.prefix + "_free_error; " : "";
    version_script->write("{ global: " + o.prefix + "_run; " + o.prefix + "_info; " + errors +
                          "local: *; };\n");
    args.push_back("-Wl,--version-script=" + version_script->path);
  }
  args.push_back("-o");
  args.push_back(o.output);
  args.insert(args.end(), o.objects.begin(), o.objects.end());
  if (o.kind == EmitKind::Executable)
    args.push_back(require_file(o.runtime_dir, "libkiln_aot_main.a", o.target));
  args.push_back(require_file(o.runtime_dir, "libkiln_runtime.a", o.target));
  args.push_back("-pthread");
  // The C++ runtime goes in statically: the output then needs only libc/libm/libpthread of the
  // device, not a libstdc++ of the toolchain's version.
  args.push_back("-static-libstdc++");
  args.push_back("-static-libgcc");
  args.push_back("-lm");
  args.insert(args.end(), o.extra_args.begin(), o.extra_args.end());
  run_tool(driver, args);
}

std::string link_code_object(const std::string& object, const Target& target,
                             const std::vector<std::string>& exports) {
  const std::string driver = find_link_driver(target);
  if (driver.empty())
    throw AotError("no linker for " + target.triple +
                   (is_aarch64(target) ? ": install g++-aarch64-linux-gnu (scripts/bootstrap.sh)"
                                       : ": install g++ or clang++"));
  TempFile obj("kiln-code", "o"), so("kiln-code", "so"), map("kiln-code-exports", "map");
  obj.write(object);
  std::string script = "{ global: ";
  for (const std::string& e : exports) script += e + "; ";
  map.write(script + "local: *; };\n");
  std::vector<std::string> args;
  const bool cross = is_aarch64(target) != llvm::Triple(host_target().triple).isAArch64();
  if (!cross && llvm::sys::findProgramByName("ld.lld")) args.push_back("-fuse-ld=lld");
  // Self-contained but for libc/libm: compiler builtins from the static libgcc, no C++ runtime,
  // and every symbol resolved now (-z defs), so dlopen cannot fail on a missing one.
  for (const char* a : {"-shared", "-static-libgcc", "-Wl,--as-needed", "-Wl,-z,defs"})
    args.push_back(a);
  args.push_back("-Wl,--version-script=" + map.path);
  args.insert(args.end(), {"-o", so.path, obj.path, "-lm"});
  run_tool(driver, args);
  auto buf = llvm::MemoryBuffer::getFile(so.path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf) throw AotError("cannot read '" + so.path + "': " + buf.getError().message());
  return (*buf)->getBuffer().str();
}

std::vector<std::string> package_object(const std::string& model_object,
                                        const ModelSignature& signature, const AotOptions& o,
                                        AotTimings* timings) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string prefix = o.kind == EmitKind::Executable ? "model" : o.prefix;
  std::string interface_object;
  {
    llvm::LLVMContext ctx;
    auto tm = create_target_machine(o.target, 2);
    auto m = build_interface_module(ctx, signature, o.constants, prefix, o.entry, o.target,
                                    checked_cpu_features(*tm), o.uses_runtime_errors);
    interface_object = emit_object(*m, *tm, 2);
  }
  TempFile model_file("kiln-model", "o"), interface_file("kiln-interface", "o");
  model_file.write(model_object);
  interface_file.write(interface_object);
  const auto t1 = std::chrono::steady_clock::now();

  LinkOptions lo;
  lo.target = o.target;
  lo.kind = o.kind;
  lo.uses_runtime_errors = o.uses_runtime_errors;
  lo.objects = {model_file.path, interface_file.path};
  lo.output = o.output;
  lo.runtime_dir = o.runtime_dir;
  lo.prefix = prefix;
  lo.extra_args = o.link_args;
  link(lo);
  std::vector<std::string> files{o.output};
  if (o.kind == EmitKind::SharedLibrary) {
    const std::string h = header_path(o.output);
    std::error_code ec;
    llvm::raw_fd_ostream os(h, ec);
    if (!ec) os << generate_c_header(signature, prefix, o.target);
    if (ec || os.has_error()) throw AotError("cannot write '" + h + "': " + ec.message());
    files.push_back(h);
  }
  if (timings) {
    timings->optimize_and_emit_s += std::chrono::duration<double>(t1 - t0).count();
    timings->link_s += seconds_since(t1);
  }
  return files;
}

std::vector<std::string> compile_module(llvm::Module& module, const ModelSignature& signature,
                                        const AotOptions& o, AotTimings* timings) {
  const auto t0 = std::chrono::steady_clock::now();
  auto tm = create_target_machine(o.target, o.opt_level);
  const std::string object = emit_object(module, *tm, o.opt_level);
  if (timings) timings->optimize_and_emit_s += seconds_since(t0);
  return package_object(object, signature, o, timings);
}

}  // namespace kiln::codegen

#pragma once
// The machine code generation targets: a triple, a CPU name and its feature string.

#include <string>

namespace kiln::codegen {

struct Target {
  std::string triple;    // e.g. x86_64-pc-linux-gnu, aarch64-linux-gnu
  std::string cpu;       // e.g. znver4, generic
  std::string features;  // e.g. +avx2,+fma,+avx512f
};

// The machine this process runs on, as LLVM sees it.
Target host_target();
// True when LLVM in this build can generate code for `triple` (x86-64 and AArch64 are built in).
bool target_available(const std::string& triple, std::string* error = nullptr);

}  // namespace kiln::codegen

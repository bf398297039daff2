#pragma once
// Name → address of every kiln_abi_* entry point (kiln/runtime/abi.h).
#include <string>
#include <utility>
#include <vector>

namespace kiln::jit {
const std::vector<std::pair<std::string, void*>>& abi_symbols();
}  // namespace kiln::jit

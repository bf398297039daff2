#pragma once
// The value of an --input-shape option: positive integers separated by commas ("1,3,224,224").

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kiln/runtime/error.h"

namespace kiln::cli {

inline std::vector<int64_t> parse_shape_arg(const std::string& s) {
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t next = s.find(',', pos);
    const std::string part =
        s.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    char* end = nullptr;
    const long long v = std::strtoll(part.c_str(), &end, 10);
    KILN_CHECK(!part.empty() && end && *end == 0 && v > 0, "",
               "--input-shape: expected positive integers separated by commas, got '", s, "'");
    out.push_back(v);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

}  // namespace kiln::cli

#pragma once
// Internal: a small strict JSON reader/writer (RFC 8259) for safetensors headers. Numbers keep
// their text so 64-bit offsets convert exactly; objects keep their key order and duplicates (the
// caller decides); nesting is limited to 64 levels.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::serialize_detail {

struct Json {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  std::string text;  // the string's value, or a number's literal text
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const char* kind_name() const;
  // An integer literal in [0, 2^64) (no sign, fraction or exponent), else nullopt.
  std::optional<uint64_t> as_u64() const;
};

// Throws kiln::Error(op, "<source>: bad JSON header: <problem> at byte N").
Json parse_json(std::string_view text, const char* op, const std::string& source);

}  // namespace kiln::serialize_detail

// .safetensors writing (see kiln/runtime/safetensors.h).

#include "kiln/runtime/safetensors.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <unordered_set>

#include "kiln/runtime/error.h"

namespace kiln::safetensors {
namespace {

struct DTypeName {
  const char* name;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {
    {"F32", DType::Float32},   {"F64", DType::Float64}, {"F16", DType::Float16},
    {"BF16", DType::BFloat16}, {"I8", DType::Int8},     {"U8", DType::UInt8},
    {"I32", DType::Int32},     {"I64", DType::Int64},   {"BOOL", DType::Bool},
};

// A JSON string literal (RFC 8259: quote, backslash and control characters escaped).
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

const char* format_dtype_name(DType dtype) {
  for (const auto& d : kDTypes)
    if (d.dtype == dtype) return d.name;
  return "?";
}

std::optional<DType> dtype_from_format_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return std::nullopt;
}

std::vector<uint8_t> serialize(const std::vector<Entry>& entries,
                               const std::vector<std::pair<std::string, std::string>>& metadata,
                               const char* op) {
  std::unordered_set<std::string> names, keys;
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (size_t i = 0; i < metadata.size(); ++i) {
      KILN_CHECK(keys.insert(metadata[i].first).second, op, "duplicate metadata key '",
                 metadata[i].first, "'");
      h += (i ? "," : "") + quote(metadata[i].first) + ":" + quote(metadata[i].second);
    }
    h += "}";
  }
  uint64_t at = 0;
  std::vector<uint64_t> sizes;
  for (const Entry& e : entries) {
    KILN_CHECK(e.name != "__metadata__", op, "'__metadata__' is reserved, not a tensor name");
    KILN_CHECK(names.insert(e.name).second, op, "duplicate tensor name '", e.name, "'");
    uint64_t nbytes = dtype_size(e.dtype);
    for (int64_t d : e.shape) nbytes *= static_cast<uint64_t>(d);
    KILN_CHECK(nbytes == 0 || e.data, op, "tensor '", e.name, "' has no data");
    h += (h.size() > 1 ? "," : "") + quote(e.name) + ":{\"dtype\":\"" + format_dtype_name(e.dtype) +
         "\",\"shape\":[";
    for (size_t d = 0; d < e.shape.size(); ++d) h += (d ? "," : "") + std::to_string(e.shape[d]);
    h += "],\"data_offsets\":[" + std::to_string(at) + "," + std::to_string(at + nbytes) + "]}";
    at += nbytes;
    sizes.push_back(nbytes);
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');  // keep the data buffer 8-byte aligned
  std::vector<uint8_t> out(8 + h.size() + at);
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, h.data(), h.size());
  uint8_t* p = out.data() + 8 + h.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (sizes[i]) std::memcpy(p, entries[i].data, sizes[i]);
    p += sizes[i];
  }
  return out;
}

void write(const std::string& path, const std::vector<Entry>& entries,
           const std::vector<std::pair<std::string, std::string>>& metadata, const char* op) {
  const std::vector<uint8_t> bytes = serialize(entries, metadata, op);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(f, op, "cannot open \"", path, "\" for writing");
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  f.close();  // the last bytes reach the file here: a full disk fails now, not in a destructor
  KILN_CHECK(f, op, "cannot write \"", path, "\"");
}

}  // namespace kiln::safetensors

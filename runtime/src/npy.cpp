#include "kiln/runtime/npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string_view>

#include "kiln/runtime/error.h"

namespace kiln::npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

struct DescrEntry {
  const char* code;  // without the byte-order character
  DType dtype;
};
constexpr DescrEntry kDescrs[] = {
    {"f4", DType::Float32}, {"f8", DType::Float64}, {"f2", DType::Float16}, {"i1", DType::Int8},
    {"u1", DType::UInt8},   {"i4", DType::Int32},   {"i8", DType::Int64},   {"b1", DType::Bool},
};

// The header is a Python dict literal written by NumPy, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// Finds `'key':` and returns the text after it, or fails.
std::string_view value_of(std::string_view header, std::string_view key, const std::string& name) {
  std::string quoted(key.size() + 2, '\'');
  key.copy(quoted.data() + 1, key.size());
  const size_t k = header.find(quoted);
  KILN_CHECK(k != std::string_view::npos, "read_npy", name, ": header has no ", quoted, " entry");
  size_t p = k + quoted.size();
  while (p < header.size() && header[p] == ' ') ++p;
  KILN_CHECK(p < header.size() && header[p] == ':', "read_npy", name, ": malformed ", quoted,
             " entry in header");
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  return header.substr(p);
}

DType parse_descr(std::string_view v, const std::string& name) {
  KILN_CHECK(!v.empty() && v[0] == '\'', "read_npy", name, ": 'descr' is not a string");
  const size_t end = v.find('\'', 1);
  KILN_CHECK(end != std::string_view::npos, "read_npy", name, ": unterminated 'descr'");
  std::string_view d = v.substr(1, end - 1);
  KILN_CHECK(!d.empty() && d[0] != '>', "read_npy", name, ": big-endian data ('", d,
             "') is not supported");
  if (d[0] == '<' || d[0] == '|' || d[0] == '=') d.remove_prefix(1);
  for (const auto& e : kDescrs)
    if (d == e.code) return e.dtype;
  fail("read_npy", name, ": unsupported dtype '", v.substr(1, end - 1),
       "' (expected one of f2 f4 f8 i1 u1 i4 i8 b1)");
}

std::vector<int64_t> parse_shape(std::string_view v, const std::string& name) {
  KILN_CHECK(!v.empty() && v[0] == '(', "read_npy", name, ": 'shape' is not a tuple");
  const size_t end = v.find(')');
  KILN_CHECK(end != std::string_view::npos, "read_npy", name, ": unterminated 'shape'");
  std::vector<int64_t> shape;
  size_t p = 1;
  while (p < end) {
    while (p < end && (v[p] == ' ' || v[p] == ',')) ++p;
    if (p == end) break;
    KILN_CHECK(std::isdigit(static_cast<unsigned char>(v[p])), "read_npy", name,
               ": 'shape' holds a non-integer: ", v.substr(0, end + 1));
    int64_t dim = 0;
    while (p < end && std::isdigit(static_cast<unsigned char>(v[p]))) {
      KILN_CHECK(dim <= (std::numeric_limits<int64_t>::max() - 9) / 10, "read_npy", name,
                 ": dimension too large in 'shape'");
      dim = dim * 10 + (v[p++] - '0');
    }
    KILN_CHECK(p == end || v[p] == ',' || v[p] == ' ', "read_npy", name,
               ": malformed 'shape': ", v.substr(0, end + 1));
    shape.push_back(dim);
  }
  return shape;
}

uint64_t read_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

const char* descr_of(DType d) {
  switch (d) {
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
    case DType::Float16:
      return "<f2";
    case DType::Int8:
      return "|i1";
    case DType::UInt8:
      return "|u1";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::Bool:
      return "|b1";
    case DType::BFloat16:
      break;
  }
  fail("write_npy", "dtype ", dtype_name(d), " has no NumPy equivalent");
}

}  // namespace

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Array parse(const uint8_t* bytes, size_t size, const std::string& name) {
  KILN_CHECK(size >= kMagicLen + 2 && std::memcmp(bytes, kMagic, kMagicLen) == 0, "read_npy", name,
             ": not a .npy file (bad magic)");
  const int major = bytes[6];
  KILN_CHECK(major >= 1 && major <= 3, "read_npy", name, ": unsupported format version ", major,
             ".", int(bytes[7]), " (expected 1.0, 2.0 or 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  KILN_CHECK(size >= prefix, "read_npy", name, ": truncated header");
  const uint64_t header_len = read_le(bytes + kMagicLen + 2, len_bytes);
  KILN_CHECK(header_len <= size - prefix, "read_npy", name, ": header length ", header_len,
             " runs past the end of the file (", size, " bytes)");
  const std::string_view header(reinterpret_cast<const char*>(bytes + prefix), header_len);

  Array a;
  a.dtype = parse_descr(value_of(header, "descr", name), name);
  const std::string_view fortran = value_of(header, "fortran_order", name);
  KILN_CHECK(fortran.substr(0, 5) == "False", "read_npy", name,
             ": Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  a.shape = parse_shape(value_of(header, "shape", name), name);

  // numel * itemsize, checked for overflow, must be exactly the bytes after the header.
  uint64_t nbytes = dtype_size(a.dtype);
  for (int64_t d : a.shape) {
    KILN_CHECK(d == 0 || nbytes <= std::numeric_limits<uint64_t>::max() / uint64_t(d), "read_npy",
               name, ": shape is too large");
    nbytes *= uint64_t(d);
  }
  const uint64_t available = size - prefix - header_len;
  KILN_CHECK(nbytes == available, "read_npy", name, ": data holds ", available,
             " bytes, but the header's dtype ", dtype_name(a.dtype), " and shape need ", nbytes);
  a.data.assign(bytes + prefix + header_len, bytes + size);
  return a;
}

Array read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "read_npy", "cannot open '", path, "'");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  KILN_CHECK(!f.bad(), "read_npy", "error reading '", path, "'");
  return parse(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> serialize(DType dtype, const std::vector<int64_t>& shape, const void* data) {
  std::string dict =
      std::string("{'descr': '") + descr_of(dtype) + "', 'fortran_order': False, 'shape': (";
  uint64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    KILN_CHECK(shape[i] >= 0, "write_npy", "negative dimension ", shape[i]);
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
    numel *= uint64_t(shape[i]);
  }
  dict += "), }";
  // Pad with spaces and a final newline so the data starts on a 64-byte boundary.
  const bool v2 = dict.size() + 1 + 10 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = (prefix + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict += '\n';

  const size_t nbytes = numel * dtype_size(dtype);
  std::vector<uint8_t> out(total + nbytes);
  std::memcpy(out.data(), kMagic, kMagicLen);
  out[6] = v2 ? 2 : 1;
  out[7] = 0;
  for (size_t i = 0; i < prefix - 8; ++i) out[8 + i] = uint8_t(uint64_t(dict.size()) >> (8 * i));
  std::memcpy(out.data() + prefix, dict.data(), dict.size());
  if (nbytes) std::memcpy(out.data() + total, data, nbytes);
  return out;
}

void write(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
           const void* data) {
  const std::vector<uint8_t> bytes = serialize(dtype, shape, data);
  std::ofstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "write_npy", "cannot create '", path, "'");
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  KILN_CHECK(f.good(), "write_npy", "error writing '", path, "'");
}

}  // namespace kiln::npy

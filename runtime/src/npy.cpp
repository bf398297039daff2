#include "kiln/runtime/npy.h"

#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string_view>

#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/error.h"

namespace kiln::npy {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr const char* kRead = "read_npy";

struct Header {
  DType dtype = DType::Float32;
  bool fortran = false;
  std::vector<int64_t> shape;
};

// Parses the header's Python dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), } — exactly these three keys, any order, any whitespace.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& name) : s_(s), name_(name) {}

  Header parse() {
    Header h;
    bool have_descr = false, have_order = false, have_shape = false;
    ws();
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') break;
      const std::string key = quoted();
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        if (have_descr) bad("duplicate key 'descr'");
        h.dtype = descr(quoted());
        have_descr = true;
      } else if (key == "fortran_order") {
        if (have_order) bad("duplicate key 'fortran_order'");
        h.fortran = boolean();
        have_order = true;
      } else if (key == "shape") {
        if (have_shape) bad("duplicate key 'shape'");
        h.shape = tuple();
        have_shape = true;
      } else {
        bad("unexpected key '" + key + "'");
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      if (peek() != '}') bad("expected ',' or '}' at header byte " + std::to_string(i_));
    }
    expect('}');
    for (; i_ < s_.size(); ++i_)
      if (!std::isspace(static_cast<unsigned char>(s_[i_])))
        bad("unexpected text after the header dict at byte " + std::to_string(i_));
    if (!have_descr || !have_shape || !have_order)
      bad("the header dict needs the keys 'descr', 'fortran_order' and 'shape'");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& what) { fail(kRead, name_, ": bad header: ", what); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "' at header byte " + std::to_string(i_));
    ++i_;
  }
  std::string quoted() {
    const char q = peek();
    if (q != '\'' && q != '"') bad("expected a quoted string at header byte " + std::to_string(i_));
    const size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') bad("escapes are not supported in header strings");
      ++i_;
    }
    if (i_ >= s_.size()) bad("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") return i_ += 4, true;
    if (s_.substr(i_, 5) == "False") return i_ += 5, false;
    bad("expected True or False for 'fortran_order' at header byte " + std::to_string(i_));
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> d;
    for (;;) {
      ws();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        bad("expected a non-negative integer in 'shape' at header byte " + std::to_string(i_));
      uint64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (!mul_ok(v, 10, v) || !add_ok(v, uint64_t(s_[i_] - '0'), v) ||
            v > static_cast<uint64_t>(INT64_MAX))
          bad("a 'shape' entry overflows int64");
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 longs
      if (d.size() >= 64) bad("more than 64 dims in 'shape'");
      d.push_back(static_cast<int64_t>(v));
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      if (peek() != ')') bad("expected ',' or ')' in 'shape' at header byte " + std::to_string(i_));
    }
    expect(')');
    return d;
  }
  DType descr(const std::string& d) {
    if (d.size() == 3 && (d[0] == '<' || d[0] == '|' || d[0] == '=')) {
      const std::string t = d.substr(1);
      const bool one_byte = t == "i1" || t == "u1" || t == "b1";
      if (d[0] == '|' && !one_byte) bad("descr '" + d + "' has no byte order");
      if (t == "f2") return DType::Float16;
      if (t == "f4") return DType::Float32;
      if (t == "f8") return DType::Float64;
      if (t == "i1") return DType::Int8;
      if (t == "u1") return DType::UInt8;
      if (t == "i4") return DType::Int32;
      if (t == "i8") return DType::Int64;
      if (t == "b1") return DType::Bool;
    }
    if (!d.empty() && d[0] == '>')
      bad("big-endian descr '" + d + "' is not supported (save it little-endian)");
    bad("unsupported descr '" + d + "' (kiln reads f2 f4 f8 i1 u1 i4 i8 b1)");
  }

  std::string_view s_;
  size_t i_ = 0;
  const std::string& name_;
};

uint64_t read_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Column-major bytes -> row-major, element by element (`elem` bytes each).
std::vector<uint8_t> fortran_to_c(const uint8_t* src, const std::vector<int64_t>& shape,
                                  size_t elem) {
  const size_t rank = shape.size();
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= uint64_t(d);
  std::vector<uint8_t> out(numel * elem);
  std::vector<int64_t> index(rank, 0);
  for (uint64_t c = 0; c < numel; ++c) {
    uint64_t f = 0, stride = 1;  // the Fortran offset of the current C-order index
    for (size_t d = 0; d < rank; ++d) {
      f += uint64_t(index[d]) * stride;
      stride *= uint64_t(shape[d]);
    }
    std::memcpy(out.data() + c * elem, src + f * elem, elem);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
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
  fail("write_npy", "NumPy has no ", dtype_name(d),
       " dtype; convert the tensor (e.g. to float32) first");
}

}  // namespace

int64_t Array::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Array parse(const uint8_t* bytes, size_t size, const std::string& name) {
  KILN_CHECK(size >= kMagicLen + 2, kRead, name, ": truncated: ", size,
             " bytes, a .npy preamble needs 10");
  KILN_CHECK(std::memcmp(bytes, kMagic, kMagicLen) == 0, kRead, name,
             ": bad magic (not a .npy file)");
  const int major = bytes[6], minor = bytes[7];
  KILN_CHECK(major >= 1 && major <= 3 && minor == 0, kRead, name, ": unsupported format version ",
             major, ".", minor, " (kiln reads 1.0, 2.0 and 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  KILN_CHECK(size >= prefix, kRead, name, ": truncated: ", size, " bytes, a version ", major,
             " preamble needs ", prefix);
  const uint64_t header_len = read_le(bytes + kMagicLen + 2, len_bytes);
  KILN_CHECK(header_len <= size - prefix, kRead, name, ": truncated: header length ", header_len,
             " runs past the end of the file (", size - prefix, " bytes after the preamble)");
  const std::string_view header(reinterpret_cast<const char*>(bytes + prefix), header_len);
  const Header h = HeaderParser(header, name).parse();

  Array a;
  a.dtype = h.dtype;
  a.shape = h.shape;
  // numel * itemsize, checked for overflow, must be exactly the bytes after the header.
  uint64_t numel = 1, nbytes = 0;
  bool empty = false;
  for (int64_t d : h.shape) empty = empty || d == 0;
  if (!empty) {
    for (int64_t d : h.shape) {
      KILN_CHECK(mul_ok(numel, uint64_t(d), numel) && numel <= uint64_t(INT64_MAX), kRead, name,
                 ": shape ", shape_str(h.shape), " overflows int64 elements");
    }
  }
  if (empty) numel = 0;
  KILN_CHECK(mul_ok(numel, dtype_size(h.dtype), nbytes), kRead, name, ": shape ",
             shape_str(h.shape), " overflows 64-bit byte counts");
  const uint64_t have = size - prefix - header_len;
  KILN_CHECK(have >= nbytes, kRead, name, ": truncated: shape ", shape_str(h.shape), " of ",
             dtype_name(h.dtype), " needs ", nbytes, " data bytes, the file has ", have);
  KILN_CHECK(have == nbytes, kRead, name, ": ", have - nbytes, " unexpected bytes after the ",
             nbytes, " data bytes of shape ", shape_str(h.shape));
  const uint8_t* data = bytes + prefix + header_len;
  if (h.dtype == DType::Bool) {
    for (uint64_t i = 0; i < nbytes; ++i) {
      KILN_CHECK(data[i] <= 1, kRead, name, ": bool element ", i, " is ", int(data[i]),
                 " (not 0 or 1)");
    }
  }
  if (h.fortran && h.shape.size() >= 2) {
    a.data = fortran_to_c(data, h.shape, dtype_size(h.dtype));
  } else {
    a.data.assign(data, data + nbytes);
  }
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

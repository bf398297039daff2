// NumPy .npy files: versions 1.0/2.0/3.0 on read, 1.0 (2.0 when needed) on write.
#include <algorithm>
#include <cctype>

#include "io.h"
#include "kiln/ops.h"
#include "kiln/serialize.h"

namespace kiln {

using namespace serialize_detail;

namespace {

constexpr const char* kRead = "read_npy";
constexpr const char* kWrite = "write_npy";
constexpr char kNpyMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

struct NpyHeader {
  DType dtype = DType::Float32;
  bool fortran = false;
  Dims shape;
};

// Parses the header's Python dict literal: {'descr': '<f4', 'fortran_order': False,
// 'shape': (2, 3), } — exactly these three keys, any order, any whitespace.
class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& path) : s_(s), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
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
  [[noreturn]] void bad(const std::string& what) { fail(kRead, path_, ": bad header: ", what); }
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
  Dims tuple() {
    expect('(');
    Dims d;
    for (;;) {
      ws();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        bad("expected a non-negative integer in 'shape' at header byte " + std::to_string(i_));
      uint64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        if (!mul_ok(v, 10, v) || !add_ok(v, static_cast<uint64_t>(s_[i_] - '0'), v) ||
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
  const std::string& path_;
};

const char* npy_descr(DType t) {
  switch (t) {
    case DType::Float16:
      return "<f2";
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
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
  return nullptr;
}

}  // namespace

Tensor read_npy(const std::string& path) {
  FileSource src(path, kRead);
  uint8_t pre[12];
  if (src.size() < 10)
    fail(kRead, path, ": truncated: ", src.size(), " bytes, a .npy preamble needs 10");
  src.read_at(0, pre, 10, kRead, "the preamble");
  if (std::memcmp(pre, kNpyMagic, 6) != 0) fail(kRead, path, ": bad magic (not a .npy file)");
  const int major = pre[6], minor = pre[7];
  uint64_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = get_le<uint16_t>(pre + 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    src.read_at(10, pre + 10, 2, kRead, "the version 2 header length");
    hlen = get_le<uint32_t>(pre + 8);
    hstart = 12;
  } else {
    fail(kRead, path, ": unsupported format version ", major, ".", minor,
         " (kiln reads 1.0, 2.0 and 3.0)");
  }
  if (minor != 0) fail(kRead, path, ": unsupported format version ", major, ".", minor);
  if (hlen > src.size() - hstart)
    fail(kRead, path, ": truncated: header length ", hlen, " exceeds the ", src.size() - hstart,
         " bytes after the preamble");
  std::string header(hlen, '\0');
  src.read_at(hstart, header.data(), hlen, kRead, "the header");
  const NpyHeader h = HeaderParser(header, path).parse();

  const uint64_t data_start = hstart + hlen;
  uint64_t numel = 1, nbytes = 0;
  bool empty = false;
  for (int64_t s : h.shape) empty = empty || s == 0;
  if (!empty)
    for (int64_t s : h.shape)
      if (!mul_ok(numel, static_cast<uint64_t>(s), numel) || numel > uint64_t(INT64_MAX))
        fail(kRead, path, ": shape ", h.shape, " overflows int64 elements");
  if (empty) numel = 0;
  if (!mul_ok(numel, dtype_size(h.dtype), nbytes))
    fail(kRead, path, ": shape ", h.shape, " overflows 64-bit byte counts");
  const uint64_t have = src.size() - data_start;
  if (have < nbytes)
    fail(kRead, path, ": truncated: shape ", h.shape, " of ", dtype_name(h.dtype), " needs ",
         nbytes, " data bytes, the file has ", have);
  if (have > nbytes)
    fail(kRead, path, ": ", have - nbytes, " unexpected bytes after the ", nbytes,
         " data bytes of shape ", h.shape);

  Tensor flat = kiln::empty({static_cast<int64_t>(numel)}, TensorOptions(h.dtype));
  src.read_at(data_start, flat.data(), nbytes, kRead, "the array data");
  if (h.dtype == DType::Bool) {
    const auto* p = static_cast<const uint8_t*>(flat.data());
    for (uint64_t i = 0; i < nbytes; ++i)
      if (p[i] > 1) fail(kRead, path, ": bool element ", i, " is ", int(p[i]), " (not 0 or 1)");
  }
  if (!h.fortran || h.shape.size() < 2) return flat.view(h.shape);
  // Fortran order: column-major strides over the same bytes, then a C-order copy.
  Dims strides(h.shape.size());
  int64_t s = 1;
  for (size_t d = 0; d < h.shape.size(); ++d) {
    strides[d] = s;
    s *= std::max<int64_t>(h.shape[d], 1);
  }
  return flat.as_strided(h.shape, strides, 0).contiguous();
}

void write_npy(const std::string& path, const Tensor& tensor) {
  KILN_CHECK(tensor.defined(), kWrite, "expected a defined tensor");
  const char* descr = npy_descr(tensor.dtype());
  KILN_CHECK(descr != nullptr, kWrite, "NumPy has no ", dtype_name(tensor.dtype()),
             " dtype; convert the tensor (e.g. to float32) first");
  std::string shape = "(";
  for (int64_t i = 0; i < tensor.dim(); ++i)
    shape += std::to_string(tensor.size(i)) + (tensor.dim() == 1      ? ","
                                               : i + 1 < tensor.dim() ? ", "
                                                                      : "");
  shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Pad with spaces so that preamble + header + '\n' is a multiple of 64 (NumPy's alignment).
  uint64_t pre = 10;
  uint64_t total = (pre + header.size() + 1 + 63) / 64 * 64;
  if (total - pre > 65535) {
    pre = 12;
    total = (pre + header.size() + 1 + 63) / 64 * 64;
  }
  header.append(total - pre - header.size() - 1, ' ');
  header.push_back('\n');
  std::vector<uint8_t> out(kNpyMagic, kNpyMagic + 6);
  out.push_back(pre == 10 ? 1 : 2);
  out.push_back(0);
  if (pre == 10)
    put_le<uint16_t>(out, static_cast<uint16_t>(header.size()));
  else
    put_le<uint32_t>(out, static_cast<uint32_t>(header.size()));
  out.insert(out.end(), header.begin(), header.end());
  const Tensor c = tensor.detach().contiguous();
  FileSink sink(path, kWrite);
  sink.write(out.data(), out.size());
  sink.write(c.data(), c.numel() * c.element_size());
  sink.close();
}

}  // namespace kiln

// IDX reader (MNIST / Fashion-MNIST), plain or gzip. Everything in the header is validated before
// a byte of data is trusted; memory grows only as data actually arrives, so a lying header in a
// small compressed file cannot make us allocate gigabytes.
#include "kiln/data/mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "kiln/ops.h"

namespace kiln::data {

namespace {

constexpr const char* kOp = "read_idx";

[[noreturn]] void idx_fail(const std::string& path, const std::string& what) {
  fail(kOp, path, ": ", what);
}

// A file read through zlib: gzread passes plain files through unchanged and decompresses gzip.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (!f_) idx_fail(path, std::string("cannot open: ") + (errno ? std::strerror(errno) : "?"));
    gzbuffer(f_, 1 << 17);
  }
  ~GzReader() {
    if (f_) gzclose(f_);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; fewer only at the end of the data. Throws on a zlib error (corrupt or
  // truncated gzip stream, bad CRC).
  size_t read(void* dst, size_t n) {
    size_t done = 0;
    auto* out = static_cast<unsigned char*>(dst);
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(f_, out + done, chunk);
      check_error();
      if (got <= 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }
  bool compressed() const { return gzdirect(f_) == 0; }

 private:
  void check_error() {
    int err = Z_OK;
    const char* msg = gzerror(f_, &err);
    if (err == Z_OK || err == Z_STREAM_END) return;
    if (err == Z_BUF_ERROR) idx_fail(path_, "truncated gzip stream (unexpected end of file)");
    if (err == Z_ERRNO) idx_fail(path_, std::string("read error: ") + std::strerror(errno));
    idx_fail(path_, std::string("corrupt gzip stream: ") + (msg ? msg : "unknown zlib error"));
  }

  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

struct IdxFile {
  uint8_t type = 0;
  Dims dims;
  std::vector<unsigned char> bytes;  // big-endian payload, exactly numel * elem_size bytes
};

size_t idx_elem_size(uint8_t type) {
  switch (type) {
    case 0x08:
    case 0x09:
      return 1;
    case 0x0B:
      return 2;
    case 0x0C:
    case 0x0D:
      return 4;
    case 0x0E:
      return 8;
    default:
      return 0;
  }
}

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

IdxFile read_idx_raw(const std::string& path) {
  GzReader in(path);
  IdxFile f;
  unsigned char magic[4];
  const size_t got = in.read(magic, 4);
  if (got < 4)
    idx_fail(path, "truncated: " + std::to_string(got) + " bytes, an IDX header needs at least 4");
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08X", be32(magic));
  if (magic[0] != 0 || magic[1] != 0)
    idx_fail(path, std::string("bad magic ") + hex + " (an IDX file starts with two zero bytes)");
  f.type = magic[2];
  const size_t esize = idx_elem_size(f.type);
  if (esize == 0)
    idx_fail(path, std::string("bad magic ") + hex + ": unknown IDX type code " +
                       std::to_string(f.type) + " (expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E)");
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 8)
    idx_fail(path, std::string("bad magic ") + hex + ": " + std::to_string(ndims) +
                       " dims (expected 1 to 8)");
  unsigned char dimbuf[32];
  const size_t dgot = in.read(dimbuf, 4 * static_cast<size_t>(ndims));
  if (dgot < 4 * static_cast<size_t>(ndims))
    idx_fail(path, "truncated header: " + std::to_string(ndims) + " dims need " +
                       std::to_string(4 + 4 * ndims) + " bytes, file has " +
                       std::to_string(4 + dgot));
  uint64_t numel = 1;
  bool overflow = false;
  for (int i = 0; i < ndims; ++i) {
    const uint32_t d = be32(dimbuf + 4 * i);
    if (d > static_cast<uint32_t>(std::numeric_limits<int32_t>::max()))
      idx_fail(path,
               "dim " + std::to_string(i) + " is " + std::to_string(d) + " (larger than 2^31 - 1)");
    f.dims.push_back(static_cast<int64_t>(d));
    if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / d) overflow = true;
    numel *= d;
  }
  const uint64_t limit = uint64_t{1} << 40;  // 1 TiB: far above any real IDX file
  if (overflow || numel > limit / esize)
    idx_fail(path, "dims " + dims_str(f.dims) + " describe more than 2^40 bytes of data");
  const uint64_t want = numel * esize;
  const uint64_t header = 4 + 4 * static_cast<uint64_t>(ndims);
  if (!in.compressed()) {
    std::error_code ec;
    const uint64_t fsize = std::filesystem::file_size(path, ec);
    if (!ec && fsize < header + want)
      idx_fail(path, "truncated: dims " + dims_str(f.dims) + " need " + std::to_string(want) +
                         " data bytes after the " + std::to_string(header) +
                         "-byte header, file has " + std::to_string(fsize - header));
  }
  // Grow as data arrives (bounded by what the stream really holds).
  size_t have = 0;
  while (have < want) {
    const size_t next =
        static_cast<size_t>(std::min<uint64_t>(want, std::max<uint64_t>(have * 2, 1 << 20)));
    f.bytes.resize(next);
    const size_t n = in.read(f.bytes.data() + have, next - have);
    have += n;
    if (have < next) break;
  }
  if (have < want)
    idx_fail(path, "truncated: dims " + dims_str(f.dims) + " need " + std::to_string(want) +
                       " data bytes after the " + std::to_string(header) + "-byte header, got " +
                       std::to_string(have));
  unsigned char extra[4096];
  size_t trailing = 0;
  for (size_t n; (n = in.read(extra, sizeof extra)) > 0;) trailing += n;
  if (trailing > 0)
    idx_fail(path, std::to_string(trailing) + " unexpected bytes after the " +
                       std::to_string(want) + " data bytes that dims " + dims_str(f.dims) +
                       " describe");
  return f;
}

template <typename T, typename Raw>
void convert_be(const unsigned char* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    Raw r = 0;
    for (size_t b = 0; b < sizeof(Raw); ++b)
      r = static_cast<Raw>((r << 8) | src[i * sizeof(Raw) + b]);
    if constexpr (std::is_floating_point_v<T>) {
      T v;
      std::memcpy(&v, &r, sizeof v);
      dst[i] = v;
    } else {
      using S = std::make_signed_t<Raw>;
      dst[i] = static_cast<T>(static_cast<S>(r));
    }
  }
}

std::string find_file(const std::string& root, const std::string& name) {
  namespace fs = std::filesystem;
  for (const std::string& cand : {name, name + ".gz"}) {
    const fs::path p = fs::path(root) / cand;
    if (fs::exists(p)) return p.string();
  }
  fail("MNIST", "no ", name, " or ", name, ".gz in ", root);
}

}  // namespace

Tensor read_idx(const std::string& path) {
  IdxFile f = read_idx_raw(path);
  const int64_t n = checked_numel(f.dims, kOp);
  const unsigned char* src = f.bytes.data();
  switch (f.type) {
    case 0x08: {
      Tensor t = kiln::empty(f.dims, TensorOptions(DType::UInt8));
      if (n) std::memcpy(t.data(), src, static_cast<size_t>(n));
      return t;
    }
    case 0x09: {
      Tensor t = kiln::empty(f.dims, TensorOptions(DType::Int8));
      if (n) std::memcpy(t.data(), src, static_cast<size_t>(n));
      return t;
    }
    case 0x0B: {
      Tensor t = kiln::empty(f.dims, TensorOptions(DType::Int32));
      convert_be<int32_t, uint16_t>(src, t.data_ptr<int32_t>(), n);
      return t;
    }
    case 0x0C: {
      Tensor t = kiln::empty(f.dims, TensorOptions(DType::Int32));
      convert_be<int32_t, uint32_t>(src, t.data_ptr<int32_t>(), n);
      return t;
    }
    case 0x0D: {
      Tensor t = kiln::empty(f.dims, TensorOptions(DType::Float32));
      convert_be<float, uint32_t>(src, t.data_ptr<float>(), n);
      return t;
    }
    default: {
      Tensor t = kiln::empty(f.dims, TensorOptions(DType::Float64));
      convert_be<double, uint64_t>(src, t.data_ptr<double>(), n);
      return t;
    }
  }
}

Tensor read_mnist_images(const std::string& path) {
  IdxFile f = read_idx_raw(path);
  if (f.type != 0x08 || f.dims.size() != 3)
    idx_fail(path, "expected MNIST images (magic 0x00000803: ubyte, 3 dims), got type code " +
                       std::to_string(f.type) + " with dims " + dims_str(f.dims));
  const Dims sizes{f.dims[0], 1, f.dims[1], f.dims[2]};
  Tensor t = kiln::empty(sizes, TensorOptions(DType::Float32));
  float* dst = t.data_ptr<float>();
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(f.bytes[i]) / 255.0f;
  return t;
}

Tensor read_mnist_labels(const std::string& path, int64_t num_classes) {
  IdxFile f = read_idx_raw(path);
  if (f.type != 0x08 || f.dims.size() != 1)
    idx_fail(path, "expected MNIST labels (magic 0x00000801: ubyte, 1 dim), got type code " +
                       std::to_string(f.type) + " with dims " + dims_str(f.dims));
  Tensor t = kiln::empty(f.dims, TensorOptions(DType::Int64));
  int64_t* dst = t.data_ptr<int64_t>();
  for (int64_t i = 0; i < f.dims[0]; ++i) {
    dst[i] = f.bytes[i];
    if (dst[i] >= num_classes)
      idx_fail(path, "label " + std::to_string(dst[i]) + " at index " + std::to_string(i) +
                         " is out of range [0, " + std::to_string(num_classes) + ")");
  }
  return t;
}

MNIST::MNIST(const std::string& root, Mode mode) : train_(mode == Mode::kTrain) {
  const std::string prefix = train_ ? "train" : "t10k";
  const std::string ip = find_file(root, prefix + "-images-idx3-ubyte");
  const std::string lp = find_file(root, prefix + "-labels-idx1-ubyte");
  images_ = read_mnist_images(ip);
  targets_ = read_mnist_labels(lp);
  KILN_CHECK(images_.size(0) == targets_.size(0), "MNIST", ip, " has ", images_.size(0),
             " images but ", lp, " has ", targets_.size(0), " labels");
}

int64_t MNIST::size() const {
  return images_.size(0);
}

Example MNIST::get(int64_t index) const {
  KILN_CHECK(index >= 0 && index < size(), "MNIST", "index ", index, " is out of range [0, ",
             size(), ")");
  return {images_.select(0, index), targets_.select(0, index)};
}

Example MNIST::get_batch(std::span<const int64_t> indices) const {
  return TensorDataset(images_, targets_).get_batch(indices);
}

}  // namespace kiln::data

#include "io.h"

#include <zlib.h>

#include <cerrno>

namespace kiln::serialize_detail {

void Source::read_at(uint64_t offset, void* dst, uint64_t n, const char* op,
                     const std::string& what) {
  if (offset > size_ || n > size_ - offset)
    fail(op, name_, ": truncated: ", what, " needs bytes [", offset, ", ", offset + n,
         ") but the file has ", size_);
  if (n) read_raw(offset, dst, n);
}

FileSource::FileSource(const std::string& path, const char* op) : op_(op) {
  name_ = path;
  errno = 0;
  f_ = std::fopen(path.c_str(), "rb");
  if (!f_) fail(op, path, ": cannot open: ", errno ? std::strerror(errno) : "unknown error");
  if (std::fseek(f_, 0, SEEK_END) != 0) fail(op, path, ": cannot seek (not a regular file?)");
  const long end = std::ftell(f_);
  if (end < 0) fail(op, path, ": cannot tell the file size");
  size_ = static_cast<uint64_t>(end);
}

FileSource::~FileSource() {
  if (f_) std::fclose(f_);
}

void FileSource::read_raw(uint64_t offset, void* dst, uint64_t n) {
  if (std::fseek(f_, static_cast<long>(offset), SEEK_SET) != 0 || std::fread(dst, 1, n, f_) != n)
    fail(op_, name_, ": read error at byte ", offset, " (file changed while reading?)");
}

FileSink::FileSink(const std::string& path, const char* op) : path_(path), op_(op) {
  errno = 0;
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_) fail(op, path, ": cannot open for writing: ", errno ? std::strerror(errno) : "?");
}

FileSink::~FileSink() {
  if (f_) std::fclose(f_);
}

void FileSink::write(const void* p, uint64_t n) {
  if (n && std::fwrite(p, 1, n, f_) != n)
    fail(op_, path_, ": write failed: ", errno ? std::strerror(errno) : "?");
}

void FileSink::close() {
  std::FILE* f = f_;
  f_ = nullptr;
  if (f && std::fclose(f) != 0) fail(op_, path_, ": closing failed (disk full?)");
}

uint32_t crc32_of(const void* data, uint64_t n, uint32_t crc) {
  uLong c = crc;
  auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(n > (1u << 30) ? (1u << 30) : n);
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace kiln::serialize_detail

#pragma once
// Internal: bounded readers/writers shared by kiln::load, .npy and .safetensors. Every read names
// the file and what was being read when it runs past the end.

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/runtime/checked_math.h"
#include "kiln/runtime/error.h"

namespace kiln::serialize_detail {

static_assert(std::endian::native == std::endian::little,
              "kiln's file formats are little-endian; a big-endian host needs byte swaps here");

// Random-access bytes: a file or a memory buffer.
class Source {
 public:
  virtual ~Source() = default;
  uint64_t size() const { return size_; }
  const std::string& name() const { return name_; }
  // Reads exactly n bytes at `offset` (checked against size(); `what` names the read in errors).
  void read_at(uint64_t offset, void* dst, uint64_t n, const char* op, const std::string& what);

 protected:
  virtual void read_raw(uint64_t offset, void* dst, uint64_t n) = 0;
  std::string name_;
  uint64_t size_ = 0;
};

class FileSource final : public Source {
 public:
  FileSource(const std::string& path, const char* op);
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;

 private:
  void read_raw(uint64_t offset, void* dst, uint64_t n) override;
  std::FILE* f_ = nullptr;
  const char* op_;
};

class MemorySource final : public Source {
 public:
  MemorySource(const uint8_t* data, uint64_t n, std::string name) : data_(data) {
    size_ = n;
    name_ = std::move(name);
  }

 private:
  void read_raw(uint64_t offset, void* dst, uint64_t n) override {
    std::memcpy(dst, data_ + offset, n);
  }
  const uint8_t* data_;
};

// Sequential writer to a file; close() (or the destructor) flushes. Errors name the file.
class FileSink {
 public:
  FileSink(const std::string& path, const char* op);
  ~FileSink();
  FileSink(const FileSink&) = delete;
  FileSink& operator=(const FileSink&) = delete;
  void write(const void* p, uint64_t n);
  void close();

 private:
  std::string path_;
  const char* op_;
  std::FILE* f_ = nullptr;
};

inline void put_u8(std::vector<uint8_t>& b, uint8_t v) {
  b.push_back(v);
}
template <typename T>
inline void put_le(std::vector<uint8_t>& b, T v) {
  const size_t at = b.size();
  b.resize(at + sizeof(T));
  std::memcpy(b.data() + at, &v, sizeof(T));
}
template <typename T>
inline T get_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint32_t crc32_of(const void* data, uint64_t n, uint32_t crc = 0);

}  // namespace kiln::serialize_detail

#pragma once
// Dims: sizes and strides of a tensor. Inline storage for up to 6 dims so that creating a tensor of
// ordinary rank allocates nothing for its metadata (eager overhead is a tracked goal).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <span>
#include <vector>

namespace kiln {

class Dims {
 public:
  static constexpr size_t kInline = 6;

  Dims() = default;
  explicit Dims(size_t n, int64_t value = 0) { assign(n, value); }
  Dims(std::initializer_list<int64_t> values) { assign(values.begin(), values.end()); }
  Dims(std::span<const int64_t> values) { assign(values.begin(), values.end()); }
  Dims(const std::vector<int64_t>& values) { assign(values.begin(), values.end()); }
  Dims(const Dims& other) { assign(other.begin(), other.end()); }
  Dims(Dims&& other) noexcept { move_from(other); }
  Dims& operator=(const Dims& other) {
    if (this != &other) assign(other.begin(), other.end());
    return *this;
  }
  Dims& operator=(Dims&& other) noexcept {
    if (this != &other) {
      release();
      move_from(other);
    }
    return *this;
  }
  ~Dims() { release(); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t* data() { return data_; }
  const int64_t* data() const { return data_; }
  int64_t* begin() { return data_; }
  int64_t* end() { return data_ + size_; }
  const int64_t* begin() const { return data_; }
  const int64_t* end() const { return data_ + size_; }
  int64_t& operator[](size_t i) { return data_[i]; }
  const int64_t& operator[](size_t i) const { return data_[i]; }
  int64_t& back() { return data_[size_ - 1]; }
  int64_t back() const { return data_[size_ - 1]; }
  operator std::span<const int64_t>() const { return {data_, size_}; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }

  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    for (size_t i = size_; i < n; ++i) data_[i] = value;
    size_ = n;
  }
  void push_back(int64_t v) {
    if (size_ == capacity_) reserve(capacity_ * 2);
    data_[size_++] = v;
  }
  void insert(size_t pos, int64_t v) {
    push_back(0);
    std::memmove(data_ + pos + 1, data_ + pos, (size_ - 1 - pos) * sizeof(int64_t));
    data_[pos] = v;
  }
  void erase(size_t pos) {
    std::memmove(data_ + pos, data_ + pos + 1, (size_ - 1 - pos) * sizeof(int64_t));
    --size_;
  }
  void clear() { size_ = 0; }
  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto* heap = new int64_t[n];
    std::memcpy(heap, data_, size_ * sizeof(int64_t));
    if (data_ != inline_) delete[] data_;
    data_ = heap;
    capacity_ = n;
  }

  friend bool operator==(const Dims& a, const Dims& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend std::ostream& operator<<(std::ostream& os, const Dims& d) {
    os << '[';
    for (size_t i = 0; i < d.size_; ++i) os << (i ? ", " : "") << d.data_[i];
    return os << ']';
  }

 private:
  template <typename It>
  void assign(It first, It last) {
    size_ = 0;
    reserve(static_cast<size_t>(last - first));
    for (; first != last; ++first) data_[size_++] = *first;
  }
  void assign(size_t n, int64_t v) {
    size_ = 0;
    resize(n, v);
  }
  void release() {
    if (data_ != inline_) delete[] data_;
    data_ = inline_;
    capacity_ = kInline;
    size_ = 0;
  }
  void move_from(Dims& other) {
    if (other.data_ == other.inline_) {
      std::memcpy(inline_, other.inline_, other.size_ * sizeof(int64_t));
      data_ = inline_;
      capacity_ = kInline;
    } else {
      data_ = other.data_;
      capacity_ = other.capacity_;
      other.data_ = other.inline_;
      other.capacity_ = kInline;
    }
    size_ = other.size_;
    other.size_ = 0;
  }

  int64_t inline_[kInline];
  int64_t* data_ = inline_;
  size_t size_ = 0;
  size_t capacity_ = kInline;
};

}  // namespace kiln

#pragma once
// Reads the operand descriptor generated code passes to kiln_abi_* (layout in kiln/runtime/abi.h)
// into TensorImpls over the caller's memory, and the attributes that follow it.

#include <bit>
#include <cstring>
#include <exception>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/runtime/abi.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/kernels/conv.h"
#include "kiln/runtime/kernels/pool.h"
#include "kiln/runtime/tensor.h"

namespace kiln::abi {

class Args {
 public:
  Args(void* const* data, const int64_t* desc, const char* op);
  // Tensor i (inputs then outputs); null when absent.
  TensorImpl* opt(size_t i) const { return tensors_.at(i).get(); }
  TensorImpl& t(size_t i) const;
  // Operand i's shape when the caller described it but passed no data (a value the kernel
  // computes itself: a generated prologue's), else "<op>: expected ..." naming the operand.
  const Dims& shape_without_data(size_t i, DType want) const;
  size_t num_tensors() const { return tensors_.size(); }
  // Attributes, in order.
  int64_t i() { return *attr_++; }
  bool b() { return *attr_++ != 0; }
  double f() { return std::bit_cast<double>(*attr_++); }
  std::span<const int64_t> arr() {
    const int64_t n = *attr_++;
    std::span<const int64_t> s(attr_, static_cast<size_t>(n));
    attr_ += n;
    return s;
  }
  // A string: its byte count, then the bytes packed 8 to a word.
  std::string_view str() {
    const int64_t n = *attr_++;
    std::string_view s(reinterpret_cast<const char*>(attr_), static_cast<size_t>(n));
    attr_ += (n + 7) / 8;
    return s;
  }

 private:
  std::vector<TensorImplPtr> tensors_;
  // Operands described without data (rare: no allocation otherwise): index, dtype, sizes.
  struct Unbacked {
    size_t index;
    int64_t dtype;
    Dims sizes;
  };
  std::vector<Unbacked> unbacked_;
  const int64_t* attr_ = nullptr;
  const char* op_;
};

// Runs fn, turning a thrown error into the thread's recorded ABI error.
template <typename Fn>
void guarded(const char* op, Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    kiln_abi_set_error(e.what());
  } catch (...) {
    kiln_abi_set_error(op);
  }
}

// A convolution's stride, padding, dilation (2 values each) and groups, in the schema's order.
inline kernels::Conv2dParams conv2d_params(Args& a) {
  kernels::Conv2dParams p;
  auto s = a.arr();
  auto pad = a.arr();
  auto d = a.arr();
  p.stride_h = s[0], p.stride_w = s[1];
  p.pad_h = pad[0], p.pad_w = pad[1];
  p.dilation_h = d[0], p.dilation_w = d[1];
  p.groups = a.i();
  return p;
}

// A pool's kernel, stride (empty: the kernel), padding, dilation (max pooling only), ceil_mode
// and count_include_pad (average pooling only), in the schema's order.
inline kernels::Pool2dParams pool2d_params(Args& a, bool max) {
  kernels::Pool2dParams p;
  auto k = a.arr();
  auto s = a.arr();
  auto pad = a.arr();
  p.kernel_h = k[0], p.kernel_w = k.size() > 1 ? k[1] : k[0];
  if (!s.empty()) p.stride_h = s[0], p.stride_w = s.size() > 1 ? s[1] : s[0];
  p.pad_h = pad[0], p.pad_w = pad.size() > 1 ? pad[1] : pad[0];
  if (max) {
    auto d = a.arr();
    p.dilation_h = d[0], p.dilation_w = d.size() > 1 ? d[1] : d[0];
  }
  p.ceil_mode = a.b();
  if (!max) p.count_include_pad = a.b();
  return p;
}

}  // namespace kiln::abi

// Defines kiln_abi_<name>(data, desc) running the body (the rest of the arguments, so commas
// need no protection) with `a`, the decoded Args, in scope.
#define KILN_ABI_OP(name, ...)                                              \
  extern "C" void kiln_abi_##name(void* const* data, const int64_t* desc) { \
    ::kiln::abi::guarded(#name, [&] {                                       \
      ::kiln::abi::Args a(data, desc, #name);                               \
      __VA_ARGS__;                                                          \
    });                                                                     \
  }

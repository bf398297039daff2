#pragma once
// kiln::Tensor — the user's handle: one pointer to a runtime TensorImpl (storage, sizes, strides,
// offset, dtype) plus autograd metadata. Copying a Tensor shares the data, as in PyTorch.

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <optional>
#include <source_location>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "kiln/runtime/dtype.h"
#include "kiln/runtime/error.h"
#include "kiln/runtime/small_vector.h"
#include "kiln/runtime/tensor.h"

namespace kiln {

namespace autograd {
class Node;
struct AutogradMeta;
}  // namespace autograd

class Tensor;
namespace dispatch {
class TraceHook;
namespace detail {
extern thread_local TraceHook* active_hook;
// Tells the active tracer that `t`'s memory was handed out raw (see Tensor::data_ptr).
void note_raw_access(const Tensor& t, const std::source_location& where);
}  // namespace detail
}  // namespace dispatch

struct TensorOptions {
  DType dtype_ = DType::Float32;
  bool requires_grad_ = false;
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d) {}
  TensorOptions dtype(DType d) const {
    auto o = *this;
    o.dtype_ = d;
    return o;
  }
  TensorOptions requires_grad(bool r = true) const {
    auto o = *this;
    o.requires_grad_ = r;
    return o;
  }
};

// Index helpers for Tensor::index: Slice(start, stop, step) with std::nullopt meaning "to the end",
// an integer selects (drops the dim), None inserts a dim, Ellipsis spans the rest.
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  Slice(std::optional<int64_t> start_ = std::nullopt, std::optional<int64_t> stop_ = std::nullopt,
        int64_t step_ = 1)
      : start(start_), stop(stop_), step(step_) {}
};
struct NoneIndex {};
struct EllipsisIndex {};
inline constexpr NoneIndex None{};
inline constexpr EllipsisIndex Ellipsis{};
using TensorIndex = std::variant<int64_t, Slice, NoneIndex, EllipsisIndex>;

class Tensor;
using TensorList = std::vector<Tensor>;
using Hook = std::function<std::optional<Tensor>(const Tensor& grad)>;
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(TensorImplPtr impl) : impl_(std::move(impl)) {}

  bool defined() const { return static_cast<bool>(impl_); }
  TensorImpl* impl() const { return impl_.get(); }
  const TensorImplPtr& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // --- metadata
  const Dims& sizes() const { return checked().sizes(); }
  const Dims& strides() const { return checked().strides(); }
  int64_t size(int64_t dim) const { return checked().size(dim); }
  int64_t stride(int64_t dim) const { return checked().stride(dim); }
  int64_t dim() const { return checked().dim(); }
  int64_t numel() const { return checked().numel(); }
  DType dtype() const { return checked().dtype(); }
  Device device() const { return checked().device(); }
  bool is_cuda() const { return device() == Device::CUDA; }
  bool is_contiguous() const { return checked().is_contiguous(); }
  bool is_floating_point() const { return is_floating(dtype()); }
  size_t element_size() const { return checked().itemsize(); }
  int64_t storage_offset() const { return checked().storage_offset(); }
  // Raw access to the elements. Under tracing the tracer cannot see what is done through the
  // pointer: it remembers the bytes, and a tensor whose bytes changed that way and then reaches
  // the trace is an error naming this call's location (jit::mark_constant accepts it as a
  // constant).
  template <typename T>
  T* data_ptr(std::source_location where = std::source_location::current()) const {
    KILN_CHECK(dtype_of<T> == dtype(), "data_ptr", "expected dtype ", dtype_of<T>, ", tensor has ",
               dtype());
    T* p = checked().data_ptr<T>();  // refuses device memory before the tracer reads the bytes
    if (dispatch::detail::active_hook) [[unlikely]]
      dispatch::detail::note_raw_access(*this, where);
    return p;
  }
  void* data(std::source_location where = std::source_location::current()) const {
    void* p = checked().data();  // refuses device memory before the tracer reads the bytes
    if (dispatch::detail::active_hook) [[unlikely]]
      dispatch::detail::note_raw_access(*this, where);
    return p;
  }
  // The single value of a one-element tensor, converted to T. Under tracing this is a read-back:
  // the tracer records a guard and warns with the caller's location.
  template <typename T>
  T item(std::source_location where = std::source_location::current()) const {
    return static_cast<T>(item_double(where));
  }
  double item_double(std::source_location where = std::source_location::current()) const;

  // --- conversion and copies
  Tensor to(DType dtype) const;
  // A copy on `device` (this tensor when already there); differentiable: the gradient returns to
  // this tensor's device. CUDA: kiln::Error "no CUDA device: ..." where there is none.
  Tensor to(Device device) const;
  Tensor cuda() const { return to(Device::CUDA); }
  Tensor cpu() const { return to(Device::CPU); }
  Tensor clone() const;
  Tensor detach() const;  // shares data, no history
  Tensor contiguous() const;

  // --- views (share storage; differentiable)
  Tensor view(std::span<const int64_t> sizes) const;
  Tensor view(std::initializer_list<int64_t> sizes) const { return view(Dims(sizes)); }
  Tensor reshape(std::span<const int64_t> sizes) const;
  Tensor reshape(std::initializer_list<int64_t> sizes) const { return reshape(Dims(sizes)); }
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor permute(std::span<const int64_t> order) const;
  Tensor permute(std::initializer_list<int64_t> order) const { return permute(Dims(order)); }
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(std::span<const int64_t> sizes) const;
  Tensor expand(std::initializer_list<int64_t> sizes) const { return expand(Dims(sizes)); }
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(std::span<const int64_t> sizes, std::span<const int64_t> strides,
                    int64_t storage_offset) const;
  Tensor index(std::initializer_list<TensorIndex> indices) const;

  // --- method forms of common ops (same semantics as the free functions in ops.h)
  Tensor sum() const;
  Tensor sum(std::initializer_list<int64_t> dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(std::initializer_list<int64_t> dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor neg() const;
  Tensor relu() const;
  Tensor sigmoid() const;
  Tensor tanh() const;
  Tensor pow(double exponent) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor add(const Tensor& other, double alpha = 1.0) const;
  Tensor sub(const Tensor& other, double alpha = 1.0) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double other);
  Tensor& add_(double other);
  Tensor& div_(const Tensor& other);
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);

  // --- autograd
  bool requires_grad() const;
  Tensor& requires_grad_(bool requires_grad = true);
  // Accumulated gradient of a leaf (or of a non-leaf after retain_grad()); undefined if none.
  Tensor grad() const;
  Tensor& mutable_grad();
  void set_grad(const Tensor& g);
  bool is_leaf() const;
  std::shared_ptr<autograd::Node> grad_fn() const;
  uint32_t output_nr() const;
  void backward(const Tensor& grad_output = {}, bool retain_graph = false,
                bool create_graph = false) const;
  void retain_grad() const;
  bool retains_grad() const;
  // Runs on the gradient of this tensor when it is computed; returning a tensor replaces it.
  // Returns a handle for remove_hook.
  size_t register_hook(Hook hook) const;
  void remove_hook(size_t handle) const;
  // Runs on a leaf after backward accumulated into its .grad (PyTorch's
  // register_post_accumulate_grad_hook): the argument is the leaf, its grad() the new sum.
  // Returns a handle for remove_hook.
  size_t register_post_accumulate_grad_hook(PostAccumulateGradHook hook) const;
  uint64_t version() const { return checked().storage()->version(); }

  autograd::AutogradMeta* autograd_meta() const;
  autograd::AutogradMeta& ensure_autograd_meta() const;

 private:
  const TensorImpl& checked() const {
    if (!impl_) [[unlikely]]
      fail("Tensor", "operation on an undefined tensor");
    return *impl_;
  }
  TensorImplPtr impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

}  // namespace kiln

// Method forms of common ops: thin forwards to the free functions, so both spellings PyTorch
// users know (x.sum() and sum(x)) reach the same dispatch point.

#include "kiln/ops.h"
#include "kiln/tensor.h"

namespace kiln {

Tensor Tensor::sum() const {
  return kiln::sum(*this);
}
Tensor Tensor::sum(std::initializer_list<int64_t> dims, bool keepdim) const {
  return kiln::sum(*this, Dims(dims), keepdim);
}
Tensor Tensor::mean() const {
  return kiln::mean(*this);
}
Tensor Tensor::mean(std::initializer_list<int64_t> dims, bool keepdim) const {
  return kiln::mean(*this, Dims(dims), keepdim);
}
Tensor Tensor::max() const {
  return kiln::max(*this);
}
Tensor Tensor::min() const {
  return kiln::min(*this);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return kiln::argmax(*this, dim, keepdim);
}
Tensor Tensor::abs() const {
  return kiln::abs(*this);
}
Tensor Tensor::exp() const {
  return kiln::exp(*this);
}
Tensor Tensor::log() const {
  return kiln::log(*this);
}
Tensor Tensor::sqrt() const {
  return kiln::sqrt(*this);
}
Tensor Tensor::neg() const {
  return kiln::neg(*this);
}
Tensor Tensor::relu() const {
  return kiln::relu(*this);
}
Tensor Tensor::sigmoid() const {
  return kiln::sigmoid(*this);
}
Tensor Tensor::tanh() const {
  return kiln::tanh(*this);
}
Tensor Tensor::pow(double exponent) const {
  return kiln::pow(*this, exponent);
}
Tensor Tensor::softmax(int64_t dim) const {
  return kiln::softmax(*this, dim);
}
Tensor Tensor::log_softmax(int64_t dim) const {
  return kiln::log_softmax(*this, dim);
}
Tensor Tensor::matmul(const Tensor& other) const {
  return kiln::matmul(*this, other);
}
Tensor Tensor::mm(const Tensor& other) const {
  return kiln::mm(*this, other);
}
Tensor Tensor::add(const Tensor& other, double alpha) const {
  return kiln::add(*this, other, alpha);
}
Tensor Tensor::sub(const Tensor& other, double alpha) const {
  return kiln::sub(*this, other, alpha);
}
Tensor Tensor::mul(const Tensor& other) const {
  return kiln::mul(*this, other);
}
Tensor Tensor::div(const Tensor& other) const {
  return kiln::div(*this, other);
}
Tensor& Tensor::add_(const Tensor& other, double alpha) {
  return kiln::add_(*this, other, alpha);
}
Tensor& Tensor::sub_(const Tensor& other, double alpha) {
  return kiln::sub_(*this, other, alpha);
}
Tensor& Tensor::mul_(const Tensor& other) {
  return kiln::mul_(*this, other);
}
Tensor& Tensor::mul_(double other) {
  return kiln::mul_(*this, other);
}
Tensor& Tensor::add_(double other) {
  return kiln::add_(*this, other);
}
Tensor& Tensor::div_(const Tensor& other) {
  return kiln::div_(*this, other);
}
Tensor& Tensor::zero_() {
  return kiln::zero_(*this);
}
Tensor& Tensor::fill_(double value) {
  return kiln::fill_(*this, value);
}
Tensor& Tensor::copy_(const Tensor& src) {
  return kiln::copy_(*this, src);
}

}  // namespace kiln

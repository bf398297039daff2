#pragma once
// KILN_NN_ARG(T, name): a chainable option with a getter, as PyTorch's TORCH_ARG:
//   Conv2dOptions(3, 64, 7).stride(2).padding(3).bias(false)

#define KILN_NN_ARG(T, name)       \
 public:                           \
  auto& name(const T& new_value) { \
    this->name##_ = new_value;     \
    return *this;                  \
  }                                \
  const T& name() const {          \
    return name##_;                \
  }                                \
                                   \
 private:                          \
  T name##_

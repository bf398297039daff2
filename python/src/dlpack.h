#pragma once
// The DLPack tensor-exchange ABI (https://dmlc.github.io/dlpack, v0.8 layout), written from its
// specification: what PyTorch's torch.utils.dlpack and NumPy's from_dlpack read and write through
// a PyCapsule named "dltensor" (renamed "used_dltensor" by the consumer that takes ownership).

#include <cstdint>

namespace kiln::python::dlpack {

enum DeviceType : int32_t { kCPU = 1 };
enum TypeCode : uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kBool = 6 };

struct Device {
  int32_t device_type;
  int32_t device_id;
};

struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct Tensor {
  void* data;
  Device device;
  int32_t ndim;
  DataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: row-major
  uint64_t byte_offset;
};

struct ManagedTensor {
  Tensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(ManagedTensor* self);
};

}  // namespace kiln::python::dlpack

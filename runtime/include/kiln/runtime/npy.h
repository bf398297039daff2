#pragma once
// .npy files for programs that link only kiln_runtime (the AOT executable's main, devices): raw
// bytes + dtype + shape, no Tensor. The eager frontend has its own Tensor-level read_npy
// (kiln/serialize.h); this one is deliberately minimal and strict.
//
// Reads format versions 1.0, 2.0 and 3.0, C order, dtypes f2 f4 f8 i1 u1 i4 i8 b1, little-endian
// or byte-order-free. Every length is checked against the file before it is used; anything else
// (Fortran order, big-endian, truncated data, trailing bytes) is a kiln::Error naming the file.

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime/dtype.h"

namespace kiln::npy {

struct Array {
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // numel() * dtype_size(dtype) bytes, C order, little-endian
  int64_t numel() const;
};

// `name` only labels error messages.
Array parse(const uint8_t* bytes, size_t size, const std::string& name);
Array read(const std::string& path);
// Writes version 1.0 (2.0 when the header would not fit); bfloat16 has no NumPy dtype: refused.
std::vector<uint8_t> serialize(DType dtype, const std::vector<int64_t>& shape, const void* data);
void write(const std::string& path, DType dtype, const std::vector<int64_t>& shape,
           const void* data);

}  // namespace kiln::npy

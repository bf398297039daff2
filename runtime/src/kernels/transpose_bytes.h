#pragma once
// A byte matrix transposed in 16 x 16 register blocks (transpose_bytes.cpp): the int8
// kernels' layout changes (NCHW <-> channels-last) and copies of permuted byte tensors.

#include <cstdint>

namespace kiln::kernels {

// d[c * ld + r] = s[r * ls + c] ^ flip for r < rows, c < cols (flip 0x80: int8 <-> uint8 as
// v + 128).
void transpose_bytes(const uint8_t* s, int64_t ls, uint8_t* d, int64_t ld, int64_t rows,
                     int64_t cols, uint8_t flip);

}  // namespace kiln::kernels

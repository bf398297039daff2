#include "kiln/runtime/dtype.h"

#include <cmath>

namespace kiln {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Int8: return "int8";
    case DType::UInt8: return "uint8";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Bool: return "bool";
  }
  return "invalid";
}

std::string_view dtype_short_name(DType t) {
  switch (t) {
    case DType::Float32: return "f32";
    case DType::Float64: return "f64";
    case DType::Float16: return "f16";
    case DType::BFloat16: return "bf16";
    case DType::Int8: return "i8";
    case DType::UInt8: return "u8";
    case DType::Int32: return "i32";
    case DType::Int64: return "i64";
    case DType::Bool: return "bool";
  }
  return "invalid";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float64:
    case DType::Int64: return 8;
    case DType::Float32:
    case DType::Int32: return 4;
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int8:
    case DType::UInt8:
    case DType::Bool: return 1;
  }
  return 0;
}

bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}

bool is_integral(DType t, bool include_bool) {
  switch (t) {
    case DType::Int8:
    case DType::UInt8:
    case DType::Int32:
    case DType::Int64: return true;
    case DType::Bool: return include_bool;
    default: return false;
  }
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  const bool fa = is_floating(a), fb = is_floating(b);
  if (fa != fb) return fa ? a : b;
  if (fa) {
    if (a == DType::Float64 || b == DType::Float64) return DType::Float64;
    if (a == DType::Float32 || b == DType::Float32) return DType::Float32;
    return DType::Float32;  // f16 with bf16
  }
  // Two distinct integer types.
  if (a == DType::Int64 || b == DType::Int64) return DType::Int64;
  return DType::Int32;  // int8/uint8/int32 mixes: int32 holds them all (no int16 dtype)
}

// IEEE binary16 conversions with round-to-nearest-even, subnormals, inf and NaN.
uint16_t Half::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {                                                // subnormal or zero
    // Scale into the subnormal range, letting the FPU do the rounding.
    float af;
    std::memcpy(&af, &abs, 4);
    const float scaled = af * 16777216.0f;  // 2^24: one subnormal ulp becomes 1.0
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  abs += 0xc8000fffu + mant_odd;  // rebias exponent (-112 << 23) and round to nearest even
  return static_cast<uint16_t>(sign | (abs >> 13));
}

float Half::to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    float f = std::ldexp(static_cast<float>(mant), -24);
    std::memcpy(&out, &f, 4);
    out |= sign;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

}  // namespace kiln

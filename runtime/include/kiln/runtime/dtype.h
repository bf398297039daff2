#pragma once
// Element types. float16 and bfloat16 are storage formats: kernels convert to float32 to compute.

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string_view>

namespace kiln {

enum class DType : uint8_t {
  Float32 = 0,
  Float64 = 1,
  Float16 = 2,
  BFloat16 = 3,
  Int8 = 4,
  UInt8 = 5,
  Int32 = 6,
  Int64 = 7,
  Bool = 8,
};
inline constexpr int kNumDTypes = 9;

// Short names match PyTorch's (f32 in messages, "float32" in APIs).
std::string_view dtype_name(DType t);
std::string_view dtype_short_name(DType t);
size_t dtype_size(DType t);
bool is_floating(DType t);
bool is_integral(DType t, bool include_bool = false);
inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// NumPy/PyTorch-style promotion of two tensor dtypes: bool < integers < floating; among floats the
// wider wins and f16+bf16 -> f32; int8+uint8 -> int16 does not exist here, so it goes to int32.
DType promote_types(DType a, DType b);

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays a quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                      // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <typename T>
struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::Float32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::Float64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::Float16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::BFloat16; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct DTypeOf<bool> { static constexpr DType value = DType::Bool; };
template <typename T>
inline constexpr DType dtype_of = DTypeOf<T>::value;

// Calls fn(T{}) with T the C++ type of `t`. Kernels use it to instantiate once per dtype.
template <typename Fn>
decltype(auto) visit_dtype(DType t, Fn&& fn) {
  switch (t) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(Half{});
    case DType::BFloat16: return fn(BFloat16{});
    case DType::Int8: return fn(int8_t{});
    case DType::UInt8: return fn(uint8_t{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::Bool: return fn(bool{});
  }
  return fn(float{});
}

}  // namespace kiln

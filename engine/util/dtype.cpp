// The dtypes' names and sizes (recur/dtype.h).
#include "recur/dtype.h"

#include <cmath>
#include <cstring>

#include "util/check.h"

namespace recur {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kI64: return "I64";
  }
  return "?";
}

int dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI8:
    case DType::kU8: return 1;
    case DType::kI64: return 8;
  }
  return 1;
}

bool is_float_dtype(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

DType parse_dtype(const std::string& name) {
  if (name == "F32" || name == "f32" || name == "float32") return DType::kF32;
  if (name == "F16" || name == "f16" || name == "float16") return DType::kF16;
  if (name == "BF16" || name == "bf16" || name == "bfloat16") return DType::kBF16;
  detail::throw_argument("parse_dtype", "dtype '{}' is not one of f32, f16, bf16", name);
}

std::uint16_t float_to_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

float bf16_to_float(std::uint16_t x) {
  const std::uint32_t u = static_cast<std::uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

std::uint16_t float_to_f16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {  // below the smallest normal: a subnormal or zero
    // Scale into the subnormal grid (2^-24 per step) and let float arithmetic round to even.
    float af;
    std::memcpy(&af, &a, 4);
    const float scaled = af * 16777216.0f;  // exact: a power of two
    const auto q = static_cast<std::uint32_t>(std::nearbyint(scaled));
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t m = a - 0x38000000u;  // rebias the exponent from 127 to 15
  m += 0xfffu + ((m >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | (m >> 13));
}

float f16_to_float(std::uint16_t x) {
  const std::uint32_t sign = static_cast<std::uint32_t>(x & 0x8000u) << 16;
  const std::uint32_t exp = (x >> 10) & 0x1fu;
  const std::uint32_t man = x & 0x3ffu;
  std::uint32_t u;
  if (exp == 0) {
    const float f = static_cast<float>(man) * 5.9604644775390625e-8f;  // man * 2^-24, exact
    std::memcpy(&u, &f, 4);
    u |= sign;
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp + 112u) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace recur

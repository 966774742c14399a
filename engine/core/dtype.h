// Element types the engine stores and computes with, and exact conversions between them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace manyshot {

// kI32 is for index tensors (token ids, positions, gathered rows) only; the others are floats.
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI32 = 3 };

constexpr size_t DTypeSize(DType t) { return t == DType::kF32 || t == DType::kI32 ? 4 : 2; }

constexpr bool IsFloat(DType t) { return t != DType::kI32; }

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
  }
  return "?";
}

// bf16 is the top half of an IEEE f32; widening is exact.
inline float BF16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even narrowing; NaN stays NaN (quiet).
inline uint16_t F32ToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

// IEEE half to float, exact for every input including subnormals, inf and NaN.
inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Float to IEEE half with round-to-nearest-even; overflow gives inf.
inline uint16_t F32ToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = abs >> 23;
    uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;  // 14 + (113 - e) - ... places the value as a half subnormal
    uint32_t half_m = m >> (shift - 0);
    uint32_t rem = m & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_m & 1u))) ++half_m;
    return static_cast<uint16_t>(sign | half_m);
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even on the dropped 13 bits
  return static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

}  // namespace manyshot

// Stand-in for cuda_bf16.h in the SIMT emulation build: bfloat16 with the engine's exact
// conversions (engine/core/dtype.h), round to nearest even as __float2bfloat16_rn.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"

struct __nv_bfloat16 {
  uint16_t bits;
};

struct __nv_bfloat162 {
  __nv_bfloat16 x, y;  // x in the low 16 bits, as in CUDA
};

inline float __bfloat162float(__nv_bfloat16 h) { return manyshot::BF16ToF32(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{manyshot::F32ToBF16(f)}; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi) {
  return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}

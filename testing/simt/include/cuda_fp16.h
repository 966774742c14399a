// Stand-in for cuda_fp16.h in the SIMT emulation build: IEEE half with the engine's exact
// conversions (engine/core/dtype.h), round to nearest even as __float2half_rn.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"

struct __half {
  uint16_t bits;
};

struct __half2 {
  __half x, y;  // x in the low 16 bits, as in CUDA
};

inline float __half2float(__half h) { return manyshot::F16ToF32(h.bits); }
inline __half __float2half_rn(float f) { return __half{manyshot::F32ToF16(f)}; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
inline __half2 __floats2half2_rn(float lo, float hi) {
  return __half2{__float2half_rn(lo), __float2half_rn(hi)};
}

// Device helpers shared by the attention kernels (attention_kernels.cu,
// biased_attention_kernels.cu): element loads and stores of any ElemType through f32, the SFU exp2,
// and warp reductions. CUDA runtime headers only (no absl, gRPC or spdlog). Included by .cu files
// only.
//
// Logits inside the kernels are in log2 units (x = logit * log2(e), exp2 on the SFU); lse is
// converted back to natural log on output: lse = (max2 + log2(sum)) * ln(2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_kernels.h"  // ElemType

namespace manyshot::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float NegInf() { return __int_as_float(0xff800000); }

// 2^x on the SFU; ex2.approx.ftz(-inf) = +0, which the online softmax relies on.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float LoadAsFloat(const void* base, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::kF16:
      return __half2float(static_cast<const __half*>(base)[i]);
    case ElemType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ void StoreFromFloat(void* base, ElemType t, int64_t i, float x) {
  switch (t) {
    case ElemType::kF16:
      static_cast<__half*>(base)[i] = __float2half_rn(x);
      break;
    case ElemType::kBF16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(x);
      break;
    default:
      static_cast<float*>(base)[i] = x;
      break;
  }
}

template <typename KV>
__device__ __forceinline__ float KvToFloat(KV x) {
  if constexpr (std::is_same_v<KV, __half>) {
    return __half2float(x);
  } else if constexpr (std::is_same_v<KV, __nv_bfloat16>) {
    return __bfloat162float(x);
  } else {
    return x;
  }
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

}  // namespace manyshot::cuda

// Device helpers shared by the attention kernels (attention_kernels.cu,
// biased_attention_kernels.cu): element loads and stores of any ElemType through f32, warp
// reductions, and the tile steps of the two f32-tile kernels (GenericKernel, BiasedKernel).
// CUDA runtime headers only (no absl, gRPC or spdlog). Included by .cu files only.
//
// Logits inside the kernels are in log2 units (x = logit * log2(e), exp2 on the SFU); lse is
// converted back to natural log on output: lse = (max2 + log2(sum)) * ln(2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "engine/cuda/attention_kernels.h"   // ElemType
#include "engine/cuda/launch.cuh"            // LaunchResult
#include "engine/cuda/ptx_instructions.cuh"  // Exp2

namespace manyshot::cuda {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ float NegInf() { return __int_as_float(0xff800000); }

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

// ---------------------------------------------------------------------------------------------
// Pieces of the f32-tile kernels (attention_kernels.cu's GenericKernel and BiasedKernel): a block
// of warps, kRows M rows per warp; per tile of kBn keys, K and V converted to f32 in shared memory
// (K rows at a stride of dp + 1 words, so lane j reading key j is conflict-free; V rows at dp),
// lane j computes the logits of key n0 + j for its warp's rows, the warp reduces max / sum by
// shuffles (online softmax, log2 units) and P goes through shared memory into O, where lane l
// owns dims l, l + 32, ... (kLaneDims of them: head_dim <= 256).

constexpr int kLaneDims = 8;

// head_dim rounded up to whole warps: the row stride of s_q and s_v (and dp + 1 of s_k).
__host__ __device__ constexpr int PaddedDim(int head_dim) { return (head_dim + 31) / 32 * 32; }

// s_q[r][d] = q element d of M row r (off = s_off[r]: q row * heads + head), or 0 for a row
// past the problem (off < 0).
template <int kBm, int kThreads>
__device__ __forceinline__ void LoadQTile(const void* q, ElemType q_type, const int64_t* s_off,
                                          int dim, int dp, float* s_q) {
  for (int idx = threadIdx.x; idx < kBm * dim; idx += kThreads) {
    const int r = idx / dim;
    const int d = idx - r * dim;
    const int64_t off = s_off[r];
    s_q[r * dp + d] = off >= 0 ? LoadAsFloat(q, q_type, off * dim + d) : 0.0f;
  }
}

// Keys [n0, n0 + kBn) of one kv head (k_base / v_base: key 0 of that head; kv_stride: elements
// per key) into s_k [kBn][dp + 1] and s_v [kBn][dp]; keys at or past ke are zeros.
template <int kBn, int kThreads, typename KV>
__device__ __forceinline__ void LoadKvTile(const KV* k_base, const KV* v_base, int64_t kv_stride,
                                           int n0, int ke, int dim, int dp, float* s_k,
                                           float* s_v) {
  const int ldk = dp + 1;
  for (int idx = threadIdx.x; idx < kBn * dim; idx += kThreads) {
    const int r = idx / dim;
    const int d = idx - r * dim;
    const int j = n0 + r;
    float kx = 0.0f, vx = 0.0f;  // keys past the range: zeros (masked by the caller anyway)
    if (j < ke) {
      const int64_t off = static_cast<int64_t>(j) * kv_stride + d;
      kx = KvToFloat(k_base[off]);
      vx = KvToFloat(v_base[off]);
    }
    s_k[r * ldk + d] = kx;
    s_v[r * dp + d] = vx;
  }
}

// sc[rr] = q.k of the warp's row rr (s_q_rows: s_q of its first row) and this lane's key of the
// tile, summed over d in order by fmaf.
template <int kRows>
__device__ __forceinline__ void TileDots(const float* s_q_rows, const float* s_k, int lane, int dim,
                                         int dp, float (&sc)[kRows]) {
#pragma unroll
  for (int rr = 0; rr < kRows; ++rr) sc[rr] = 0.0f;
  const float* kr = s_k + lane * (dp + 1);
  for (int d = 0; d < dim; ++d) {
    const float kd = kr[d];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) sc[rr] = fmaf(s_q_rows[rr * dp + d], kd, sc[rr]);
  }
}

// Online-softmax step of one M row for this tile (x: this lane's logit in log2 units, -inf when
// masked; the whole warp takes part): updates the running max m_run, this lane's partial sum l_run
// and rescales the row's O accumulators; returns this lane's p = exp2(x - max).
__device__ __forceinline__ float OnlineSoftmaxStep(float x, float& m_run, float& l_run,
                                                   float (&o)[kLaneDims]) {
  const float m_new = fmaxf(m_run, WarpMax(x));
  const float m_use = m_new == NegInf() ? 0.0f : m_new;  // no NaN from -inf - -inf
  const float corr = Exp2(m_run - m_use);
  m_run = m_new;
  const float pv = Exp2(x - m_use);
  l_run = l_run * corr + pv;
#pragma unroll
  for (int t = 0; t < kLaneDims; ++t) o[t] *= corr;
  return pv;
}

// O += P V over the first n_here keys of the tile (s_p_rows: the warp's rows of s_p [.][kBn],
// published by __syncwarp; keys past the range have p = 0, so the caller skips them).
template <int kRows, int kBn>
__device__ __forceinline__ void AccumulatePv(const float* s_v, const float* s_p_rows, int n_here,
                                             int dp, int lane, float (&o)[kRows][kLaneDims]) {
  for (int jj = 0; jj < n_here; ++jj) {
    const float* vr = s_v + jj * dp;
    float pj[kRows];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) pj[rr] = s_p_rows[rr * kBn + jj];
#pragma unroll
    for (int t = 0; t < kLaneDims; ++t) {
      if (t * 32 < dp) {
        const float vd = vr[lane + t * 32];  // columns >= dim: never stored, never used
#pragma unroll
        for (int rr = 0; rr < kRows; ++rr) o[rr][t] = fmaf(pj[rr], vd, o[rr][t]);
      }
    }
  }
}

// 1 / l (0 for a row that saw no key) and the row's lse in natural log (-inf for no key), from
// the warp's total l and the running max m_run (log2 units).
struct RowTotals {
  float inv;
  float lse;
};

__device__ __forceinline__ RowTotals FinishRow(float m_run, float l) {
  RowTotals r;
  r.inv = l > 0.0f ? 1.0f / l : 0.0f;
  // l > 0 implies a visible key with a finite logit, hence a finite m_run.
  r.lse = l > 0.0f ? (m_run + log2f(l)) * kLn2 : NegInf();
  return r;
}

// Stores this lane's dims of one normalised O row (element off * dim + d of o).
__device__ __forceinline__ void StoreORow(void* o, ElemType o_type, int64_t off, int dim, int lane,
                                          const float (&acc)[kLaneDims], float inv) {
#pragma unroll
  for (int t = 0; t < kLaneDims; ++t) {
    const int d = lane + t * 32;
    if (d < dim) StoreFromFloat(o, o_type, off * dim + d, acc[t] * inv);
  }
}

}  // namespace manyshot::cuda

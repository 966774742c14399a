// Launch interface of biased attention: attention whose logits carry an additive bias. Plain C++
// and the CUDA runtime only (no absl, gRPC or spdlog). It serves two backend ops:
//   Backend::AttendBiased (T5, SAICL): a dense f32 bias [heads, q_len, kv_len], its diagonals
//     [heads, q_len + kv_len - 1] (bias[h, r, j] = relative_bias[h, j - r + q_len - 1]), or none;
//     every key visible except where the bias is -inf. CPU reference:
//     engine/cpu/cpu_biased_attention.cc.
//   ALiBi in Backend::AttendOwn / AttendContext (BLOOM): slope[h] * (key position - query
//     position) on every visible key, with the own keys' causal rule and log-weight. CPU
//     reference: engine/cpu/cpu_attention.cc.
//
// One problem is a run of query rows that share one set of keys. Row c of a problem (q row
// q_begin + c) of q head h (kv head h / (heads / kv_heads)) gets, for each visible key j:
//   logit = cap(scale * q.k_j) + (j >= weighted_from ? log_weight : 0) + bias(h, c, j)
// (cap(x) = softcap * tanh(x / softcap) when softcap > 0, else x)
// with bias(h, c, j) by bias_kind:
//   kNone      0
//   kDense     bias[(h * rows + c) * num_keys + j]
//   kRelative  bias[h * (rows + num_keys - 1) + j - c + rows - 1]
//   kAlibi     slopes[h] * float(key_pos[j] - query_pos[c])
// Key j is visible to row c when j < num_keys and, if causal_base >= 0, j <= causal_base + c.
// Outputs, as the other attention kernels: o [tokens, heads, head_dim] in o_type, normalised;
// lse [tokens, heads] f32, natural log of the sum of exp(logit); o = 0 and lse = -inf for a row
// that saw no key (no keys, or every logit -inf). Logits and sums in f32; K/V of any ElemType,
// [rows, kv_heads, head_dim] contiguous; head_dim in [1, 256].
//
// Two kernels. 16-bit K/V of head_dim 64, 80 or 128, 16-byte aligned (what the CUDA default
// stores): attention_kernels.cu's tensor-core flash kernel, with the bias as its score variant
// (attention_variants.cuh: T5BiasVariant for kDense / kRelative / kNone, AlibiVariant), split-K
// included. Everything else (f32 K/V, other head_dims, misaligned views, a launch mixing ALiBi
// with tables): BiasedKernel (biased_attention_kernels.cu), one key per lane, 32-key tiles staged
// as f32 in shared memory, no split over keys; correct for any shape rather than fast.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/attention_kernels.h"  // ElemType

namespace manyshot::cuda {

enum class BiasKind : int32_t { kNone = 0, kDense = 1, kRelative = 2, kAlibi = 3 };

struct BiasedProblem {
  int32_t q_begin = 0;
  int32_t rows = 0;
  int32_t num_keys = 0;
  int32_t causal_base = -1;           // >= 0: row c sees keys j <= causal_base + c only
  int32_t weighted_from = INT32_MAX;  // keys >= weighted_from get log_weight
  float log_weight = 0.0f;
  BiasKind bias_kind = BiasKind::kNone;
  const void* k = nullptr;  // [>= num_keys, kv_heads, head_dim] of kv_type
  const void* v = nullptr;
  const float* bias = nullptr;         // kDense / kRelative (device memory)
  const float* slopes = nullptr;       // kAlibi: f32 [heads] (device memory)
  const int32_t* key_pos = nullptr;    // kAlibi: [num_keys]
  const int32_t* query_pos = nullptr;  // kAlibi: [rows], row c's position
};

// Problems per launch: the descriptors travel by value as a kernel parameter (no upload).
constexpr int kMaxBiasedProblems = 128;

struct BiasedAttnParams {
  const void* q = nullptr;
  ElemType q_type = ElemType::kF32;
  int32_t tokens = 0;
  int32_t heads = 0;
  int32_t kv_heads = 0;  // of every problem's K/V
  int32_t head_dim = 0;
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: Gemma 2's soft-capping of scale * q.k (no model pairs it today)
  void* o = nullptr;
  ElemType o_type = ElemType::kF32;
  float* lse = nullptr;               // may be null (then not written)
  ElemType kv_type = ElemType::kF32;  // of every problem's K/V
  int32_t num_problems = 0;           // <= kMaxBiasedProblems
  BiasedProblem problems[kMaxBiasedProblems];
};

// Writes o and lse for every row of every problem; rows of q in no problem are left untouched.
// cudaErrorInvalidValue for arguments it cannot handle (the backend checks them first and names
// the problem); otherwise the launch error, if any.
cudaError_t LaunchBiasedAttention(const BiasedAttnParams& p, cudaStream_t stream);

// The scalar kernel whatever the K/V (the reference the tensor-core path is tested against).
cudaError_t LaunchBiasedAttentionScalar(const BiasedAttnParams& p, cudaStream_t stream);

// Whether K/V of this type and head_dim run the tensor-core path (when 16-byte aligned).
bool BiasedFlashApplies(ElemType kv_type, int head_dim);

// Whether the tensor-core path takes every problem of p: BiasedFlashApplies, 16-byte aligned
// K/V, num_keys + rows < 2^30, and not ALiBi and bias tables in one launch.
bool BiasedFlashTakes(const BiasedAttnParams& p);

// The tensor-core path alone (attention_kernels.cu), for params LaunchBiasedAttention accepts;
// cudaErrorInvalidValue (nothing launched) where BiasedFlashTakes is false.
cudaError_t LaunchBiasedFlashAttention(const BiasedAttnParams& p, cudaStream_t stream);

}  // namespace manyshot::cuda

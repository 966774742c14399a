// Attention of one new token (decode) to its sequence's own keys, for every head at once. Per
// head this is a matrix-vector product over the cached keys, bound by reading K and V once; one
// head's rows are short pieces of a long stride ([capacity, kv_heads, head_dim]), which the
// hardware prefetchers do not follow, so instead each thread takes a contiguous range of keys
// and reads whole key rows (all kv heads) front to back, keeping an online softmax per head;
// the threads' partial states are merged by their log-sum-exp at the end (split-K).
#pragma once

#include <cstdint>

#include "engine/core/tensor.h"
#include "engine/cpu/thread_pool.h"

namespace manyshot::cpu_internal {

// Whether AttendOneToken handles this head dimension (multiples of 16 up to 256, on every vector
// target; not on the scalar one).
bool DecodeKernelSupports(int64_t head_dim);

// q [heads, head_dim] (one token; heads a multiple of k's kv_heads) against keys [0, kv_len) of
// k/v ([capacity, kv_heads, head_dim], f32, bf16 or f16): logits scale * q.k, soft-capped to
// softcap * tanh(logit / softcap) when softcap > 0 (Gemma 2), plus log_weight for keys >=
// weighted_from. Writes out [heads, head_dim] normalised and lse [heads] (natural log).
// kv_len >= 1.
void AttendOneToken(ThreadPool& pool, const float* q, int64_t heads, const Tensor& k,
                    const Tensor& v, int64_t kv_len, int64_t weighted_from, float log_weight,
                    float scale, float softcap, float* out, float* lse);

}  // namespace manyshot::cpu_internal

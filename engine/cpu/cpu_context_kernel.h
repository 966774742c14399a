// Register-tiled attention of many query rows to a long shared context (structured prompting's
// encoded demonstrations): the shape that dominates a structured query, where a few dozen rows
// per head meet tens of thousands of keys. OpenBLAS sgemm on these shapes (M = the rows, N = a key
// tile, K = the head dimension) spends most of its time packing; these kernels read the context
// in its own layout instead:
//   Q·Kᵀ: scores[key, row] accumulate k[key, d] (broadcast) times a transposed, pre-scaled query
//         block qᵀ[d, rows] of two vectors of rows (32 with AVX-512, 16 with AVX2), 8 keys (6
//         with 16 registers) in 16 (12) accumulators;
//   P·V:  out[row, :] accumulates p[key, row] (broadcast) times v[key, :], several rows and up to
//         8 (2) vectors of columns at once;
// with an online softmax between them, vectorised across the rows; soft-capped logits (Gemma 2)
// are an instantiation of the same kernels (simd-inl.h's logit policies). Compiled for each
// instruction set and dispatched at run time (cpu_target.h). A key tile (any storage dtype; 16-bit
// K/V are loaded as 16 bits and widened once per tile) is reused by every row block of the call
// while it sits in L2. f32 accumulation throughout.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/cpu/thread_pool.h"

namespace manyshot::cpu_internal {

// Whether AttendContextRows handles this head dimension (multiples of 16 up to 128, on every
// vector target; not on the scalar one); otherwise callers use the sgemm path.
bool ContextKernelSupports(int64_t head_dim);

// Per-thread buffers, grown on first use and reused across calls.
struct ContextScratch {
  std::vector<float> q_t, scores, k_tile, v_tile, o, max, sum;
};

// Exact softmax attention of the query rows of `tokens` tokens x `group` heads (the heads that
// share `kv_head`; row (t, g) at q + t * q_ld + g * head_dim) to keys [0, len) of `kv_head` of the
// context k/v ([len, kv_heads, head_dim], f32, bf16 or f16): logits scale * q.k, soft-capped to
// softcap * tanh(logit / softcap) when softcap > 0 (Gemma 2); out rows normalised (same addressing
// with out_ld), lse the natural log-sum-exp of the logits at lse[t * lse_ld + g]. Every row of the
// group reads each key tile while it is in cache. len >= 1.
void AttendContextRows(const float* q, int64_t q_ld, int64_t tokens, int64_t group, const Tensor& k,
                       const Tensor& v, int64_t kv_head, int64_t len, float scale, float softcap,
                       float* out, int64_t out_ld, float* lse, int64_t lse_ld,
                       ContextScratch& scratch);

// Most query rows per kv head for which AttendContextSplitKeys is the faster path: with few rows
// the work per key is small and reading the context is what bounds it.
constexpr int64_t kSplitKeysMaxRows = 64;

// The same attention for every head at once, for few query rows (tokens x group <=
// kSplitKeysMaxRows): threads take ranges of keys instead of heads and read whole key rows (every
// kv head) in memory order, one sequential stream the hardware prefetchers follow, where one
// head's rows are short pieces of a long stride that they do not; the ranges' states are merged
// by their log-sum-exp. q and out [tokens, heads, head_dim], lse [tokens, heads], contiguous.
void AttendContextSplitKeys(ThreadPool& pool, const float* q, int64_t tokens, int64_t heads,
                            const Tensor& k, const Tensor& v, int64_t len, float scale,
                            float softcap, float* out, float* lse);

}  // namespace manyshot::cpu_internal

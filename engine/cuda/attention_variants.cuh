// Score transforms of the tensor-core flash kernel (attention_kernels.cu), one policy per
// attention variant, after FlashInfer's attention variants: the kernel's tiles, pipeline, masks,
// online softmax and split-K are shared; a variant only says what is added to a logit.
//
// Every variant keeps the kernel's own transform first: scale * q.k in log2 units, or Gemma 2's
// soft-capping of it when the launch sets a cap (so ALiBi and T5 bias with soft-capping come for
// free), then the own keys' log-weight. A variant then adds, in log2 units:
//   PlainVariant     nothing (GQA / MHA models, structured prompting's groups)
//   T5BiasVariant    a per-head f32 table looked up per (query row, key): T5's relative position
//                    bias as one bucketed value per diagonal (key - query), or a dense bias
//                    (SAICL's block masks, -inf where a key is hidden)
//   AlibiVariant     slope[head] * (key position - query position) (BLOOM)
// Interface of a variant V, used by FlashKernel:
//   V::kAddsBias           false: the kernel keeps its per-tile fast path (no per-element work
//                          below the mask boundary) and takes KernelParams; true: it takes the
//                          parameters with a ProblemBias per problem (`bias[prob]`)
//   V::Row                 what a row needs, built once per accumulator row by
//                          MakeRow(p, prob, c, h) (c: row in the problem, h: q head; only for
//                          rows of the problem)
//   V::Bias(p, prob, row, j)  the addition to key j's logit, log2 units; visible keys only
// CUDA runtime headers only (no absl, gRPC or spdlog). Included by .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/cuda/attention_kernels.h"  // kMaxAttnSequences

namespace manyshot::cuda {

// Per problem, the bias of the biased variants (one entry per problem of the launch).
struct ProblemBias {
  // T5BiasVariant: row c of q head h reads table + h * head_stride + c * row_stride + base,
  // indexed by key j (dense: [heads, rows, keys]; diagonals: [heads, rows + keys - 1] with
  // row_stride -1, so key j of row c is diagonal j - c + rows - 1). Null: no bias.
  const float* table;
  int64_t head_stride;
  int64_t base;
  int32_t row_stride;
  // AlibiVariant: slopes [heads], key positions [keys], query positions [rows].
  const float* slopes;
  const int32_t* key_pos;
  const int32_t* query_pos;
};

constexpr float kVariantLog2e = 1.4426950408889634f;

struct PlainVariant {
  static constexpr bool kAddsBias = false;
  struct Row {};
  template <typename P>
  __device__ __forceinline__ static Row MakeRow(const P&, int, int, int) {
    return Row{};
  }
  template <typename P>
  __device__ __forceinline__ static float Bias(const P&, int, const Row&, int) {
    return 0.0f;
  }
};

struct T5BiasVariant {
  static constexpr bool kAddsBias = true;
  struct Row {
    const float* bias;  // indexed by key; null: this problem has no bias
  };
  template <typename P>
  __device__ __forceinline__ static Row MakeRow(const P& p, int prob, int c, int h) {
    const ProblemBias& b = p.bias[prob];
    if (b.table == nullptr) return Row{nullptr};
    return Row{b.table + h * b.head_stride + static_cast<int64_t>(c) * b.row_stride + b.base};
  }
  template <typename P>
  __device__ __forceinline__ static float Bias(const P&, int, const Row& r, int j) {
    return r.bias != nullptr ? r.bias[j] * kVariantLog2e : 0.0f;
  }
};

struct AlibiVariant {
  static constexpr bool kAddsBias = true;
  struct Row {
    float slope;  // natural-log units, as the CPU multiplies it
    int32_t query_pos;
  };
  template <typename P>
  __device__ __forceinline__ static Row MakeRow(const P& p, int prob, int c, int h) {
    const ProblemBias& b = p.bias[prob];
    return Row{b.slopes[h], b.query_pos[c]};
  }
  template <typename P>
  __device__ __forceinline__ static float Bias(const P& p, int prob, const Row& r, int j) {
    return r.slope * static_cast<float>(p.bias[prob].key_pos[j] - r.query_pos) * kVariantLog2e;
  }
};

}  // namespace manyshot::cuda

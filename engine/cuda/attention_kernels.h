// Launch interface of the rescaled-attention kernels (attention_kernels.cu). Plain C++ and the CUDA
// runtime only: no absl, gRPC or spdlog, so the .cu files that implement it stay free of them.
//
// Semantics are exactly Backend::AttendOwn / AttendContext (engine/core/backend.h), whose CPU
// implementation (engine/cpu/cpu_attention.cc) is the reference:
//   own:     row r of sequence s (own index i = kv_len - q_len + r) attends to own keys j <= i;
//            logit = scale * q.k + (j >= weighted_from ? own_log_weight : 0).
//   context: every row of every sequence whose own index i >= context_from attends to all
//            context keys [0, context_len), logit = scale * q.k (no log-weight: the caller merges
//            with it); other rows get o = 0, lse = -inf.
// Outputs: o [tokens, heads, head_dim] in o_type, normalised; lse [tokens, heads] f32, natural log
// of the sum of exp(logit) (-inf and o = 0 for a row that saw no key). GQA: q head h reads kv head
// h / (heads / kv_heads). All K/V tensors are [rows, kv_heads, head_dim] contiguous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace manyshot::cuda {

enum class ElemType : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

struct AttnSequence {
  int32_t q_begin = 0;
  int32_t q_len = 0;
  int32_t kv_len = 0;
  int32_t weighted_from = 0;
  int32_t context_from = 0;
  float own_log_weight = 0.0f;
  const void* k = nullptr;  // own keys of this sequence (AttendOwn only)
  const void* v = nullptr;
};

// Sequences per launch: the descriptors travel by value as a kernel parameter (no upload).
constexpr int kMaxAttnSequences = 128;

struct AttnParams {
  const void* q = nullptr;
  ElemType q_type = ElemType::kF32;
  int32_t tokens = 0;
  int32_t heads = 0;
  int32_t kv_heads = 0;
  int32_t head_dim = 0;  // any value in [1, 256]; fast paths for 64, 80, 128
  float scale = 1.0f;
  // > 0: every logit scale * q.k becomes softcap * tanh(logit / softcap) before log-weights and
  // masks (Gemma 2's attn_logit_softcapping), own and context keys alike.
  float softcap = 0.0f;
  void* o = nullptr;
  ElemType o_type = ElemType::kF32;
  float* lse = nullptr;
  ElemType kv_type = ElemType::kF32;  // own K/V (AttendOwn) or context K/V (AttendContext)
  int32_t num_sequences = 0;          // <= kMaxAttnSequences
  AttnSequence sequences[kMaxAttnSequences];
};

// Rows of q not covered by any sequence are left untouched. Returns the launch error, if any.
cudaError_t LaunchAttendOwn(const AttnParams& p, cudaStream_t stream);

// context_k/v: [context_len, kv_heads, head_dim] of p.kv_type. May allocate stream-ordered scratch
// (cudaMallocAsync) for split-K partial states.
cudaError_t LaunchAttendContext(const AttnParams& p, const void* context_k, const void* context_v,
                                int64_t context_len, cudaStream_t stream);

}  // namespace manyshot::cuda

// The CUDA backend's attention with an additive bias, on the kernels of
// biased_attention_kernels.h (the tensor-core flash kernel with the bias as its variant for
// 16-bit K/V of head_dim 64, 80 or 128; the scalar BiasedKernel otherwise): AttendBiased (T5's
// relative positions and masks, SAICL's block masks: a dense bias, its diagonals, or none) and
// ALiBi attention (BLOOM), which Attend (cuda_backend.cc) routes here when the sequences carry
// slopes. CPU references: engine/cpu/cpu_biased_attention.cc and engine/cpu/cpu_attention.cc.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "engine/cuda/biased_attention_kernels.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {

using cuda_internal::CudaCheck;
using cuda_internal::ElemTypeOf;

namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// Collects problems into launches of at most kMaxBiasedProblems, each with one K/V dtype and
// kv_heads (a launch is flushed when the next problem's differ).
class BiasedLauncher {
 public:
  BiasedLauncher(const char* op, const Tensor& q, float scale, const AttentionState& out,
                 cudaStream_t stream)
      : op_(op), stream_(stream), p_(std::make_unique<cuda::BiasedAttnParams>()) {
    p_->q = q.raw();
    p_->q_type = ElemTypeOf(q.dtype());
    p_->tokens = static_cast<int32_t>(q.dim(0));
    p_->heads = static_cast<int32_t>(q.dim(1));
    p_->head_dim = static_cast<int32_t>(q.dim(2));
    p_->scale = scale;
    p_->o = out.o.raw();
    p_->o_type = ElemTypeOf(out.o.dtype());
    p_->lse = out.lse.data<float>();
  }

  absl::Status Add(const cuda::BiasedProblem& problem, int64_t kv_heads, DType kv_dtype) {
    if (problem.rows == 0) return absl::OkStatus();
    const cuda::ElemType kv_type = ElemTypeOf(kv_dtype);
    if (p_->num_problems > 0 && (kv_heads != p_->kv_heads || kv_type != p_->kv_type)) {
      absl::Status s = Flush();
      if (!s.ok()) return s;
    }
    p_->kv_heads = static_cast<int32_t>(kv_heads);
    p_->kv_type = kv_type;
    p_->problems[p_->num_problems++] = problem;
    if (p_->num_problems == cuda::kMaxBiasedProblems) return Flush();
    return absl::OkStatus();
  }

  absl::Status Flush() {
    if (p_->num_problems == 0) return absl::OkStatus();
    const cudaError_t error = cuda::LaunchBiasedAttention(*p_, stream_);
    p_->num_problems = 0;
    return CudaCheck(op_, error);
  }

 private:
  const char* op_;
  cudaStream_t stream_;
  std::unique_ptr<cuda::BiasedAttnParams> p_;  // ~11 KiB: on the heap
};

// What the kernel cannot take, named: 32-bit row and head counts, head_dim in [1, 256].
absl::Status CheckQuery(const char* op, const Tensor& q) {
  if (q.dim(0) > kInt32Max || q.dim(1) > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": q ", q.ShapeString(), " exceeds 32-bit row/head counts"));
  }
  if (q.dim(2) < 1 || q.dim(2) > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": head_dim ", q.dim(2), " is outside [1, 256]"));
  }
  return absl::OkStatus();
}

// A sequence's M rows (rows x the q heads of one kv head) must fit the kernel's 32-bit indices.
absl::Status CheckRows(const char* op, size_t s, int64_t q_len, int64_t heads, int64_t kv_heads) {
  if (kv_heads <= 0 || kv_heads > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": sequence ", s, ": ", kv_heads, " kv heads (at most 65535)"));
  }
  if (q_len * (heads / kv_heads) > kInt32Max / 2) {
    return absl::InvalidArgumentError(absl::StrCat("cuda ", op, ": sequence ", s, ": ", q_len,
                                                   " rows x ", heads / kv_heads,
                                                   " heads per kv head exceed 2^30"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaBackend::AttendBiasedImpl(const Tensor& q,
                                           absl::Span<const BiasedAttentionSequence> sequences,
                                           float scale, const AttentionState& out) {
  const char* op = "AttendBiased";
  absl::Status s = CheckQuery(op, q);
  if (!s.ok()) return s;
  const int64_t heads = q.dim(1);
  for (size_t i = 0; i < sequences.size(); ++i) {
    if (sequences[i].q_len == 0) continue;
    s = CheckRows(op, i, sequences[i].q_len, heads, sequences[i].k->dim(1));
    if (!s.ok()) return s;
  }
  auto state = context_->State();
  if (!state.ok()) return state.status();
  BiasedLauncher launcher(op, q, scale, out, (*state)->stream);
  for (const BiasedAttentionSequence& seq : sequences) {
    if (seq.q_len == 0) continue;
    cuda::BiasedProblem pr;
    pr.q_begin = static_cast<int32_t>(seq.q_begin);
    pr.rows = static_cast<int32_t>(seq.q_len);
    pr.num_keys = static_cast<int32_t>(seq.kv_len);
    pr.k = seq.k->raw();
    pr.v = seq.v->raw();
    if (seq.bias != nullptr) {
      pr.bias_kind = cuda::BiasKind::kDense;
      pr.bias = seq.bias->data<float>();
    } else if (seq.relative_bias != nullptr) {
      pr.bias_kind = cuda::BiasKind::kRelative;
      pr.bias = seq.relative_bias->data<float>();
    }
    s = launcher.Add(pr, seq.k->dim(1), seq.k->dtype());
    if (!s.ok()) return s;
  }
  return launcher.Flush();
}

absl::Status CudaBackend::AttendAlibi(const Tensor& q,
                                      absl::Span<const AttentionSequence> sequences,
                                      const AttentionContext* context, float scale,
                                      const AttentionState& out, cudaStream_t stream) {
  const char* op = context == nullptr ? "AttendOwn" : "AttendContext";
  absl::Status s = CheckQuery(op, q);
  if (!s.ok()) return s;
  const int64_t heads = q.dim(1);
  if (context != nullptr && context->len > kInt32Max) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda ", op, ": ", context->len, " context keys exceed 2^31 - 1"));
  }
  for (size_t i = 0; i < sequences.size(); ++i) {
    const AttentionSequence& seq = sequences[i];
    if (seq.q_len == 0) continue;
    s = CheckRows(op, i, seq.q_len, heads, context != nullptr ? context->k->dim(1) : seq.k->dim(1));
    if (!s.ok()) return s;
  }
  BiasedLauncher launcher(op, q, scale, out, stream);
  for (const AttentionSequence& seq : sequences) {
    if (seq.q_len == 0) continue;
    const int64_t base = seq.kv_len - seq.q_len;  // own index of row 0
    const int32_t* positions = seq.positions->data<int32_t>();
    cuda::BiasedProblem pr;
    pr.bias_kind = cuda::BiasKind::kAlibi;
    pr.slopes = seq.alibi_slopes->data<float>();
    pr.query_pos = positions + base;
    if (context == nullptr) {
      // Own keys: causal, ln(weight) on keys >= weighted_from (clamping to [0, kv_len] keeps
      // the meaning and fits any int64 sentinel in int32).
      pr.q_begin = static_cast<int32_t>(seq.q_begin);
      pr.rows = static_cast<int32_t>(seq.q_len);
      pr.num_keys = static_cast<int32_t>(seq.kv_len);
      pr.causal_base = static_cast<int32_t>(base);
      pr.weighted_from =
          static_cast<int32_t>(std::clamp<int64_t>(seq.weighted_from, 0, seq.kv_len));
      pr.log_weight = seq.own_log_weight;
      pr.k = seq.k->raw();
      pr.v = seq.v->raw();
      pr.key_pos = positions;
      s = launcher.Add(pr, seq.k->dim(1), seq.k->dtype());
      if (!s.ok()) return s;
      continue;
    }
    // Context keys: rows whose own index is below context_from see none (o = 0, lse = -inf: a
    // problem without keys); the others see all of them. The slopes are the first sequence's,
    // as on the CPU (every sequence of a call carries the model's).
    const int64_t first = std::clamp<int64_t>(seq.context_from - base, 0, seq.q_len);
    pr.slopes = sequences.front().alibi_slopes->data<float>();
    pr.q_begin = static_cast<int32_t>(seq.q_begin);
    pr.rows = static_cast<int32_t>(first);
    pr.num_keys = 0;
    s = launcher.Add(pr, context->k->dim(1), context->k->dtype());
    if (!s.ok()) return s;
    pr.q_begin = static_cast<int32_t>(seq.q_begin + first);
    pr.rows = static_cast<int32_t>(seq.q_len - first);
    pr.num_keys = static_cast<int32_t>(context->len);
    pr.k = context->k->raw();
    pr.v = context->v->raw();
    pr.key_pos = context->positions->data<int32_t>();
    pr.query_pos = positions + base + first;
    s = launcher.Add(pr, context->k->dim(1), context->k->dtype());
    if (!s.ok()) return s;
  }
  return launcher.Flush();
}

}  // namespace manyshot

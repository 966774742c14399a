// The device-neutral compute interface. Model code (engine/transformer) calls only these ops, so a
// CUDA backend (cuBLAS + our kernels) slots in beside the CPU one without touching models.
//
// Conventions: activations are f32, row-major, first dimension = token rows. Weights may be stored
// f32 (the CPU backend converts at load). Every op may run asynchronously on the backend's stream;
// Synchronize() waits. Host memory is only touched through CopyToHost / CopyFromHost.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "engine/core/tensor.h"

namespace manyshot {

// How a Linear weight is laid out in memory.
enum class WeightLayout : uint8_t {
  kOutIn = 0,  // [out, in]: torch.nn.Linear (Llama family): y = x W^T
  kInOut = 1,  // [in, out]: GPT-2 Conv1D: y = x W
};

// One sequence of the batch in an attention call. Its query rows are q[q_begin, q_begin + q_len);
// its own keys/values are rows [0, kv_len) of k/v (shape [capacity, kv_heads, head_dim]); the query
// rows are its last q_len keys, and each attends causally to its own keys up to and including
// itself.
struct AttentionSequence {
  int64_t q_begin = 0;
  int64_t q_len = 0;
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  int64_t kv_len = 0;
  // ln(weight) added to the logits of own keys with index >= weighted_from (structured prompting:
  // ln M on the query's own non-bos tokens). 0 = plain attention.
  float own_log_weight = 0.0f;
  int64_t weighted_from = 0;
  // Query rows whose own index (kv_len - q_len + r) is < context_from do not see the shared context
  // (the query's bos attends only to itself).
  int64_t context_from = 0;
};

// Keys/values shared by every sequence of the call (a task's encoded demonstrations), attended
// with weight 1 (log-weight `log_weight`) by every query row at or after its context_from.
struct AttentionContext {
  const Tensor* k = nullptr;  // [len, kv_heads, head_dim]
  const Tensor* v = nullptr;
  int64_t len = 0;
  float log_weight = 0.0f;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual std::string name() const = 0;         // "cpu", "cuda"
  virtual std::string description() const = 0;  // threads, BLAS kernel / GPU name
  virtual int threads() const = 0;

  // Memory.
  virtual Tensor Allocate(DType dtype, std::vector<int64_t> shape) = 0;
  virtual void CopyFromHost(const void* src, const Tensor& dst) = 0;
  virtual void CopyToHost(const Tensor& src, void* dst) = 0;
  virtual void Copy(const Tensor& src, const Tensor& dst) = 0;  // same bytes, same device
  virtual void Synchronize() = 0;

  // out[t] = table[ids[t]] (accumulate: out[t] += table[ids[t]]). ids are validated by the caller.
  virtual void Embedding(absl::Span<const int32_t> ids, const Tensor& table, const Tensor& out,
                         bool accumulate) = 0;
  // out[t] = x[rows[t]].
  virtual void GatherRows(const Tensor& x, absl::Span<const int64_t> rows, const Tensor& out) = 0;
  virtual void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) = 0;
  virtual void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                         const Tensor& out) = 0;
  // out = x W (+ bias), x [T, in], out [T, out]; bias may be undefined.
  virtual void Linear(const Tensor& x, const Tensor& weight, WeightLayout layout,
                      const Tensor& bias, const Tensor& out) = 0;
  // Rotate-half RoPE in place on x [T, heads, head_dim] at the given positions.
  virtual void Rope(const Tensor& x, absl::Span<const int32_t> positions, float theta) = 0;
  virtual void GeluTanh(const Tensor& x) = 0;  // in place
  // out = silu(gate) * up where gate_up [T, 2I] holds gate in columns [0, I) and up in [I, 2I).
  virtual void SwiGlu(const Tensor& gate_up, const Tensor& out) = 0;
  // Splits the columns of qkv [T, q + k + v] into q [T, ...], k, v (each contiguous).
  virtual void SplitQkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) = 0;
  virtual void Add(const Tensor& x, const Tensor& y) = 0;  // x += y
  // Attention of q [T, heads, head_dim] (already scaled by nothing: `scale` applies to logits).
  // Writes out [T, heads, head_dim] and, when lse is defined, the natural-log sum-exp of the
  // weighted logits per row and head into lse [T, heads].
  virtual void Attention(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                         const AttentionContext* context, float scale, const Tensor& out,
                         const Tensor& lse) = 0;
};

}  // namespace manyshot

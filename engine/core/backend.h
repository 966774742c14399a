// The device-neutral compute interface. Model code (engine/transformer) calls only these ops, so
// the CUDA backend (engine/cuda: cuBLASLt + our kernels) and the CPU reference (engine/cpu) are
// interchangeable under the same model code.
//
// Fronts and implementations (the shape of CTranslate2's ops/*.cc): every public op below is a
// thin, non-virtual front (engine/core/backend.cc) that checks shapes, dtypes and devices and only
// then dispatches to the backend's protected *Impl. A mismatch is an error, never memory
// corruption.
//
// Errors. Allocation returns absl::StatusOr (out-of-memory is routine on a GPU). Ops return void
// and record the first error of the calling thread (a failed check in a front, a launch or
// runtime error in an implementation); later ops on that thread still run their checks but
// dispatch nothing until the error is collected. Synchronize() waits for the calling thread's
// work, then returns and clears that error; CopyToHost synchronizes and returns it too. So
// every sequence of ops ends in Synchronize() or CopyToHost(), whose status the caller checks.
// An error its thread never collected is dropped when that thread ends.
//
// Concurrency. A backend may be used from several host threads at once (the server encodes tasks
// on one thread while its scheduler runs query batches on another). Each host thread has its own
// stream of work (the CUDA backend: one cudaStream_t, cuBLASLt workspace and error per thread) and
// its own sticky error, so encoding and query batches never race on one stream. (The CUDA
// backend's stream and workspace are leased to a thread for its lifetime and serve a later thread
// after it ends, so they number at most the threads that use the device at the same time.)
// Tensors handed from one thread to another (an encoded context) must be complete: the producing
// thread synchronizes before publishing them, as every Transformer::Forward does.
//
// Dtypes. Activations and weights use one compute dtype per model (f32 on the CPU; bf16 or f16
// on the GPU with f32 accumulation), K/V may use another (the KV dtype), index arguments are
// kI32 device tensors uploaded once per forward pass. Each op states what it accepts.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/rope_table.h"
#include "engine/core/tensor.h"

namespace manyshot {

// How a Linear weight is laid out in memory.
enum class WeightLayout : uint8_t {
  kOutIn = 0,  // [out, in]: torch.nn.Linear (Llama family): y = x W^T
  kInOut = 1,  // [in, out]: GPT-2 Conv1D: y = x W
};

// An activation applied to a Linear's output (LinearActivation).
enum class GemmActivation : uint8_t {
  kGeluTanh = 0,  // as GeluTanh
  kRelu = 1,      // as Relu
};

// One sequence of the batch in an attention call. Its query rows are q[q_begin, q_begin + q_len);
// its own keys/values are rows [0, kv_len) of k/v (shape [capacity, kv_heads, head_dim], any
// float dtype, k and v alike); the query rows are its last q_len keys, and each attends causally
// to its own keys up to and including itself.
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
  // ALiBi (BLOOM): when alibi_slopes (f32 [heads]) is set, slope[h] * (key position - query
  // position) is added to head h's logits, for own and context keys alike. `positions` (kI32,
  // >= kv_len rows) holds the own keys' position ids; query row r is own key kv_len - q_len + r,
  // so its position is positions[kv_len - q_len + r]. Every sequence of a call sets both or none.
  const Tensor* alibi_slopes = nullptr;
  const Tensor* positions = nullptr;
  // Soft-capping (Gemma 2's attn_logit_softcapping): when > 0, every logit scale * q.k becomes
  // cap * tanh(logit / cap) before log-weights, ALiBi and masks are added, for own and context
  // keys alike. Every sequence of a call sets the same value.
  float logit_softcap = 0.0f;
};

// Keys/values shared by every sequence of the call (a task's encoded demonstrations), attended
// with log-weight `log_weight` by every query row at or after its context_from.
struct AttentionContext {
  const Tensor* k = nullptr;  // [len, kv_heads, head_dim], any float dtype (k and v alike)
  const Tensor* v = nullptr;
  int64_t len = 0;
  float log_weight = 0.0f;
  // kI32 (>= len rows): the keys' position ids; required when the sequences use ALiBi.
  const Tensor* positions = nullptr;
};

// One sequence of an AttendBiased call: query rows q[q_begin, q_begin + q_len) against rows
// [0, kv_len) of k/v ([capacity, kv_heads, head_dim], any float dtype, k and v alike). Every key
// is visible to every row (no implicit causality): masks are -inf entries of the bias.
struct BiasedAttentionSequence {
  int64_t q_begin = 0;
  int64_t q_len = 0;
  const Tensor* k = nullptr;
  const Tensor* v = nullptr;
  int64_t kv_len = 0;
  // f32 [heads, q_len, kv_len], contiguous, added to scale * q.k; -inf hides a key. nullptr: no
  // bias (T5's cross-attention). Several sequences may share one bias tensor.
  const Tensor* bias = nullptr;
  // Or, for a bias that depends on the key index minus the query row only (T5's relative
  // positions and causal mask), its diagonals: f32 [heads, q_len + kv_len - 1] with
  // bias[h, r, j] = relative_bias[h, j - r + q_len - 1], O(q + k) memory instead of O(q k).
  // At most one of bias and relative_bias.
  const Tensor* relative_bias = nullptr;
};

// The result of attending a set of query rows to some set of keys, as a value (FlashInfer's
// state_t): o [T, heads, head_dim] normalised over those keys, and lse [T, heads] (f32) the
// natural-log sum of exp(logit) over them; lse = -inf (and o = 0) where a row saw no key. Two
// states over disjoint key sets merge exactly into the state over their union (MergeStates).
struct AttentionState {
  Tensor o;
  Tensor lse;
};

namespace backend_internal {

// The first error per host thread, by a number no other thread of the process ever gets
// (std::thread::id values are reused after a thread ends, and an error a thread left untaken must
// not fail a later thread). An entry stays until its thread synchronizes or ends.
struct ThreadErrors {
  std::mutex mutex;
  std::unordered_map<uint64_t, absl::Status> by_thread;
};

}  // namespace backend_internal

// Ops recorded once on a backend that can (Backend::SupportsCapture: a CUDA graph) and run again
// as one unit: every replay reads and writes the very tensors the recorded ops named, with the
// same shapes and scalar arguments, so a caller changes what a replay computes only by writing
// new values into those tensors first.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  virtual int device_index() const { return 0; }
  virtual std::string name() const = 0;         // "cpu", "cuda"
  virtual std::string description() const = 0;  // threads, BLAS kernel / GPU name and memory
  virtual int threads() const = 0;
  // The compute dtype a model uses on this backend unless told otherwise.
  virtual DType default_compute_dtype() const = 0;
  // Whether activations/weights of this dtype are supported (the CPU computes in f32 only).
  virtual bool SupportsComputeDType(DType dtype) const = 0;
  // Whether matrix weights (Linear weights, Embedding tables) may be held in `weights` while
  // activations are in `compute`: the backend widens them inside its kernels (half the bytes
  // read per token at decode). By default weights are in the compute dtype.
  virtual bool SupportsWeightDType(DType compute, DType weights) const {
    return weights == compute;
  }

  // ---- Memory ----
  // Device memory, uninitialised. RESOURCE_EXHAUSTED when the device is out of memory.
  absl::StatusOr<Tensor> Allocate(DType dtype, std::vector<int64_t> shape);
  // Host memory for staging transfers (page-locked on CUDA, so copies from it are asynchronous
  // DMA); a Device::kCPU tensor whose raw() the host may read and write.
  absl::StatusOr<Tensor> AllocateHost(DType dtype, std::vector<int64_t> shape);
  // dst.bytes() bytes from host memory; `src` may be reused as soon as the call returns.
  void CopyFromHost(const void* src, const Tensor& dst);
  // From a host tensor made by AllocateHost, asynchronously on the calling thread's stream: `src`
  // must stay alive and unchanged until the next Synchronize() of this thread.
  void CopyFromHostAsync(const Tensor& src, const Tensor& dst);
  // Waits for the calling thread's work, copies src to host memory and returns the thread's error.
  absl::Status CopyToHost(const Tensor& src, void* dst);
  // Same dtype and element count, same device: the bytes.
  void Copy(const Tensor& src, const Tensor& dst);
  // Same element count, any float dtypes: dst = dtype cast of src (round to nearest even).
  void Convert(const Tensor& src, const Tensor& dst);
  // Waits for the calling thread's work; returns and clears its first error.
  absl::Status Synchronize();
  // How many live threads have an error recorded here that no Synchronize() has taken yet (a
  // thread's entry goes when it is taken or when the thread ends). For tests and diagnostics.
  size_t ThreadsWithPendingErrors() const;
  // Gives memory the backend keeps for reuse after tensors were freed back to the device, so that
  // other allocations (of this process or another) can have it; waits for the calling thread's
  // queued work first, since frees still queued are not yet reusable. Called when a cache drops
  // tensors it held (cache/memory_tier.h). OK and nothing to do on the CPU; errors are returned,
  // not recorded as the thread's error.
  virtual absl::Status TrimMemory() { return absl::OkStatus(); }

  // ---- Capture (CUDA graphs: many launches replayed as one) ----
  // Whether BeginCapture works here (the CPU backend: no; it has no launches to save).
  virtual bool SupportsCapture() const { return false; }
  // Records the calling thread's ops from here to EndCapture instead of running them. Between the
  // two, ops may allocate and free temporaries (the recording owns them) but must not synchronize
  // or copy to or from host memory (Synchronize, CopyFromHost, CopyToHost fail the capture).
  absl::Status BeginCapture();
  // The recorded ops, or the first error of the capture (which is then dropped).
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture();
  // Queues `work` (made by this backend) on the calling thread's stream, as an op.
  void Replay(const CapturedWork& work);

  // ---- Ops (x, out, weights: the compute dtype unless said otherwise) ----
  // out[t] = table[ids[t]] (accumulate: out[t] += table[ids[t]]); ids kI32 [T], validated by
  // the caller against the table's rows; table in out's dtype or a supported weight dtype.
  void Embedding(const Tensor& ids, const Tensor& table, const Tensor& out, bool accumulate);
  // out[t] = x[rows[t]]; rows kI32 [R]; any dtype, x and out alike.
  void GatherRows(const Tensor& x, const Tensor& rows, const Tensor& out);
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out);
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 const Tensor& out);
  // out = x W (+ bias), x [T, in], out [T, out] (the compute dtype or f32); bias may be undefined;
  // weight in x's dtype or a supported weight dtype (SupportsWeightDType).
  void Linear(const Tensor& x, const Tensor& weight, WeightLayout layout, const Tensor& bias,
              const Tensor& out);
  // Linear, then `activation` in place on out (arguments as Linear's). CUDA runs both in the
  // GEMM where cuBLASLt has a kernel with its GELU or ReLU epilogue, which adds the bias and
  // applies the activation in f32 before out is rounded once (so a 16-bit out can differ from
  // the two ops by that rounding); elsewhere it is the two ops.
  void LinearActivation(const Tensor& x, const Tensor& weight, WeightLayout layout,
                        const Tensor& bias, GemmActivation activation, const Tensor& out);
  // Rotate-half RoPE in place on x [T, heads, head_dim] at positions (kI32 [T]): pair i turns by
  // positions[t] * table.inv_freq[i] (head_dim / 2 values), cos/sin times table.attention_factor.
  void Rope(const Tensor& x, const Tensor& positions, const RopeTable& table);
  void GeluTanh(const Tensor& x);  // in place
  void GeluErf(const Tensor& x);   // in place: x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
  // out = silu(gate) * up where gate_up [T, 2I] holds gate in columns [0, I) and up in [I, 2I).
  void SwiGlu(const Tensor& gate_up, const Tensor& out);
  // out = gelu_tanh(gate) * up, gate_up laid out as for SwiGlu (T5 v1.1's "gated-gelu": HF's
  // gelu_new is the tanh approximation, as GeluTanh).
  void GeGlu(const Tensor& gate_up, const Tensor& out);
  void Relu(const Tensor& x);                 // in place: max(x, 0)
  void Scale(const Tensor& x, float factor);  // in place: x * factor (Gemma's embeddings)
  // Splits the columns of qkv [T, q + k + v] into q [T, ...], k, v (each contiguous).
  void SplitQkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v);
  void Add(const Tensor& x, const Tensor& y);  // x += y
  // x += y, then out = RmsNorm(x) / LayerNorm(x): a residual add and the norm of the sum, as
  // Add then the norm (one kernel on CUDA, same bits). x [.., n]; y like x; out like x, may be y.
  void AddRmsNorm(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                  const Tensor& out);
  void AddLayerNorm(const Tensor& x, const Tensor& y, const Tensor& weight, const Tensor& bias,
                    float eps, const Tensor& out);

  // ---- Attention (q [T, heads, head_dim]; `scale` multiplies q.k) ----
  // Each sequence's rows against its own keys (causal, own_log_weight on keys >= weighted_from).
  void AttendOwn(const Tensor& q, absl::Span<const AttentionSequence> sequences, float scale,
                 const AttentionState& out);
  // Every row of every sequence against the shared context (log_weight NOT applied: it is an
  // argument of MergeStates). Rows before their sequence's context_from get lse = -inf, o = 0.
  void AttendContext(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                     const AttentionContext& context, float scale, const AttentionState& out);
  // into := merge(into, other with other_log_weight added to its lse), row by row and head by
  // head: o = (e^(la) o_a + e^(lb) o_b) / (e^(la) + e^(lb)), lse = ln(e^(la) + e^(lb)).
  void MergeStates(const AttentionState& into, const AttentionState& other, float other_log_weight);
  // AttendOwn, then (with a context) AttendContext merged in with context->log_weight. lse may be
  // undefined when the caller does not need it.
  void Attention(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                 const AttentionContext* context, float scale, const Tensor& out,
                 const Tensor& lse);
  // Each sequence's rows against its keys with an additive bias per (head, query, key) (see
  // BiasedAttentionSequence): T5's relative position bias and causal mask, or any block mask.
  // Yields a state (o, lse) like AttendOwn, so key sets attended separately merge exactly.
  void AttendBiased(const Tensor& q, absl::Span<const BiasedAttentionSequence> sequences,
                    float scale, const AttentionState& out);

 protected:
  // The implementations see only checked arguments.
  virtual absl::StatusOr<Tensor> AllocateImpl(DType dtype, std::vector<int64_t> shape) = 0;
  virtual absl::StatusOr<Tensor> AllocateHostImpl(DType dtype, std::vector<int64_t> shape) = 0;
  virtual absl::Status CopyFromHostImpl(const void* src, const Tensor& dst) = 0;
  virtual absl::Status CopyFromHostAsyncImpl(const Tensor& src, const Tensor& dst) = 0;
  virtual absl::Status CopyToHostImpl(const Tensor& src, void* dst) = 0;  // waits
  virtual absl::Status CopyImpl(const Tensor& src, const Tensor& dst) = 0;
  virtual absl::Status ConvertImpl(const Tensor& src, const Tensor& dst) = 0;
  virtual absl::Status SynchronizeImpl() = 0;
  virtual absl::Status EmbeddingImpl(const Tensor& ids, const Tensor& table, const Tensor& out,
                                     bool accumulate) = 0;
  virtual absl::Status GatherRowsImpl(const Tensor& x, const Tensor& rows, const Tensor& out) = 0;
  virtual absl::Status RmsNormImpl(const Tensor& x, const Tensor& weight, float eps,
                                   const Tensor& out) = 0;
  virtual absl::Status LayerNormImpl(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     float eps, const Tensor& out) = 0;
  virtual absl::Status LinearImpl(const Tensor& x, const Tensor& weight, WeightLayout layout,
                                  const Tensor& bias, const Tensor& out) = 0;
  virtual absl::Status RopeImpl(const Tensor& x, const Tensor& positions,
                                const RopeTable& table) = 0;
  // Default: LinearImpl, then GeluTanhImpl / ReluImpl on out.
  virtual absl::Status LinearActivationImpl(const Tensor& x, const Tensor& weight,
                                            WeightLayout layout, const Tensor& bias,
                                            GemmActivation activation, const Tensor& out);
  virtual absl::Status GeluTanhImpl(const Tensor& x) = 0;
  virtual absl::Status GeluErfImpl(const Tensor& x) = 0;
  virtual absl::Status SwiGluImpl(const Tensor& gate_up, const Tensor& out) = 0;
  virtual absl::Status GeGluImpl(const Tensor& gate_up, const Tensor& out) = 0;
  virtual absl::Status ReluImpl(const Tensor& x) = 0;
  virtual absl::Status ScaleImpl(const Tensor& x, float factor) = 0;
  virtual absl::Status SplitQkvImpl(const Tensor& qkv, const Tensor& q, const Tensor& k,
                                    const Tensor& v) = 0;
  virtual absl::Status AddImpl(const Tensor& x, const Tensor& y) = 0;
  virtual absl::Status AttendOwnImpl(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                                     float scale, const AttentionState& out) = 0;
  virtual absl::Status AttendContextImpl(const Tensor& q,
                                         absl::Span<const AttentionSequence> sequences,
                                         const AttentionContext& context, float scale,
                                         const AttentionState& out) = 0;
  virtual absl::Status MergeStatesImpl(const AttentionState& into, const AttentionState& other,
                                       float other_log_weight) = 0;
  virtual absl::Status AttendBiasedImpl(const Tensor& q,
                                        absl::Span<const BiasedAttentionSequence> sequences,
                                        float scale, const AttentionState& out) = 0;
  // By default Add, then the norm (the CPU backend); CUDA fuses them.
  virtual absl::Status AddRmsNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight,
                                      float eps, const Tensor& out);
  virtual absl::Status AddLayerNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight,
                                        const Tensor& bias, float eps, const Tensor& out);
  virtual absl::Status BeginCaptureImpl();
  virtual absl::StatusOr<std::unique_ptr<CapturedWork>> EndCaptureImpl();
  virtual absl::Status ReplayImpl(const CapturedWork& work);

 private:
  // Runs `check`; on success and with no pending error, `impl`; records the first failure.
  template <typename Check, typename Impl>
  void Dispatch(const char* op, Check&& check, Impl&& impl);
  bool HasError() const;
  void RecordError(absl::Status status);
  absl::Status TakeError();

  // Shared with the threads that recorded an error into it, which drop their entry when they
  // end (backend.cc), whether or not the backend still exists then.
  std::shared_ptr<backend_internal::ThreadErrors> errors_ =
      std::make_shared<backend_internal::ThreadErrors>();
};

}  // namespace manyshot

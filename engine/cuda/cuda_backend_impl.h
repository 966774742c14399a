// Internals of the CUDA backend (cuda_backend.cc): per-thread streams and cuBLASLt state, the GEMM
// plan cache, and the CudaBackend class. Also used by cuda_reference.cc, so its GEMM measurement
// runs exactly the plan Linear runs.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/backend.h"
#include "engine/cuda/attention_kernels.h"

namespace manyshot {
namespace cuda_internal {

// INTERNAL "cuda <op>: <cudaGetErrorString>" (RESOURCE_EXHAUSTED for out of memory); also clears
// the calling thread's last CUDA error so a later launch check does not report this failure again.
// A sticky error (device_fault.h) is not cleared but recorded as the device's fault.
absl::Status CudaError(absl::string_view op, cudaError_t error);
inline absl::Status CudaCheck(absl::string_view op, cudaError_t error) {
  return error == cudaSuccess ? absl::OkStatus() : CudaError(op, error);
}

// INTERNAL "cublasLt <op>: status <n> (<detail>)".
absl::Status CublasError(absl::string_view op, cublasStatus_t status, absl::string_view detail);

cuda::ElemType ElemTypeOf(DType dtype);  // float dtypes only
cudaDataType_t CudaDataTypeOf(DType dtype);

// The largest power of two (at most 256) dividing the address: what cuBLASLt may assume.
uint32_t PointerAlignment(const void* p);

// One row-major GEMM shape: y [rows, out] = x [rows, in] W^T (kOutIn, W [out, in]) or x W
// (kInOut, W [in, out]); x and W of in_type, y of out_type; f32 accumulation.
struct GemmKey {
  int64_t rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  DType in_type = DType::kF32;
  DType out_type = DType::kF32;
  WeightLayout layout = WeightLayout::kOutIn;
  uint32_t align_x = 256;
  uint32_t align_w = 256;
  uint32_t align_y = 256;
  // A bias [out] of in_type is added; align_bias: the alignment of its pointer.
  bool bias = false;
  uint32_t align_bias = 256;
  // An activation after the bias (LinearActivation): in the epilogue where cuBLASLt has one.
  std::optional<GemmActivation> activation;
  bool operator==(const GemmKey& o) const = default;
  std::string ToString() const;
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const;
};

// cuBLASLt descriptors, layouts and the heuristic's algorithm for one GemmKey.
class GemmPlan {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;

  // `bias`: the bias pointer when key.bias (the heuristic reads its alignment from it).
  static absl::StatusOr<std::unique_ptr<GemmPlan>> Create(cublasLtHandle_t handle,
                                                          const GemmKey& key,
                                                          const void* bias = nullptr);
  ~GemmPlan();
  GemmPlan(const GemmPlan&) = delete;
  GemmPlan& operator=(const GemmPlan&) = delete;

  // y = x W (+ bias when bias_in_epilogue()); workspace: kWorkspaceBytes of device memory used by
  // this stream only. Not thread-safe (it sets the bias pointer in the descriptor).
  absl::Status Run(cublasLtHandle_t handle, const void* x, const void* w, const void* bias, void* y,
                   void* workspace, cudaStream_t stream);

  // Whether Run adds the bias (cuBLASLt's bias epilogue, in f32 before the output is rounded);
  // otherwise the caller adds it.
  bool bias_in_epilogue() const { return bias_in_epilogue_; }
  // Whether Run applies key.activation too (after the bias, before the rounding); otherwise the
  // caller applies it after adding the bias.
  bool activation_in_epilogue() const { return activation_in_epilogue_; }

 private:
  GemmPlan() = default;
  // What the epilogue does beyond D = op(A) op(B).
  struct Epilogue {
    bool bias = false;
    bool activation = false;
  };
  static absl::StatusOr<std::unique_ptr<GemmPlan>> Build(cublasLtHandle_t handle,
                                                         const GemmKey& key, const void* bias,
                                                         Epilogue epilogue, bool* no_algorithm);
  // Build's steps: the matmul descriptor (transposes, epilogue, bias pointer), the matrix
  // layouts, and the heuristic's algorithm (*no_algorithm when it found none).
  absl::Status DescribeMatmul(Epilogue epilogue, const void* bias);
  absl::Status DescribeLayouts();
  absl::Status PickAlgorithm(cublasLtHandle_t handle, bool* no_algorithm);
  // OK, or the cuBLASLt error of `op` naming this plan's shape.
  absl::Status Check(const char* op, cublasStatus_t status) const;

  GemmKey key_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr;  // the weight
  cublasLtMatrixLayout_t b_ = nullptr;  // x
  cublasLtMatrixLayout_t d_ = nullptr;  // y (also C, with beta = 0)
  cublasLtMatmulAlgo_t algo_{};
  bool bias_in_epilogue_ = false;
  bool activation_in_epilogue_ = false;
};

// What one host thread uses on one device: leased to a thread for its lifetime, then returned to
// its DeviceContext for the next thread (DeviceContext::State). Touched only by the thread that
// holds it (and by the DeviceContext that owns it, when destroyed).
struct ThreadState {
  // GEMM plans kept per thread. The row count is part of a plan's key and varies with every
  // batch shape, so an unbounded cache would grow for as long as a server sees new batch sizes;
  // the least recently used plan beyond this many is destroyed (a GEMM it enqueued is unaffected:
  // cuBLASLt reads the descriptors when the call is made).
  static constexpr size_t kMaxPlans = 256;

  explicit ThreadState(int device_index) : device(device_index) {}
  ~ThreadState();
  ThreadState(const ThreadState&) = delete;
  ThreadState& operator=(const ThreadState&) = delete;

  // The cuBLASLt handle and workspace, created on first use (a thread that only frees buffers
  // never needs them).
  absl::Status EnsureGemm();
  // The cached plan for `key` (created by the heuristic on first use); valid until the next call.
  absl::StatusOr<GemmPlan*> Plan(const GemmKey& key, const void* bias);
  size_t plan_count() const { return plans.size(); }

  // The cuBLASLt workspace of a GEMM on this thread's stream: while a capture is recording, the
  // capture's own (a graph replayed on another thread's stream must not share this thread's).
  absl::StatusOr<void*> GemmWorkspace();

  int device;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  // Between BeginCapture and EndCapture (cuda_graphs.cc): the stream records, and its GEMMs use
  // capture_workspace, a graph allocation made at the first GEMM of the capture.
  bool capturing = false;
  void* capture_workspace = nullptr;

 private:
  using PlanList = std::list<std::pair<GemmKey, std::unique_ptr<GemmPlan>>>;
  PlanList plan_lru;  // most recently used first
  std::unordered_map<GemmKey, PlanList::iterator, GemmKeyHash> plans;
};

// Per-device state shared by the backend and by every buffer it allocated (their deleters hold a
// reference), so a buffer released after the backend still frees into a live stream.
//
// Each host thread that calls into the backend leases a ThreadState (its stream, cuBLASLt handle
// and 32 MiB workspace) on its first call and gives it back when the thread ends, so the states
// number at most the threads that used the device at the same time, however many come and go
// (the server runs every CreateTask on a thread of its own). A returned state keeps its stream:
// work a finished thread left queued still runs before the next holder's.
class DeviceContext : public std::enable_shared_from_this<DeviceContext> {
 public:
  explicit DeviceContext(int device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  // cudaSetDevice, then the calling thread's state (leased on its first call).
  absl::StatusOr<ThreadState*> State();
  // Stream-ordered free on the calling thread's stream; errors cannot be reported from a deleter.
  void Free(void* p);
  // States created so far (held by threads or idle), for tests.
  size_t thread_states();

  // Called when a thread that holds `state` ends.
  void Return(ThreadState* state);

 private:
  const int device_;
  const uint64_t id_;  // unique per context: the key of the calling thread's leases
  std::mutex mutex_;
  std::vector<std::unique_ptr<ThreadState>> states_;  // every state, held or idle
  std::vector<ThreadState*> idle_;                    // returned by threads that ended
};

}  // namespace cuda_internal

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<cuda_internal::DeviceContext> context, std::string description);

  Device device() const override { return Device::kCUDA; }
  int device_index() const override { return context_->device(); }
  std::string name() const override { return "cuda"; }
  std::string description() const override { return description_; }
  int threads() const override { return 1; }
  DType default_compute_dtype() const override { return DType::kBF16; }
  bool SupportsComputeDType(DType dtype) const override {
    return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
  }
  // memory_pool.cc: the device's memory pool keeps none of its freed bytes.
  absl::Status TrimMemory() override;
  // cuda_graphs.cc: CUDA graphs.
  bool SupportsCapture() const override { return true; }

 protected:
  absl::StatusOr<Tensor> AllocateImpl(DType dtype, std::vector<int64_t> shape) override;
  absl::StatusOr<Tensor> AllocateHostImpl(DType dtype, std::vector<int64_t> shape) override;
  absl::Status CopyFromHostImpl(const void* src, const Tensor& dst) override;
  absl::Status CopyFromHostAsyncImpl(const Tensor& src, const Tensor& dst) override;
  absl::Status CopyToHostImpl(const Tensor& src, void* dst) override;
  absl::Status CopyImpl(const Tensor& src, const Tensor& dst) override;
  absl::Status ConvertImpl(const Tensor& src, const Tensor& dst) override;
  absl::Status SynchronizeImpl() override;
  absl::Status EmbeddingImpl(const Tensor& ids, const Tensor& table, const Tensor& out,
                             bool accumulate) override;
  absl::Status GatherRowsImpl(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  absl::Status RmsNormImpl(const Tensor& x, const Tensor& weight, float eps,
                           const Tensor& out) override;
  absl::Status LayerNormImpl(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                             const Tensor& out) override;
  absl::Status LinearImpl(const Tensor& x, const Tensor& weight, WeightLayout layout,
                          const Tensor& bias, const Tensor& out) override;
  absl::Status LinearActivationImpl(const Tensor& x, const Tensor& weight, WeightLayout layout,
                                    const Tensor& bias, GemmActivation activation,
                                    const Tensor& out) override;
  absl::Status RopeImpl(const Tensor& x, const Tensor& positions, const RopeTable& table) override;
  absl::Status GeluTanhImpl(const Tensor& x) override;
  absl::Status GeluErfImpl(const Tensor& x) override;
  absl::Status SwiGluImpl(const Tensor& gate_up, const Tensor& out) override;
  // cuda_t5_ops.cc
  absl::Status GeGluImpl(const Tensor& gate_up, const Tensor& out) override;
  absl::Status ReluImpl(const Tensor& x) override;
  absl::Status ScaleImpl(const Tensor& x, float factor) override;
  // cuda_biased_attention.cc
  absl::Status AttendBiasedImpl(const Tensor& q,
                                absl::Span<const BiasedAttentionSequence> sequences, float scale,
                                const AttentionState& out) override;
  absl::Status SplitQkvImpl(const Tensor& qkv, const Tensor& q, const Tensor& k,
                            const Tensor& v) override;
  absl::Status AddImpl(const Tensor& x, const Tensor& y) override;
  absl::Status AttendOwnImpl(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                             float scale, const AttentionState& out) override;
  absl::Status AttendContextImpl(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                                 const AttentionContext& context, float scale,
                                 const AttentionState& out) override;
  absl::Status MergeStatesImpl(const AttentionState& into, const AttentionState& other,
                               float other_log_weight) override;
  absl::Status AddRmsNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight, float eps,
                              const Tensor& out) override;
  absl::Status AddLayerNormImpl(const Tensor& x, const Tensor& y, const Tensor& weight,
                                const Tensor& bias, float eps, const Tensor& out) override;
  // cuda_graphs.cc
  absl::Status BeginCaptureImpl() override;
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCaptureImpl() override;
  absl::Status ReplayImpl(const CapturedWork& work) override;

 private:
  // Linear with an optional activation after the bias (LinearImpl, LinearActivationImpl).
  absl::Status RunLinear(const Tensor& x, const Tensor& weight, WeightLayout layout,
                         const Tensor& bias, std::optional<GemmActivation> activation,
                         const Tensor& out);
  // Own (context == nullptr) or context attention, in launches of at most kMaxAttnSequences.
  absl::Status Attend(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                      const AttentionContext* context, float scale, const AttentionState& out);
  // ALiBi attention (the sequences carry slopes), own or context, on the biased-attention kernel
  // (cuda_biased_attention.cc). Attend has checked the shapes and handled an empty context.
  absl::Status AttendAlibi(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                           const AttentionContext* context, float scale, const AttentionState& out,
                           cudaStream_t stream);

  std::shared_ptr<cuda_internal::DeviceContext> context_;
  std::string description_;
};

}  // namespace manyshot

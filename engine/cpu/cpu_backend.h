// The CPU backend: the reference implementation. GEMMs go to OpenBLAS running single-threaded
// inside our own ThreadPool (which partitions every op), so OpenBLAS's thread pool and ours never
// spin on the same cores at once.
#pragma once

#include <memory>

#include "engine/core/backend.h"
#include "engine/cpu/thread_pool.h"

namespace manyshot {

class CpuBackend final : public Backend {
 public:
  // threads <= 0: hardware concurrency.
  explicit CpuBackend(int threads = 0);

  Device device() const override { return Device::kCPU; }
  std::string name() const override { return "cpu"; }
  std::string description() const override;
  int threads() const override { return pool_->size(); }
  ThreadPool& pool() { return *pool_; }

  DType default_compute_dtype() const override { return DType::kF32; }
  bool SupportsComputeDType(DType dtype) const override { return dtype == DType::kF32; }
  // Matrix weights in f32 or bf16: bf16 ones are widened inside the kernels (f32 accumulation),
  // halving the bytes decode reads per token.
  bool SupportsWeightDType(DType compute, DType weights) const override {
    return compute == DType::kF32 && (weights == DType::kF32 || weights == DType::kBF16);
  }

 protected:
  absl::StatusOr<Tensor> AllocateImpl(DType dtype, std::vector<int64_t> shape) override;
  absl::StatusOr<Tensor> AllocateHostImpl(DType dtype, std::vector<int64_t> shape) override;
  absl::Status CopyFromHostImpl(const void* src, const Tensor& dst) override;
  absl::Status CopyFromHostAsyncImpl(const Tensor& src, const Tensor& dst) override;
  absl::Status CopyToHostImpl(const Tensor& src, void* dst) override;
  absl::Status CopyImpl(const Tensor& src, const Tensor& dst) override;
  absl::Status ConvertImpl(const Tensor& src, const Tensor& dst) override;
  absl::Status SynchronizeImpl() override { return absl::OkStatus(); }
  absl::Status EmbeddingImpl(const Tensor& ids, const Tensor& table, const Tensor& out,
                             bool accumulate) override;
  absl::Status GatherRowsImpl(const Tensor& x, const Tensor& rows, const Tensor& out) override;
  absl::Status RmsNormImpl(const Tensor& x, const Tensor& weight, float eps,
                           const Tensor& out) override;
  absl::Status LayerNormImpl(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                             const Tensor& out) override;
  absl::Status LinearImpl(const Tensor& x, const Tensor& weight, WeightLayout layout,
                          const Tensor& bias, const Tensor& out) override;
  absl::Status RopeImpl(const Tensor& x, const Tensor& positions, const RopeTable& table) override;
  absl::Status GeluTanhImpl(const Tensor& x) override;
  absl::Status GeluErfImpl(const Tensor& x) override;
  absl::Status SwiGluImpl(const Tensor& gate_up, const Tensor& out) override;
  absl::Status GeGluImpl(const Tensor& gate_up, const Tensor& out) override;  // cpu_glu_relu.cc
  absl::Status ReluImpl(const Tensor& x) override;
  absl::Status ScaleImpl(const Tensor& x, float factor) override;  // cpu_glu_relu.cc
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
  // cpu_biased_attention.cc
  absl::Status AttendBiasedImpl(const Tensor& q,
                                absl::Span<const BiasedAttentionSequence> sequences, float scale,
                                const AttentionState& out) override;

 private:
  std::unique_ptr<ThreadPool> pool_;
};

// The OpenBLAS kernel set in use ("Haswell", "SkylakeX", ...) and its build configuration.
std::string BlasKernelName();

}  // namespace manyshot

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

  Tensor Allocate(DType dtype, std::vector<int64_t> shape) override;
  void CopyFromHost(const void* src, const Tensor& dst) override;
  void CopyToHost(const Tensor& src, void* dst) override;
  void Copy(const Tensor& src, const Tensor& dst) override;
  void Synchronize() override {}

  void Embedding(absl::Span<const int32_t> ids, const Tensor& table, const Tensor& out,
                 bool accumulate) override;
  void GatherRows(const Tensor& x, absl::Span<const int64_t> rows, const Tensor& out) override;
  void RmsNorm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out) override;
  void LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                 const Tensor& out) override;
  void Linear(const Tensor& x, const Tensor& weight, WeightLayout layout, const Tensor& bias,
              const Tensor& out) override;
  void Rope(const Tensor& x, absl::Span<const int32_t> positions, float theta) override;
  void GeluTanh(const Tensor& x) override;
  void SwiGlu(const Tensor& gate_up, const Tensor& out) override;
  void SplitQkv(const Tensor& qkv, const Tensor& q, const Tensor& k, const Tensor& v) override;
  void Add(const Tensor& x, const Tensor& y) override;
  void Attention(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                 const AttentionContext* context, float scale, const Tensor& out,
                 const Tensor& lse) override;

 private:
  std::unique_ptr<ThreadPool> pool_;
};

// The OpenBLAS kernel set in use ("Haswell", "SkylakeX", ...) and its build configuration.
std::string BlasKernelName();

}  // namespace manyshot

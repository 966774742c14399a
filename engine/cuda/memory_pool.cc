#include "engine/cuda/memory_pool.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {

using cuda_internal::CudaCheck;

namespace {

absl::StatusOr<cudaMemPool_t> DefaultPool(int device) {
  cudaMemPool_t pool = nullptr;
  absl::Status s =
      CudaCheck("cudaDeviceGetDefaultMemPool", cudaDeviceGetDefaultMemPool(&pool, device));
  if (!s.ok()) return s;
  return pool;
}

}  // namespace

absl::Status SetCudaPoolReleaseThreshold(int device, uint64_t bytes) {
  absl::StatusOr<cudaMemPool_t> pool = DefaultPool(device);
  if (!pool.ok()) return pool.status();
  uint64_t threshold = bytes;
  return CudaCheck(absl::StrCat("cudaMemPoolSetAttribute(ReleaseThreshold, ", bytes, ")"),
                   cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}

absl::StatusOr<uint64_t> CudaPoolReservedBytes(int device) {
  absl::StatusOr<cudaMemPool_t> pool = DefaultPool(device);
  if (!pool.ok()) return pool.status();
  uint64_t reserved = 0;
  absl::Status s =
      CudaCheck("cudaMemPoolGetAttribute(ReservedMemCurrent)",
                cudaMemPoolGetAttribute(*pool, cudaMemPoolAttrReservedMemCurrent, &reserved));
  if (!s.ok()) return s;
  return reserved;
}

absl::Status CudaBackend::TrimMemory() {
  absl::StatusOr<cuda_internal::ThreadState*> state = context_->State();
  if (!state.ok()) return state.status();
  // Bytes freed on this thread's stream (the tensors whose last reference it dropped) go back to
  // the pool only once the stream has passed the free; until then the pool counts them in use.
  absl::Status s =
      CudaCheck("TrimMemory cudaStreamSynchronize", cudaStreamSynchronize((*state)->stream));
  if (!s.ok()) return s;
  absl::StatusOr<cudaMemPool_t> pool = DefaultPool(context_->device());
  if (!pool.ok()) return pool.status();
  return CudaCheck("cudaMemPoolTrimTo(0)", cudaMemPoolTrimTo(*pool, 0));
}

}  // namespace manyshot

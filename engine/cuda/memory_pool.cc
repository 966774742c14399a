#include "engine/cuda/memory_pool.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {

absl::Status SetCudaPoolReleaseThreshold(int device, uint64_t bytes) {
  using cuda_internal::CudaCheck;
  cudaMemPool_t pool = nullptr;
  absl::Status s =
      CudaCheck("cudaDeviceGetDefaultMemPool", cudaDeviceGetDefaultMemPool(&pool, device));
  if (!s.ok()) return s;
  uint64_t threshold = bytes;
  return CudaCheck(absl::StrCat("cudaMemPoolSetAttribute(ReleaseThreshold, ", bytes, ")"),
                   cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
}

}  // namespace manyshot

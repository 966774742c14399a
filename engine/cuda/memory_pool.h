// The device's stream-ordered memory pool, where every tensor and cuBLASLt workspace of the
// backend comes from. CreateCudaBackend keeps every freed byte in it (release threshold UINT64_MAX:
// steady-state allocation is a pool lookup); an operator who shares the GPU with other processes
// lowers the threshold (--gpu_pool_release_threshold_bytes), and the pool then gives memory above
// it back to the driver at each synchronization. When the GPU tier of the cache evicts contexts,
// CudaBackend::TrimMemory gives every freed byte back at once (cudaMemPoolTrimTo), whatever the
// threshold: an evicted context's bytes are the largest blocks the pool would otherwise keep.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace manyshot {

absl::Status SetCudaPoolReleaseThreshold(int device, uint64_t bytes);

// Bytes the pool of `device` holds from the driver: in use by tensors plus freed and kept
// (cudaMemPoolAttrReservedMemCurrent).
absl::StatusOr<uint64_t> CudaPoolReservedBytes(int device);

}  // namespace manyshot

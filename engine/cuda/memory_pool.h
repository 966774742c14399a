// The device's stream-ordered memory pool, where every tensor and cuBLASLt workspace of the
// backend comes from. CreateCudaBackend keeps every freed byte in it (release threshold UINT64_MAX:
// steady-state allocation is a pool lookup); an operator who shares the GPU with other processes
// lowers the threshold (--gpu_pool_release_threshold_bytes), and the pool then gives memory above
// it back to the driver at each synchronization.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace manyshot {

absl::Status SetCudaPoolReleaseThreshold(int device, uint64_t bytes);

}  // namespace manyshot

// The CUDA backend: device memory from a stream-ordered pool, GEMMs on cuBLASLt (bf16/f16 inputs
// with f32 accumulation, or f32), our kernels for everything else (elementwise_kernels.cu,
// attention_kernels.cu). One stream, cuBLASLt workspace and sticky error per host thread (see
// engine/core/backend.h, "Concurrency").
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"

namespace manyshot {

// Number of usable CUDA devices, or an error whose message says why there are none (no driver,
// "CUDA driver version is insufficient for CUDA runtime version", no device).
absl::StatusOr<int> CudaDeviceCount();

class CudaBackend;
// Opens device `device` (cudaSetDevice, properties, the cuBLASLt handle).
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

}  // namespace manyshot

// Same-run hardware references for benchmarks: what this GPU achieves, measured in the same process
// as the numbers they are compared with, on plain device copies and on the cuBLASLt GEMM that
// Backend::Linear runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"

namespace manyshot {

// The device's name, e.g. "NVIDIA H100 80GB HBM3".
absl::StatusOr<std::string> CudaDeviceName(int device);

// Device-to-device cudaMemcpyAsync of a `bytes`-byte buffer of non-zero data: after warm-up,
// `iterations` copies timed one by one with CUDA events; returns (bytes read + bytes written) per
// second of the median copy.
absl::StatusOr<double> MeasureDeviceCopyBytesPerSecond(int device, size_t bytes, int iterations);

// The cuBLASLt GEMM of Backend::Linear (kOutIn layout: y [n, m] = x [n, k] W^T with W [m, k]) on
// random non-zero data of `dtype` (f32, f16 or bf16; y of the same dtype; f32 accumulation,
// no TF32): 2 m n k floating-point operations per second of the median of `iterations` timed runs.
absl::StatusOr<double> MeasureGemmFlopsPerSecond(int device, int64_t m, int64_t n, int64_t k,
                                                 DType dtype, int iterations);

}  // namespace manyshot

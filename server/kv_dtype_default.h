// The K/V storage dtype when --kv_dtype is unset, per backend. On CUDA: 16-bit K/V (f16 when the
// model computes in f16, else bf16), which the tensor-core flash kernel reads with f32
// accumulation; f32 K/V would run the scalar kernel (engine/cuda/attention_kernels.cu,
// SelectKernel). On the CPU: f32, the reference every other configuration is measured against.
// The storage dtype is part of the cache key and of each stored payload (cache/README.md "KV
// dtype"), so a data directory written with another dtype is re-encoded, never misread.
#pragma once

#include <string>

#include "engine/core/backend.h"

namespace manyshot::server {

std::string DefaultKvDtype(Device device, DType compute);

// The attention kernel the configuration runs for context K/V, for the startup log: what an
// operator checks to see that the GPU serves on tensor cores.
std::string AttentionKernelDescription(Device device, DType kv, int64_t head_dim);

}  // namespace manyshot::server

// Matrix-vector products for decode: a few activation rows times a weight matrix, in f32 or with
// bf16 weights widened in the kernel (f32 accumulation either way). With so few rows the work is
// bound by reading the weights once, so the kernels are written for the memory system: each
// thread streams one contiguous part of the weight matrix front to back (the hardware
// prefetchers follow it), loads a vector at a time and keeps several independent accumulators.
// Compiled for each instruction set and dispatched at run time (cpu_target.h).
// OpenBLAS's sgemv partitioned by our pool reads strided column slices and stops near 25 GB/s.
#pragma once

#include <cstdint>

#include "engine/core/backend.h"
#include "engine/cpu/thread_pool.h"

namespace manyshot::cpu_internal {

// Most activation rows the GEMV path takes: each weight vector loaded feeds this many rows'
// FMAs from registers. More rows go to sgemm, which reuses weights through its cache blocking.
constexpr int64_t kGemvMaxRows = 4;

// out[r, o] = sum_i x[r, i] * W(o, i) + bias[o] for r < rows (1 <= rows <= kGemvMaxRows), W in
// `layout` ([out_features, in] or [in, out_features]), `weight` f32 or bf16. Rows of x and out
// are contiguous (strides in and out_features); bias may be null. The summation order differs
// from sgemm's, so results agree with it to rounding (a few ulps of sum_i |x_i W(o, i)|).
void Gemv(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const void* weight,
          DType weight_dtype, WeightLayout layout, int64_t out_features, const float* bias,
          float* out);

}  // namespace manyshot::cpu_internal

// Launch interface of the non-attention kernels (elementwise_kernels.cu) behind the CUDA backend's
// ops. Plain C++ and the CUDA runtime only (no absl, gRPC or spdlog), so the .cu stays free of
// them. Semantics are those of the Backend ops (engine/core/backend.h) whose CPU implementation
// (engine/cpu/cpu_backend.cc) is the reference: every kernel loads its element type to f32,
// computes in f32 and rounds to nearest even when it stores.
//
// All tensors are contiguous from the pointer given (a row view may start at any byte offset: the
// launchers use 16-byte vector access only where every pointer and size allows it). Every launcher
// returns the launch error (cudaGetLastError), or cudaErrorInvalidValue for arguments it cannot
// handle; an empty problem launches nothing and returns cudaSuccess.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "engine/cuda/attention_kernels.h"  // ElemType

namespace manyshot::cuda {

// dst[i] = cast(src[i]) for i < n (round to nearest even; NaN stays NaN).
cudaError_t LaunchConvert(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                          int64_t n, cudaStream_t stream);

// out[r] = x[rows[r]] for r < num_rows, row_bytes bytes per row (any element type). A row index
// outside [0, x_rows) yields a zero row instead of an out-of-bounds read.
cudaError_t LaunchGatherRows(const void* x, int64_t x_rows, const int32_t* rows, int64_t num_rows,
                             size_t row_bytes, void* out, cudaStream_t stream);

// rows x width_bytes bytes from src (row pitch src_pitch bytes) to dst (row pitch dst_pitch), in
// the widest words that the sizes and addresses allow.
cudaError_t LaunchCopy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width_bytes, int64_t rows, cudaStream_t stream);

// out[t] += table[ids[t]] over [tokens, hidden] (the non-accumulating embedding is
// LaunchGatherRows). Ids outside [0, table_rows) leave their row unchanged.
cudaError_t LaunchEmbeddingAdd(const int32_t* ids, int64_t tokens, const void* table,
                               int64_t table_rows, int64_t hidden, void* out, ElemType type,
                               cudaStream_t stream);

// Per row of n elements: out = x * (1 / sqrt(mean(x^2) + eps)) * w.
cudaError_t LaunchRmsNorm(const void* x, const void* weight, void* out, ElemType type, int64_t rows,
                          int64_t n, float eps, cudaStream_t stream);

// Per row of n elements: out = (x - mean) * (1 / sqrt(mean((x - mean)^2) + eps)) * w + b.
cudaError_t LaunchLayerNorm(const void* x, const void* weight, const void* bias, void* out,
                            ElemType type, int64_t rows, int64_t n, float eps, cudaStream_t stream);

// Per row of n elements: x += y, then out = the RMSNorm of x (bias == nullptr) or its LayerNorm
// with `bias`, in one kernel, bit-identical to LaunchAdd followed by LaunchRmsNorm /
// LaunchLayerNorm. out may be y, not x.
cudaError_t LaunchAddNorm(void* x, const void* y, const void* weight, const void* bias, void* out,
                          ElemType type, int64_t rows, int64_t n, float eps, cudaStream_t stream);

// Rotate-half RoPE in place on x [tokens, heads, head_dim]; inv_freq: head_dim / 2 host values
// (the model's RopeTable: theta^(-2i/head_dim), or a scaled table), at most kMaxRopeHalf. The
// angle pos * inv_freq[i] and its cos/sin are evaluated in double, multiplied by
// attention_factor (YaRN's; 1 otherwise), then rounded to f32.
constexpr int kMaxRopeHalf = 256;
cudaError_t LaunchRope(void* x, ElemType type, int64_t tokens, int64_t heads, int64_t head_dim,
                       const int32_t* positions, const double* inv_freq, double attention_factor,
                       cudaStream_t stream);

// x = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in place.
cudaError_t LaunchGeluTanh(void* x, ElemType type, int64_t n, cudaStream_t stream);

// x = 0.5 x (1 + erf(x / sqrt(2))) in place (GPT-NeoX's "gelu").
cudaError_t LaunchGeluErf(void* x, ElemType type, int64_t n, cudaStream_t stream);

// out [rows, inter] = silu(gate) * up, gate_up [rows, 2 * inter] (gate columns first).
cudaError_t LaunchSwiGlu(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                         cudaStream_t stream);

// out [rows, inter] = gelu_tanh(gate) * up (as LaunchGeluTanh), gate_up as for LaunchSwiGlu.
cudaError_t LaunchGeGlu(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                        cudaStream_t stream);

// x = max(x, 0) in place.
cudaError_t LaunchRelu(void* x, ElemType type, int64_t n, cudaStream_t stream);
// x[i] *= factor in place (f32 math, rounded once to the type).
cudaError_t LaunchScale(void* x, ElemType type, int64_t n, float factor, cudaStream_t stream);

// x[i] += y[i] for i < n.
cudaError_t LaunchAdd(void* x, const void* y, ElemType type, int64_t n, cudaStream_t stream);

// out [rows, cols] (out_type) += bias [cols] (bias_type), in f32, rounded once.
cudaError_t LaunchAddBias(void* out, ElemType out_type, const void* bias, ElemType bias_type,
                          int64_t rows, int64_t cols, cudaStream_t stream);

// Per (token, head) of o [tokens, heads, head_dim] (o_type, a and b alike) and lse [tokens, heads]
// (f32): la = lse_a, lb = lse_b + b_log_weight, m = max(la, lb); m == -inf leaves a unchanged;
// otherwise wa = exp(la - m), wb = exp(lb - m), o_a = (wa o_a + wb o_b) / (wa + wb) and
// lse_a = m + log(wa + wb).
cudaError_t LaunchMergeStates(void* o_a, float* lse_a, const void* o_b, const float* lse_b,
                              ElemType o_type, int64_t tokens, int64_t heads, int64_t head_dim,
                              float b_log_weight, cudaStream_t stream);

// p[i] = value (rounded to `type`) for i < n.
cudaError_t LaunchFill(void* p, ElemType type, int64_t n, float value, cudaStream_t stream);

// p[i] = a deterministic pseudo-random value of `seed` and i with magnitude in [0.25, 1] and a
// random sign (never zero), for benchmarks.
cudaError_t LaunchFillRandom(void* p, ElemType type, int64_t n, uint32_t seed, cudaStream_t stream);

}  // namespace manyshot::cuda

// The CUDA backend's non-attention kernels (see elementwise_kernels.h). Each kernel is templated on
// the element type (float, __half, __nv_bfloat16), loads to f32, computes in f32 and stores with
// round-to-nearest-even. Loops are grid-stride (1D) or row-strided over gridDim.y / gridDim.x, so
// no problem size overflows a grid dimension; indices into memory are int64.
#include "engine/cuda/elementwise_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "engine/cuda/launch.cuh"

namespace manyshot::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 16384;  // grid-stride loops cover the rest
constexpr int64_t kMaxGridY = 65535;   // hardware limit of gridDim.y
constexpr int64_t kMaxRowBlocks = 65536;

__device__ __forceinline__ float ToF32(float v) { return v; }
__device__ __forceinline__ float ToF32(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToF32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T FromF32(float v);
template <>
__device__ __forceinline__ float FromF32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half FromF32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 FromF32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// V consecutive elements moved as one aligned access (16 bytes when V * sizeof(T) == 16).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T>
struct Tag {
  using type = T;
};

// Calls fn(Tag<T>{}) for the element type of `type`.
template <typename Fn>
cudaError_t DispatchType(ElemType type, Fn&& fn) {
  switch (type) {
    case ElemType::kF32:
      return fn(Tag<float>{});
    case ElemType::kF16:
      return fn(Tag<__half>{});
    case ElemType::kBF16:
      return fn(Tag<__nv_bfloat16>{});
  }
  return cudaErrorInvalidValue;
}

size_t ElemSize(ElemType type) { return type == ElemType::kF32 ? 4 : 2; }

bool AlignedTo(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

int BlocksFor(int64_t work, int threads, int64_t max_blocks = kMaxBlocks) {
  const int64_t blocks = (work + threads - 1) / threads;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, max_blocks));
}

int GridY(int64_t rows) { return static_cast<int>(std::clamp<int64_t>(rows, 1, kMaxGridY)); }

// Threads for a column loop of `cols` items: a multiple of 32 in [32, kThreads].
int ThreadsFor(int64_t cols) {
  const int64_t rounded = (cols + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(rounded, 32, kThreads));
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets the total. The leading
// __syncthreads keeps a previous call's readers of `partial`/`total` ahead of this call's writers.
__device__ float BlockSum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = WarpSum(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0f;
    s = WarpSum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

// ---- Convert ----

template <typename S, typename D, int V>
__global__ void ConvertKernel(const S* src, D* dst, int64_t n) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  const auto* sp = reinterpret_cast<const Pack<S, V>*>(src);
  auto* dp = reinterpret_cast<Pack<D, V>*>(dst);
  for (int64_t i = start; i < packs; i += stride) {
    const Pack<S, V> a = sp[i];
    Pack<D, V> b;
#pragma unroll
    for (int j = 0; j < V; ++j) b.v[j] = FromF32<D>(ToF32(a.v[j]));
    dp[i] = b;
  }
  for (int64_t i = packs * V + start; i < n; i += stride) dst[i] = FromF32<D>(ToF32(src[i]));
}

// ---- Gather / embedding ----

template <typename W>
__global__ void GatherRowsKernel(const W* x, int64_t x_rows, const int32_t* rows, int64_t num_rows,
                                 int64_t words, W* out) {
  for (int64_t r = blockIdx.y; r < num_rows; r += gridDim.y) {
    const int64_t src = rows[r];
    const bool valid = src >= 0 && src < x_rows;
    const W* s = x + (valid ? src : 0) * words;
    W* d = out + r * words;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      d[i] = valid ? s[i] : W{};
    }
  }
}

template <typename W>
cudaError_t LaunchGatherWords(const void* x, int64_t x_rows, const int32_t* rows, int64_t num_rows,
                              size_t row_bytes, void* out, cudaStream_t stream) {
  const int64_t words = static_cast<int64_t>(row_bytes / sizeof(W));
  const int threads = ThreadsFor(words);
  const dim3 grid(BlocksFor(words, threads), GridY(num_rows));
  return Launch(GatherRowsKernel<W>, grid, threads, 0, stream, static_cast<const W*>(x), x_rows,
                rows, num_rows, words, static_cast<W*>(out));
}

template <typename W>
__global__ void Copy2DKernel(W* dst, int64_t dst_pitch, const W* src, int64_t src_pitch,
                             int64_t words, int64_t rows) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const W* s = src + r * src_pitch;
    W* d = dst + r * dst_pitch;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      d[i] = s[i];
    }
  }
}

template <typename W>
cudaError_t LaunchCopy2DWords(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width_bytes, int64_t rows, cudaStream_t stream) {
  const int64_t words = static_cast<int64_t>(width_bytes / sizeof(W));
  const int threads = ThreadsFor(words);
  const dim3 grid(BlocksFor(words, threads), GridY(rows));
  return Launch(Copy2DKernel<W>, grid, threads, 0, stream, static_cast<W*>(dst),
                static_cast<int64_t>(dst_pitch / sizeof(W)), static_cast<const W*>(src),
                static_cast<int64_t>(src_pitch / sizeof(W)), words, rows);
}

template <typename T>
__global__ void EmbeddingAddKernel(const int32_t* ids, int64_t tokens, const T* table,
                                   int64_t table_rows, int64_t hidden, T* out) {
  for (int64_t t = blockIdx.y; t < tokens; t += gridDim.y) {
    const int64_t id = ids[t];
    if (id < 0 || id >= table_rows) continue;
    const T* s = table + id * hidden;
    T* d = out + t * hidden;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < hidden;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      d[i] = FromF32<T>(ToF32(d[i]) + ToF32(s[i]));
    }
  }
}

// ---- Norms ----

// Norm kernels: one block per row (rows strided over the grid), V elements per access; the
// launcher picks V = 16 / sizeof(T) when n is a multiple of it and every base pointer is 16-byte
// aligned (then every row start is too), else V = 1. The three kernels share the row steps below,
// so a fused kernel gives the bits of the ones it replaces.

// What a row is normed with: out = (x - mean) * inv * w (+ b).
struct NormStats {
  float mean = 0.0f;  // 0 for RMSNorm
  float inv = 0.0f;   // 1 / std (LayerNorm) or 1 / rms (RMSNorm)
};

// RMSNorm's statistics from each thread's partial sum of squares.
__device__ NormStats RmsStats(float sum_of_squares, int64_t n, float eps) {
  NormStats s;
  const float ss = BlockSum(sum_of_squares);
  s.inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
  return s;
}

// LayerNorm's statistics from each thread's partial sum of the row: the mean, then a second pass
// over the squared deviations, as the CPU reference does.
template <typename T, int V>
__device__ NormStats LayerStats(const Pack<T, V>* xr, int64_t packs, float sum, int64_t n,
                                float eps) {
  NormStats s;
  s.mean = BlockSum(sum) / static_cast<float>(n);
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack<T, V> p = xr[i];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float d = ToF32(p.v[j]) - s.mean;
      sq += d * d;
    }
  }
  const float var = BlockSum(sq) / static_cast<float>(n);
  s.inv = 1.0f / sqrtf(var + eps);
  return s;
}

// Writes the normed row: (x - mean) * inv * w + b (LayerNorm) or x * inv * w (RMSNorm). Each
// element is read and then written by the same thread, so out may alias x.
template <typename T, int V, bool kLayer>
__device__ void WriteNormedRow(const Pack<T, V>* xr, const Pack<T, V>* wp, const Pack<T, V>* bp,
                               Pack<T, V>* orow, int64_t packs, NormStats s) {
  for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
    const Pack<T, V> p = xr[i];
    const Pack<T, V> g = wp[i];
    Pack<T, V> o;
    if constexpr (kLayer) {
      const Pack<T, V> c = bp[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        o.v[j] = FromF32<T>((ToF32(p.v[j]) - s.mean) * s.inv * ToF32(g.v[j]) + ToF32(c.v[j]));
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) o.v[j] = FromF32<T>(ToF32(p.v[j]) * s.inv * ToF32(g.v[j]));
    }
    orow[i] = o;
  }
}

template <typename T, int V>
__global__ void RmsNormKernel(const T* x, const T* w, T* out, int64_t rows, int64_t n, float eps) {
  const int64_t packs = n / V;
  const auto* wp = reinterpret_cast<const Pack<T, V>*>(w);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* xr = reinterpret_cast<const Pack<T, V>*>(x + r * n);
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      const Pack<T, V> p = xr[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float v = ToF32(p.v[j]);
        ss += v * v;
      }
    }
    WriteNormedRow<T, V, false>(xr, wp, nullptr, reinterpret_cast<Pack<T, V>*>(out + r * n), packs,
                                RmsStats(ss, n, eps));
  }
}

template <typename T, int V>
__global__ void LayerNormKernel(const T* x, const T* w, const T* b, T* out, int64_t rows, int64_t n,
                                float eps) {
  const int64_t packs = n / V;
  const auto* wp = reinterpret_cast<const Pack<T, V>*>(w);
  const auto* bp = reinterpret_cast<const Pack<T, V>*>(b);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const auto* xr = reinterpret_cast<const Pack<T, V>*>(x + r * n);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      const Pack<T, V> p = xr[i];
#pragma unroll
      for (int j = 0; j < V; ++j) sum += ToF32(p.v[j]);
    }
    WriteNormedRow<T, V, true>(xr, wp, bp, reinterpret_cast<Pack<T, V>*>(out + r * n), packs,
                               LayerStats(xr, packs, sum, n, eps));
  }
}

// x += y, then out = the norm of x (RMSNorm; LayerNorm when kLayer, with bias b), row by row in one
// kernel: a residual add and the norm that reads its sum. The same threads, packs, sums and
// expressions as AddKernel followed by RmsNormKernel / LayerNormKernel (the sum is rounded to T and
// stored, and the norm reads the stored value), so the bits are those of the two kernels. y is
// read element by element (its alignment does not choose V: the norm's inputs do, as in the norm
// kernels). out may alias y (each element of y is read, before the block's first barrier, by the
// thread that later writes that element of out), not x.
template <typename T, int V, bool kLayer>
__global__ void AddNormKernel(T* x, const T* y, const T* w, const T* b, T* out, int64_t rows,
                              int64_t n, float eps) {
  const int64_t packs = n / V;
  const auto* wp = reinterpret_cast<const Pack<T, V>*>(w);
  const auto* bp = reinterpret_cast<const Pack<T, V>*>(b);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    auto* xr = reinterpret_cast<Pack<T, V>*>(x + r * n);
    const T* yr = y + r * n;
    float sum = 0.0f;  // of x (LayerNorm) or of x^2 (RMSNorm)
    for (int64_t i = threadIdx.x; i < packs; i += blockDim.x) {
      Pack<T, V> p = xr[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        p.v[j] = FromF32<T>(ToF32(p.v[j]) + ToF32(yr[i * V + j]));
        const float v = ToF32(p.v[j]);
        if constexpr (kLayer) {
          sum += v;
        } else {
          sum += v * v;
        }
      }
      xr[i] = p;
    }
    const NormStats stats =
        kLayer ? LayerStats<T, V>(xr, packs, sum, n, eps) : RmsStats(sum, n, eps);
    WriteNormedRow<T, V, kLayer>(xr, wp, bp, reinterpret_cast<Pack<T, V>*>(out + r * n), packs,
                                 stats);
  }
}

// Threads for a row of `items` accesses: about one (V > 1) or four (V = 1) per thread, within
// [32, 1024] and a multiple of 32 (BlockSum needs it).
int NormThreads(int64_t items, int v) {
  const int64_t per = v > 1 ? items : (items + 3) / 4;
  const int64_t rounded = (per + 31) / 32 * 32;
  return static_cast<int>(std::clamp<int64_t>(rounded, 32, 1024));
}

// ---- RoPE ----

// Passed by value as a kernel parameter (2 KiB and the factor, under the 4 KiB parameter limit):
// no upload.
struct RopeFreqs {
  double inv_freq[kMaxRopeHalf];
  double attention_factor;  // multiplies cos/sin before the rounding (exact when 1)
};

// One block per token (strided over the grid): the block first evaluates the token's cos/sin
// table into shared memory, then rotates every head. V elements per access: the launcher picks
// V = 16 / sizeof(T) when half is a multiple of it and x is 16-byte aligned (then every head's
// halves start aligned), else V = 1.
template <typename T, int V>
__global__ void RopeKernel(T* x, int64_t tokens, int heads, int dim, const int32_t* positions,
                           const RopeFreqs freqs) {
  __shared__ float cos_s[kMaxRopeHalf];
  __shared__ float sin_s[kMaxRopeHalf];
  const int half = dim / 2;
  const int packs = half / V;  // per head and half
  for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const double pos = static_cast<double>(positions[t]);
    __syncthreads();  // the previous token's readers of cos_s / sin_s are done
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      double s, c;
      sincos(pos * freqs.inv_freq[i], &s, &c);
      cos_s[i] = static_cast<float>(c * freqs.attention_factor);
      sin_s[i] = static_cast<float>(s * freqs.attention_factor);
    }
    __syncthreads();
    T* row = x + t * static_cast<int64_t>(heads) * dim;
    for (int e = threadIdx.x; e < heads * packs; e += blockDim.x) {
      const int h = e / packs;
      const int i0 = (e - h * packs) * V;
      auto* lo = reinterpret_cast<Pack<T, V>*>(row + static_cast<int64_t>(h) * dim + i0);
      auto* hi = reinterpret_cast<Pack<T, V>*>(row + static_cast<int64_t>(h) * dim + half + i0);
      Pack<T, V> a = *lo;
      Pack<T, V> c = *hi;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float av = ToF32(a.v[j]);
        const float cv = ToF32(c.v[j]);
        const float co = cos_s[i0 + j];
        const float si = sin_s[i0 + j];
        a.v[j] = FromF32<T>(av * co - cv * si);
        c.v[j] = FromF32<T>(cv * co + av * si);
      }
      *lo = a;
      *hi = c;
    }
  }
}

// ---- Flat elementwise ----

struct GeluTanhOp {
  __device__ float operator()(float v) const {
    const float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + 0.044715f * v * v * v)));
  }
};

struct GeluErfOp {
  __device__ float operator()(float v) const {
    const float kInvSqrt2 = 0.7071067811865476f;
    return 0.5f * v * (1.0f + erff(v * kInvSqrt2));
  }
};

template <typename T, int V, typename Op>
__global__ void UnaryKernel(T* x, int64_t n, Op op) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  auto* xp = reinterpret_cast<Pack<T, V>*>(x);
  for (int64_t i = start; i < packs; i += stride) {
    Pack<T, V> p = xp[i];
#pragma unroll
    for (int j = 0; j < V; ++j) p.v[j] = FromF32<T>(op(ToF32(p.v[j])));
    xp[i] = p;
  }
  for (int64_t i = packs * V + start; i < n; i += stride) x[i] = FromF32<T>(op(ToF32(x[i])));
}

template <typename T, int V>
__global__ void AddKernel(T* x, const T* y, int64_t n) {
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t packs = n / V;
  auto* xp = reinterpret_cast<Pack<T, V>*>(x);
  const auto* yp = reinterpret_cast<const Pack<T, V>*>(y);
  for (int64_t i = start; i < packs; i += stride) {
    Pack<T, V> a = xp[i];
    const Pack<T, V> b = yp[i];
#pragma unroll
    for (int j = 0; j < V; ++j) a.v[j] = FromF32<T>(ToF32(a.v[j]) + ToF32(b.v[j]));
    xp[i] = a;
  }
  for (int64_t i = packs * V + start; i < n; i += stride) {
    x[i] = FromF32<T>(ToF32(x[i]) + ToF32(y[i]));
  }
}

// As the CPU backend's std::max(v, 0.0f): NaN and -0 pass through unchanged.
struct ReluOp {
  __device__ float operator()(float v) const { return v < 0.0f ? 0.0f : v; }
};

struct ScaleOp {
  float factor;
  __device__ float operator()(float v) const { return v * factor; }
};

// The gate activations of the gated MLPs: SwiGlu (silu) and GeGlu (tanh-approximated GELU).
struct SiluOp {
  __device__ float operator()(float v) const { return v / (1.0f + expf(-v)); }
};

// out = act(gate) * up. V elements per access (inter a multiple of V and the bases aligned: see
// LaunchGlu).
template <typename T, int V, typename Act>
__global__ void GluKernel(const T* gate_up, T* out, int64_t rows, int64_t inter, Act act) {
  const int64_t packs = inter / V;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const auto* g = reinterpret_cast<const Pack<T, V>*>(gate_up + r * 2 * inter);
    const auto* u = reinterpret_cast<const Pack<T, V>*>(gate_up + r * 2 * inter + inter);
    auto* o = reinterpret_cast<Pack<T, V>*>(out + r * inter);
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const Pack<T, V> gp = g[i];
      const Pack<T, V> up = u[i];
      Pack<T, V> op;
#pragma unroll
      for (int j = 0; j < V; ++j) op.v[j] = FromF32<T>(act(ToF32(gp.v[j])) * ToF32(up.v[j]));
      o[i] = op;
    }
  }
}

template <typename O, typename B>
__global__ void AddBiasKernel(O* out, const B* bias, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    O* o = out + r * cols;
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < cols;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      o[c] = FromF32<O>(ToF32(o[c]) + ToF32(bias[c]));
    }
  }
}

// MergeStates in two kernels: the outputs (which read both lse values), then, stream-ordered
// after them, the lse update. Both compute the weights with the same expressions, hence the same
// values. o: blockDim.y pairs per block, threadIdx.x strides over a pair's V-element packs.
template <typename T, int V>
__global__ void MergeOutputsKernel(T* o_a, const float* lse_a, const T* o_b, const float* lse_b,
                                   int64_t pairs, int64_t packs_per_pair, float b_log_weight) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.y) {
    const float la = lse_a[p];
    const float lb = lse_b[p] + b_log_weight;
    const float m = fmaxf(la, lb);
    if (m == -INFINITY) continue;  // neither state saw a key: `a` stays as it is
    const float wa = expf(la - m);
    const float wb = expf(lb - m);
    const float total = wa + wb;
    auto* a = reinterpret_cast<Pack<T, V>*>(o_a) + p * packs_per_pair;
    const auto* b = reinterpret_cast<const Pack<T, V>*>(o_b) + p * packs_per_pair;
    for (int64_t i = threadIdx.x; i < packs_per_pair; i += blockDim.x) {
      Pack<T, V> x = a[i];
      const Pack<T, V> y = b[i];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        x.v[j] = FromF32<T>((wb * ToF32(y.v[j]) + wa * ToF32(x.v[j])) / total);
      }
      a[i] = x;
    }
  }
}

__global__ void MergeLseKernel(float* lse_a, const float* lse_b, int64_t pairs,
                               float b_log_weight) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float la = lse_a[p];
    const float lb = lse_b[p] + b_log_weight;
    const float m = fmaxf(la, lb);
    if (m == -INFINITY) continue;
    const float wa = expf(la - m);
    const float wb = expf(lb - m);
    lse_a[p] = m + logf(wa + wb);
  }
}

template <typename T>
__global__ void FillKernel(T* p, int64_t n, float value) {
  const T v = FromF32<T>(value);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    p[i] = v;
  }
}

__device__ __forceinline__ uint32_t Mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

template <typename T>
__global__ void FillRandomKernel(T* p, int64_t n, uint32_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint32_t lo = static_cast<uint32_t>(i);
    const uint32_t hi = static_cast<uint32_t>(static_cast<uint64_t>(i) >> 32);
    const uint32_t h = Mix32(seed ^ Mix32(lo ^ Mix32(hi + 0x9e3779b9u)));
    const float magnitude = 0.25f + 0.75f * static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
    p[i] = FromF32<T>((h & 1u) ? -magnitude : magnitude);
  }
}

}  // namespace

cudaError_t LaunchConvert(const void* src, ElemType src_type, void* dst, ElemType dst_type,
                          int64_t n, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  constexpr int V = 4;
  const bool vec = AlignedTo(src, V * ElemSize(src_type)) && AlignedTo(dst, V * ElemSize(dst_type));
  const int blocks = BlocksFor(vec ? n / V : n, kThreads);
  return DispatchType(src_type, [&](auto s) {
    using S = typename decltype(s)::type;
    return DispatchType(dst_type, [&](auto d) {
      using D = typename decltype(d)::type;
      if (vec) {
        return Launch(ConvertKernel<S, D, V>, blocks, kThreads, 0, stream,
                      static_cast<const S*>(src), static_cast<D*>(dst), n);
      }
      return Launch(ConvertKernel<S, D, 1>, blocks, kThreads, 0, stream, static_cast<const S*>(src),
                    static_cast<D*>(dst), n);
    });
  });
}

cudaError_t LaunchGatherRows(const void* x, int64_t x_rows, const int32_t* rows, int64_t num_rows,
                             size_t row_bytes, void* out, cudaStream_t stream) {
  if (num_rows < 0 || x_rows < 0) return cudaErrorInvalidValue;
  if (num_rows == 0 || row_bytes == 0) return cudaSuccess;
  // The widest word that divides the row and aligns both bases (hence every row start).
  auto fits = [&](size_t word) {
    return row_bytes % word == 0 && AlignedTo(x, word) && AlignedTo(out, word);
  };
  if (fits(16)) return LaunchGatherWords<uint4>(x, x_rows, rows, num_rows, row_bytes, out, stream);
  if (fits(4)) {
    return LaunchGatherWords<uint32_t>(x, x_rows, rows, num_rows, row_bytes, out, stream);
  }
  if (fits(2)) {
    return LaunchGatherWords<uint16_t>(x, x_rows, rows, num_rows, row_bytes, out, stream);
  }
  return LaunchGatherWords<uint8_t>(x, x_rows, rows, num_rows, row_bytes, out, stream);
}

cudaError_t LaunchCopy2D(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t width_bytes, int64_t rows, cudaStream_t stream) {
  if (rows < 0) return cudaErrorInvalidValue;
  if (rows == 0 || width_bytes == 0) return cudaSuccess;
  // A word size dividing the width and both pitches, with both bases aligned to it, keeps every
  // word of every row aligned.
  auto fits = [&](size_t word) {
    return width_bytes % word == 0 && dst_pitch % word == 0 && src_pitch % word == 0 &&
           AlignedTo(dst, word) && AlignedTo(src, word);
  };
  if (fits(16)) {
    return LaunchCopy2DWords<uint4>(dst, dst_pitch, src, src_pitch, width_bytes, rows, stream);
  }
  if (fits(4)) {
    return LaunchCopy2DWords<uint32_t>(dst, dst_pitch, src, src_pitch, width_bytes, rows, stream);
  }
  if (fits(2)) {
    return LaunchCopy2DWords<uint16_t>(dst, dst_pitch, src, src_pitch, width_bytes, rows, stream);
  }
  return LaunchCopy2DWords<uint8_t>(dst, dst_pitch, src, src_pitch, width_bytes, rows, stream);
}

cudaError_t LaunchEmbeddingAdd(const int32_t* ids, int64_t tokens, const void* table,
                               int64_t table_rows, int64_t hidden, void* out, ElemType type,
                               cudaStream_t stream) {
  if (tokens < 0 || hidden < 0 || table_rows < 0) return cudaErrorInvalidValue;
  if (tokens == 0 || hidden == 0) return cudaSuccess;
  const int threads = ThreadsFor(hidden);
  const dim3 grid(BlocksFor(hidden, threads), GridY(tokens));
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Launch(EmbeddingAddKernel<T>, grid, threads, 0, stream, ids, tokens,
                  static_cast<const T*>(table), table_rows, hidden, static_cast<T*>(out));
  });
}

cudaError_t LaunchRmsNorm(const void* x, const void* weight, void* out, ElemType type, int64_t rows,
                          int64_t n, float eps, cudaStream_t stream) {
  if (rows < 0 || n < 0) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  const int blocks = BlocksFor(rows, 1, kMaxRowBlocks);
  const bool aligned = AlignedTo(x, 16) && AlignedTo(weight, 16) && AlignedTo(out, 16);
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    if (aligned && n % V == 0) {
      return Launch(RmsNormKernel<T, V>, blocks, NormThreads(n / V, V), 0, stream,
                    static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(out),
                    rows, n, eps);
    }
    return Launch(RmsNormKernel<T, 1>, blocks, NormThreads(n, 1), 0, stream,
                  static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(out),
                  rows, n, eps);
  });
}

cudaError_t LaunchLayerNorm(const void* x, const void* weight, const void* bias, void* out,
                            ElemType type, int64_t rows, int64_t n, float eps,
                            cudaStream_t stream) {
  if (rows < 0 || n < 0) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  const int blocks = BlocksFor(rows, 1, kMaxRowBlocks);
  const bool aligned =
      AlignedTo(x, 16) && AlignedTo(weight, 16) && AlignedTo(bias, 16) && AlignedTo(out, 16);
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    if (aligned && n % V == 0) {
      return Launch(LayerNormKernel<T, V>, blocks, NormThreads(n / V, V), 0, stream,
                    static_cast<const T*>(x), static_cast<const T*>(weight),
                    static_cast<const T*>(bias), static_cast<T*>(out), rows, n, eps);
    }
    return Launch(LayerNormKernel<T, 1>, blocks, NormThreads(n, 1), 0, stream,
                  static_cast<const T*>(x), static_cast<const T*>(weight),
                  static_cast<const T*>(bias), static_cast<T*>(out), rows, n, eps);
  });
}

cudaError_t LaunchAddNorm(void* x, const void* y, const void* weight, const void* bias, void* out,
                          ElemType type, int64_t rows, int64_t n, float eps, cudaStream_t stream) {
  if (rows < 0 || n < 0) return cudaErrorInvalidValue;
  if (rows == 0 || n == 0) return cudaSuccess;
  const int blocks = BlocksFor(rows, 1, kMaxRowBlocks);
  // V as the norm's own launcher picks it, so the sums run in the same order.
  const bool aligned = AlignedTo(x, 16) && AlignedTo(weight, 16) && AlignedTo(out, 16) &&
                       (bias == nullptr || AlignedTo(bias, 16));
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    auto launch = [&](auto kernel, int v) {
      return Launch(kernel, blocks, NormThreads(n / v, v), 0, stream, static_cast<T*>(x),
                    static_cast<const T*>(y), static_cast<const T*>(weight),
                    static_cast<const T*>(bias), static_cast<T*>(out), rows, n, eps);
    };
    if (bias != nullptr) {
      return aligned && n % V == 0 ? launch(AddNormKernel<T, V, true>, V)
                                   : launch(AddNormKernel<T, 1, true>, 1);
    }
    return aligned && n % V == 0 ? launch(AddNormKernel<T, V, false>, V)
                                 : launch(AddNormKernel<T, 1, false>, 1);
  });
}

cudaError_t LaunchRope(void* x, ElemType type, int64_t tokens, int64_t heads, int64_t head_dim,
                       const int32_t* positions, const double* inv_freq, double attention_factor,
                       cudaStream_t stream) {
  if (tokens < 0 || heads < 0 || head_dim < 0 || head_dim % 2 != 0 || head_dim / 2 > kMaxRopeHalf ||
      heads * head_dim > std::numeric_limits<int32_t>::max()) {
    return cudaErrorInvalidValue;
  }
  if (tokens == 0 || heads == 0 || head_dim == 0) return cudaSuccess;
  RopeFreqs freqs{};
  for (int64_t i = 0; i < head_dim / 2; ++i) freqs.inv_freq[i] = inv_freq[i];
  freqs.attention_factor = attention_factor;
  const int threads = 128;
  const int blocks = BlocksFor(tokens, 1, kMaxRowBlocks);
  const int64_t half = head_dim / 2;
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    if (AlignedTo(x, 16) && half % V == 0) {
      return Launch(RopeKernel<T, V>, blocks, threads, 0, stream, static_cast<T*>(x), tokens,
                    static_cast<int>(heads), static_cast<int>(head_dim), positions, freqs);
    }
    return Launch(RopeKernel<T, 1>, blocks, threads, 0, stream, static_cast<T*>(x), tokens,
                  static_cast<int>(heads), static_cast<int>(head_dim), positions, freqs);
  });
}

namespace {

template <typename Op>
cudaError_t LaunchUnary(void* x, ElemType type, int64_t n, Op op, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  const bool vec = AlignedTo(x, 16);
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    if (vec) {
      return Launch(UnaryKernel<T, V, Op>, BlocksFor(n / V, kThreads), kThreads, 0, stream,
                    static_cast<T*>(x), n, op);
    }
    return Launch(UnaryKernel<T, 1, Op>, BlocksFor(n, kThreads), kThreads, 0, stream,
                  static_cast<T*>(x), n, op);
  });
}

}  // namespace

cudaError_t LaunchGeluTanh(void* x, ElemType type, int64_t n, cudaStream_t stream) {
  return LaunchUnary(x, type, n, GeluTanhOp{}, stream);
}

cudaError_t LaunchGeluErf(void* x, ElemType type, int64_t n, cudaStream_t stream) {
  return LaunchUnary(x, type, n, GeluErfOp{}, stream);
}

namespace {

template <typename Act>
cudaError_t LaunchGlu(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                      Act act, cudaStream_t stream) {
  if (rows < 0 || inter < 0) return cudaErrorInvalidValue;
  if (rows == 0 || inter == 0) return cudaSuccess;
  const bool aligned = AlignedTo(gate_up, 16) && AlignedTo(out, 16);
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    if (aligned && inter % V == 0) {
      const int threads = ThreadsFor(inter / V);
      const dim3 grid(BlocksFor(inter / V, threads), GridY(rows));
      return Launch(GluKernel<T, V, Act>, grid, threads, 0, stream, static_cast<const T*>(gate_up),
                    static_cast<T*>(out), rows, inter, act);
    }
    const int threads = ThreadsFor(inter);
    const dim3 grid(BlocksFor(inter, threads), GridY(rows));
    return Launch(GluKernel<T, 1, Act>, grid, threads, 0, stream, static_cast<const T*>(gate_up),
                  static_cast<T*>(out), rows, inter, act);
  });
}

}  // namespace

cudaError_t LaunchSwiGlu(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                         cudaStream_t stream) {
  return LaunchGlu(gate_up, out, type, rows, inter, SiluOp{}, stream);
}

cudaError_t LaunchGeGlu(const void* gate_up, void* out, ElemType type, int64_t rows, int64_t inter,
                        cudaStream_t stream) {
  return LaunchGlu(gate_up, out, type, rows, inter, GeluTanhOp{}, stream);
}

cudaError_t LaunchRelu(void* x, ElemType type, int64_t n, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  const bool vec = AlignedTo(x, 16);
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    if (vec) {
      return Launch(UnaryKernel<T, V, ReluOp>, BlocksFor(n / V, kThreads), kThreads, 0, stream,
                    static_cast<T*>(x), n, ReluOp{});
    }
    return Launch(UnaryKernel<T, 1, ReluOp>, BlocksFor(n, kThreads), kThreads, 0, stream,
                  static_cast<T*>(x), n, ReluOp{});
  });
}

cudaError_t LaunchScale(void* x, ElemType type, int64_t n, float factor, cudaStream_t stream) {
  return LaunchUnary(x, type, n, ScaleOp{factor}, stream);
}

cudaError_t LaunchAdd(void* x, const void* y, ElemType type, int64_t n, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  const bool vec = AlignedTo(x, 16) && AlignedTo(y, 16);
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    if (vec) {
      return Launch(AddKernel<T, V>, BlocksFor(n / V, kThreads), kThreads, 0, stream,
                    static_cast<T*>(x), static_cast<const T*>(y), n);
    }
    return Launch(AddKernel<T, 1>, BlocksFor(n, kThreads), kThreads, 0, stream, static_cast<T*>(x),
                  static_cast<const T*>(y), n);
  });
}

cudaError_t LaunchAddBias(void* out, ElemType out_type, const void* bias, ElemType bias_type,
                          int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols < 0) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int threads = ThreadsFor(cols);
  const dim3 grid(BlocksFor(cols, threads), GridY(rows));
  return DispatchType(out_type, [&](auto o) {
    using O = typename decltype(o)::type;
    return DispatchType(bias_type, [&](auto b) {
      using B = typename decltype(b)::type;
      return Launch(AddBiasKernel<O, B>, grid, threads, 0, stream, static_cast<O*>(out),
                    static_cast<const B*>(bias), rows, cols);
    });
  });
}

cudaError_t LaunchMergeStates(void* o_a, float* lse_a, const void* o_b, const float* lse_b,
                              ElemType o_type, int64_t tokens, int64_t heads, int64_t head_dim,
                              float b_log_weight, cudaStream_t stream) {
  if (tokens < 0 || heads < 0 || head_dim < 0) return cudaErrorInvalidValue;
  const int64_t pairs = tokens * heads;
  if (pairs == 0) return cudaSuccess;
  const bool aligned = AlignedTo(o_a, 16) && AlignedTo(o_b, 16);
  const cudaError_t error = DispatchType(o_type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int V = 16 / sizeof(T);
    const int v = aligned && head_dim % V == 0 ? V : 1;
    const int64_t packs = head_dim / v;
    const int bx = static_cast<int>(std::clamp<int64_t>(packs, 1, kThreads));
    const dim3 block(bx, std::max(1, kThreads / bx));
    const int blocks = BlocksFor(pairs, static_cast<int>(block.y), kMaxRowBlocks);
    if (packs == 0) return cudaSuccess;
    if (v == V) {
      return Launch(MergeOutputsKernel<T, V>, blocks, block, 0, stream, static_cast<T*>(o_a), lse_a,
                    static_cast<const T*>(o_b), lse_b, pairs, packs, b_log_weight);
    }
    return Launch(MergeOutputsKernel<T, 1>, blocks, block, 0, stream, static_cast<T*>(o_a), lse_a,
                  static_cast<const T*>(o_b), lse_b, pairs, packs, b_log_weight);
  });
  if (error != cudaSuccess) return error;
  return Launch(MergeLseKernel, BlocksFor(pairs, kThreads), kThreads, 0, stream, lse_a, lse_b,
                pairs, b_log_weight);
}

cudaError_t LaunchFill(void* p, ElemType type, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Launch(FillKernel<T>, BlocksFor(n, kThreads), kThreads, 0, stream, static_cast<T*>(p), n,
                  value);
  });
}

cudaError_t LaunchFillRandom(void* p, ElemType type, int64_t n, uint32_t seed,
                             cudaStream_t stream) {
  if (n <= 0) return n == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return DispatchType(type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    return Launch(FillRandomKernel<T>, BlocksFor(n, kThreads), kThreads, 0, stream,
                  static_cast<T*>(p), n, seed);
  });
}

}  // namespace manyshot::cuda

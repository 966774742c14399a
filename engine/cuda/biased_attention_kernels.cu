// The scalar biased-attention kernel (contract in biased_attention_kernels.h), for what the
// tensor-core flash kernel does not take (f32 K/V, head_dims other than 64/80/128, misaligned
// K/V), and the launch that picks between the two. Work decomposition as in
// attention_kernels.cu's GenericKernel: the rows of a problem are flattened with the q heads of
// one GQA group into M rows (m = c * group + hg), so a block reads each K/V tile once for all the
// heads sharing it. Grid: x = M tiles of every problem (prefix sums in tile_start), y = kv head.
// Block: 4 warps x 4 M rows. Per tile of 32 keys (converted to f32 in shared memory, K rows padded
// to a stride of 1 mod 32 words so lane j reading key j is conflict-free), lane j computes the
// logits of key n0 + j for its warp's 4 rows, including the bias; the warp reduces max / sum by
// shuffles (online softmax, log2 units); P goes through shared memory into O, where lane l owns
// dims l, l + 32, ... The tile steps are attention_device.cuh's, shared with GenericKernel; only
// the logits (bias, ALiBi, causal limit per problem) are this kernel's own.
#include "engine/cuda/biased_attention_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "engine/cuda/attention_device.cuh"

namespace manyshot::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kBm = kWarps * kRowsPerWarp;  // M rows per block
constexpr int kBn = 32;                     // keys per tile
constexpr int kThreads = kWarps * 32;

struct BiasedKernelParams {
  BiasedAttnParams a;
  int32_t tile_start[kMaxBiasedProblems + 1];  // prefix sum of M tiles per problem
};

size_t BiasedSmem(int head_dim) {
  const size_t dp = PaddedDim(head_dim);
  const size_t floats = kBm * dp + kBn * (dp + 1) + kBn * dp + kBm * kBn;
  return floats * sizeof(float) + kBm * (sizeof(int64_t) + 3 * sizeof(int));
}

// The problem whose M tiles include block x (last problem with tile_start <= x).
__device__ __forceinline__ int FindTileProblem(const BiasedKernelParams& p, int x) {
  int lo = 0, hi = p.a.num_problems - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (p.tile_start[mid] <= x) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

template <typename KV>
__global__ void __launch_bounds__(kThreads)
    BiasedKernel(const __grid_constant__ BiasedKernelParams kp) {
  const BiasedAttnParams& p = kp.a;
  const int dim = p.head_dim;
  const int dp = PaddedDim(dim);
  const int ldk = dp + 1;
  unsigned char* bsmem = DynamicSmem();
  float* s_q = reinterpret_cast<float*>(bsmem);  // [kBm][dp]
  float* s_k = s_q + kBm * dp;                   // [kBn][dp + 1]
  float* s_v = s_k + kBn * ldk;                  // [kBn][dp]
  float* s_p = s_v + kBn * dp;                   // [kBm][kBn]
  // Offset in floats: 80 * dp + 544, a multiple of 2: 8-byte aligned.
  int64_t* s_off = reinterpret_cast<int64_t*>(s_p + kBm * kBn);  // [kBm] q row * heads + head
  int* s_lim = reinterpret_cast<int*>(s_off + kBm);              // [kBm] visible keys
  int* s_c = s_lim + kBm;                                        // [kBm] row in the problem
  int* s_h = s_c + kBm;                                          // [kBm] q head

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int prob = FindTileProblem(kp, blockIdx.x);
  const BiasedProblem& pr = p.problems[prob];
  const int group = p.heads / p.kv_heads;
  const int g = blockIdx.y;
  const int m0 = (static_cast<int>(blockIdx.x) - kp.tile_start[prob]) * kBm;
  const int m_count = pr.rows * group;
  // Keys any row of this tile may see: all, or up to the causal limit of its last row.
  int ke = pr.num_keys;
  if (pr.causal_base >= 0) {
    const int c_last = (min(m0 + kBm, m_count) - 1) / group;
    ke = max(0, min(ke, pr.causal_base + c_last + 1));
  }

  for (int t = tid; t < kBm; t += kThreads) {
    const int m = m0 + t;
    int64_t off = -1;
    int lim = 0, c = 0, h = 0;
    if (m < m_count) {
      c = m / group;
      h = g * group + (m - c * group);
      off = static_cast<int64_t>(pr.q_begin + c) * p.heads + h;
      lim = pr.causal_base >= 0 ? max(0, min(pr.num_keys, pr.causal_base + c + 1)) : pr.num_keys;
    }
    s_off[t] = off;
    s_lim[t] = lim;
    s_c[t] = c;
    s_h[t] = h;
  }
  __syncthreads();
  LoadQTile<kBm, kThreads>(p.q, p.q_type, s_off, dim, dp, s_q);
  // (the barrier at the top of the key loop publishes s_q; with no key tile s_q is unused)

  const int row0 = warp * kRowsPerWarp;
  const BiasKind kind = pr.bias_kind;
  int lim[kRowsPerWarp];
  float m_run[kRowsPerWarp], l_run[kRowsPerWarp], o[kRowsPerWarp][kLaneDims];
  // Per row: the bias row indexed by key (kDense, kRelative), or the ALiBi slope and query
  // position. Rows past the problem have lim = 0 and never read them.
  const float* brow[kRowsPerWarp];
  float slope[kRowsPerWarp];
  int32_t qpos[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = row0 + rr;
    lim[rr] = min(ke, s_lim[r]);
    m_run[rr] = NegInf();
    l_run[rr] = 0.0f;  // lane-partial: this lane's key of every tile
#pragma unroll
    for (int t = 0; t < kLaneDims; ++t) o[rr][t] = 0.0f;
    brow[rr] = nullptr;
    slope[rr] = 0.0f;
    qpos[rr] = 0;
    if (s_off[r] >= 0 && lim[rr] > 0) {
      const int c = s_c[r];
      const int h = s_h[r];
      if (kind == BiasKind::kDense) {
        brow[rr] = pr.bias + (static_cast<int64_t>(h) * pr.rows + c) * pr.num_keys;
      } else if (kind == BiasKind::kRelative) {
        // Row c's key j is diagonal j - c + rows - 1.
        brow[rr] =
            pr.bias + static_cast<int64_t>(h) * (pr.rows + pr.num_keys - 1) + (pr.rows - 1 - c);
      } else if (kind == BiasKind::kAlibi) {
        slope[rr] = pr.slopes[h];
        qpos[rr] = pr.query_pos[c];
      }
    }
  }
  const float scale = p.scale;
  const float softcap = p.softcap;
  const float log_weight = pr.log_weight;
  const int w_from = pr.weighted_from;
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * dim;
  const KV* k_base = static_cast<const KV*>(pr.k) + static_cast<int64_t>(g) * dim;
  const KV* v_base = static_cast<const KV*>(pr.v) + static_cast<int64_t>(g) * dim;

  for (int n0 = 0; n0 < ke; n0 += kBn) {
    __syncthreads();  // the previous tile is consumed (and s_q is published)
    LoadKvTile<kBn, kThreads>(k_base, v_base, kv_stride, n0, ke, dim, dp, s_k, s_v);
    __syncthreads();

    const int j = n0 + lane;
    float sc[kRowsPerWarp];
    TileDots<kRowsPerWarp>(s_q + row0 * dp, s_k, lane, dim, dp, sc);
    const int32_t kpos = (kind == BiasKind::kAlibi && j < ke) ? pr.key_pos[j] : 0;
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      float x = NegInf();
      if (j < lim[rr]) {
        // The CPU's order: scale * q.k, then the log-weight, then the bias; then log2 units.
        float s = sc[rr] * scale;
        if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
        if (j >= w_from) s += log_weight;
        if (brow[rr] != nullptr) {
          s += brow[rr][j];
        } else if (kind == BiasKind::kAlibi) {
          s += slope[rr] * static_cast<float>(kpos - qpos[rr]);
        }
        x = s * kLog2e;
      }
      s_p[(row0 + rr) * kBn + lane] = OnlineSoftmaxStep(x, m_run[rr], l_run[rr], o[rr]);
    }
    __syncwarp();
    const int n_here = min(kBn, ke - n0);  // keys past the range have p = 0: skip them
    AccumulatePv<kRowsPerWarp, kBn>(s_v, s_p + row0 * kBn, n_here, dp, lane, o);
    // s_p is rewritten only after the next iteration's barriers.
  }

  float l_tot[kRowsPerWarp];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) l_tot[rr] = WarpSum(l_run[rr]);
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int64_t off = s_off[row0 + rr];
    if (off < 0) continue;
    const RowTotals fin = FinishRow(m_run[rr], l_tot[rr]);
    StoreORow(p.o, p.o_type, off, dim, lane, o[rr], fin.inv);
    if (lane == 0 && p.lse != nullptr) p.lse[off] = fin.lse;
  }
}

using KernelFn = void (*)(BiasedKernelParams);

bool Valid(const BiasedAttnParams& p) {
  if (p.q == nullptr || p.o == nullptr) return false;
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.kv_heads > 65535) {
    return false;
  }
  if (p.head_dim < 1 || p.head_dim > 256 || p.tokens < 0 || !(p.softcap >= 0.0f)) return false;
  if (p.num_problems < 0 || p.num_problems > kMaxBiasedProblems) return false;
  const int64_t group = p.heads / p.kv_heads;
  for (int i = 0; i < p.num_problems; ++i) {
    const BiasedProblem& pr = p.problems[i];
    if (pr.rows < 0 || pr.num_keys < 0 || pr.q_begin < 0) return false;
    if (static_cast<int64_t>(pr.q_begin) + pr.rows > p.tokens) return false;
    if (static_cast<int64_t>(pr.rows) * group > INT32_MAX / 2) return false;
    if (pr.rows == 0 || pr.num_keys == 0) continue;  // no key is read
    if (pr.k == nullptr || pr.v == nullptr) return false;
    switch (pr.bias_kind) {
      case BiasKind::kNone:
        break;
      case BiasKind::kDense:
      case BiasKind::kRelative:
        if (pr.bias == nullptr) return false;
        break;
      case BiasKind::kAlibi:
        if (pr.slopes == nullptr || pr.key_pos == nullptr || pr.query_pos == nullptr) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

cudaError_t LaunchBiasedAttention(const BiasedAttnParams& p, cudaStream_t stream) {
  if (!Valid(p)) return cudaErrorInvalidValue;
  if (BiasedFlashTakes(p)) return LaunchBiasedFlashAttention(p, stream);
  return LaunchBiasedAttentionScalar(p, stream);
}

cudaError_t LaunchBiasedAttentionScalar(const BiasedAttnParams& p, cudaStream_t stream) {
  if (!Valid(p)) return cudaErrorInvalidValue;
  // ~12 KiB of descriptors: on the heap rather than the caller's stack (value-initialised).
  auto kp = std::make_unique<BiasedKernelParams>();
  kp->a = p;
  const int64_t group = p.heads / p.kv_heads;
  int64_t tiles = 0;
  for (int i = 0; i < p.num_problems; ++i) {
    kp->tile_start[i] = static_cast<int32_t>(tiles);
    tiles += (static_cast<int64_t>(p.problems[i].rows) * group + kBm - 1) / kBm;
    if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  }
  kp->tile_start[p.num_problems] = static_cast<int32_t>(tiles);
  if (tiles == 0) return cudaSuccess;
  KernelFn fn;
  switch (p.kv_type) {
    case ElemType::kF16:
      fn = BiasedKernel<__half>;
      break;
    case ElemType::kBF16:
      fn = BiasedKernel<__nv_bfloat16>;
      break;
    default:
      fn = BiasedKernel<float>;
      break;
  }
  const size_t smem = BiasedSmem(p.head_dim);
  // Raised to the largest need (head_dim 256), so once for every head_dim.
  cudaError_t err = AllowDynamicSmem(fn, smem, BiasedSmem(256));
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(p.kv_heads));
  void* args[] = {kp.get()};
  return LaunchResult(cudaLaunchKernel(fn, grid, dim3(kThreads), args, smem, stream));
}

}  // namespace manyshot::cuda

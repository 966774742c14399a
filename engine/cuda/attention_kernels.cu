// Rescaled attention kernels (see attention_kernels.h for the contract and
// engine/cpu/cpu_attention.cc for the reference semantics).
//
// Work decomposition (both ops). The rows of a "problem" that share one set of keys are
// flattened, together with the q heads of one GQA group, into an M dimension:
//   m = c * group + hg   (c: compact row index inside the problem, hg: head inside the group),
// so a block's M tile reads each K/V tile once for every row and every q head of the group
// (Hydragen / FlashInfer cascade style). Grid: x = M tiles (of all problems), y = kv head,
// z = split of the key range (flash-decoding). With more than one split, every block writes a
// normalised partial (o, lse) in f32 into stream-ordered scratch and FinalizeKernel merges them.
//   AttendContext: one problem, the rows of every sequence whose own index >= context_from (a
//                  RowMap of contiguous row segments), keys = the shared context.
//   AttendOwn:     one problem per sequence (rows q_begin.., keys = its own K/V, causal).
//   Biased (LaunchBiasedFlashAttention, biased_attention_kernels.h): one problem per biased
//                  problem, as AttendOwn's (causal from causal_base, or a limit at num_keys that
//                  lets every key through), with a ProblemBias each.
//
// Kernels:
//   FlashKernel  16-bit K/V (f16, bf16), head_dim 64/80/128, 16-byte aligned K/V: tensor cores
//                (mma.sync m16n8k16, f32 accumulation), K/V tiles staged by cp.async in a
//                multi-stage pipeline, online softmax in registers (FlashAttention-2 layout).
//                Its score transform is a variant (attention_variants.cuh): PlainVariant for
//                AttendOwn / AttendContext, T5BiasVariant and AlibiVariant for biased attention.
//   GenericKernel every other case (f32 K/V, any head_dim in [1, 256], misaligned views):
//                one key per lane, tiles of 32 keys staged in shared memory as f32.
//   FinalizeKernel merges split partials, or writes o = 0 / lse = -inf for rows that see no key
//                of the call (rows before context_from, or an empty context).
//
// Logits are kept in log2 units inside the kernels (x = logit * log2(e), exp2 on the SFU);
// lse is converted back to natural log on output: lse = (max2 + log2(sum)) * ln(2). The device
// helpers shared with biased_attention_kernels.cu (loads, stores, exp2, warp reductions) are in
// attention_device.cuh.
#include "engine/cuda/attention_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <utility>

#include "engine/cuda/attention_device.cuh"
#include "engine/cuda/attention_variants.cuh"
#include "engine/cuda/biased_attention_kernels.h"
#include "engine/cuda/ptx_instructions.cuh"

namespace manyshot::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// Kernel parameters (passed by value as a __grid_constant__ parameter, ~7 KB; sm_90 + CUDA 12.1+
// allow up to 32 KB).

// Maps a compact row index c (0 .. total) of a set of rows to the q row: the set is a list of
// contiguous segments; segment s covers compact indices [seg_start[s], seg_start[s + 1]) and q
// rows seg_row[s] + (c - seg_start[s]).
struct RowMap {
  int32_t num_segments;
  int32_t seg_row[kMaxAttnSequences];
  int32_t seg_start[kMaxAttnSequences + 1];
};

struct Problem {
  const void* k;  // keys [num_keys, kv_heads, head_dim] of the kernel's K/V type
  const void* v;
  int32_t num_keys;       // own: kv_len; context: context_len
  int32_t m_count;        // rows * group
  int32_t q_begin;        // own: q row of compact row 0
  int32_t key_base;       // own: own index of compact row 0 (kv_len - q_len); row c sees keys
                          //      [0, key_base + c + 1)
  int32_t weighted_from;  // own: keys >= weighted_from get log2_weight added
  float log2_weight;      // own: own_log_weight * log2(e)
};

struct KernelParams {
  const void* q;
  void* o;
  float* lse;           // may be null (then not written)
  float* part_o;        // splits > 1: [splits][tokens * heads][head_dim] f32
  float* part_lse;      // splits > 1: [splits][tokens * heads] f32 (natural log)
  int64_t part_stride;  // tokens * heads
  int32_t heads;
  int32_t kv_heads;
  int32_t group;  // heads / kv_heads
  int32_t head_dim;
  int32_t splits;
  int32_t num_problems;
  ElemType q_type;
  ElemType o_type;
  float scale_log2;                           // scale * log2(e)
  float cap_log2;                             // soft-capping: softcap * log2(e); 0: none
  float dot_to_capped;                        // soft-capping: scale / softcap
  int32_t tile_start[kMaxAttnSequences + 1];  // prefix sum of M tiles per problem
  Problem problems[kMaxAttnSequences];
  RowMap rows;  // context: compact row -> q row (own problems use q_begin + c)
};

// The biased variants' parameters: the bias of every problem beside it (attention_variants.cuh).
struct BiasedFlashParams : KernelParams {
  ProblemBias bias[kMaxAttnSequences];
};

// The parameter struct of the flash kernel of variant V.
template <typename V>
using ParamsOf = std::conditional_t<V::kAddsBias, BiasedFlashParams, KernelParams>;

struct FinalizeParams {
  void* o;
  float* lse;
  const float* part_o;
  const float* part_lse;
  int64_t part_stride;
  int32_t heads;
  int32_t head_dim;
  int32_t splits;
  int32_t merge;       // 1: merge split partials; 0: write o = 0, lse = -inf
  int64_t total_rows;  // compact rows in `rows`
  ElemType o_type;
  RowMap rows;
};

// ---------------------------------------------------------------------------------------------
// Device helpers.

__device__ __forceinline__ int CeilDivD(int a, int b) { return (a + b - 1) / b; }

// 16-bit bits of a float rounded to T (nearest even).
template <typename T>
__device__ __forceinline__ uint16_t ToBits(float x) {
  if constexpr (std::is_same_v<T, __half>) {
    return __half_as_ushort(__float2half_rn(x));
  } else {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
}

// Two floats rounded to T (one cvt instruction), packed with `lo` in the low half (the lower
// column of an mma fragment register).
template <typename T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&u, &v, sizeof(u));
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &v, sizeof(u));
  }
  return u;
}

// q row of compact row c (binary search for the last segment starting at or before c).
__device__ __forceinline__ int32_t RowOf(const RowMap& map, int32_t c) {
  int lo = 0, hi = map.num_segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (map.seg_start[mid] <= c) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return map.seg_row[lo] + (c - map.seg_start[lo]);
}

// The problem whose M tiles include block x (last problem with tile_start <= x).
__device__ __forceinline__ int FindProblem(const KernelParams& p, int x) {
  int lo = 0, hi = p.num_problems - 1;
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

// Gemma 2's soft-capping of a logit, in log2 units: softcap * tanh(scale * dot / softcap) *
// log2(e). The flag is uniform over the launch, so the branch never diverges.
struct SoftCap {
  float cap_log2;
  float dot_to_capped;
  __device__ __forceinline__ bool on() const { return cap_log2 > 0.0f; }
  __device__ __forceinline__ float operator()(float dot) const {
    return cap_log2 * tanhf(dot * dot_to_capped);
  }
};

// The key range [kb, ke) of this block, and mask_from: keys >= mask_from may be masked for some
// row of the tile (own: the causal limit of its first row; context: the range end), so tiles
// entirely below it skip the per-element masks.
struct KeyRange {
  int kb, ke, mask_from;
};

template <bool kOwn, int kBm, int kBn>
__device__ __forceinline__ KeyRange BlockKeyRange(const KernelParams& p, const Problem& pr,
                                                  int m0) {
  int tile_keys, min_lim;
  if constexpr (kOwn) {
    const int m_last = min(m0 + kBm, pr.m_count) - 1;
    tile_keys = max(0, min(pr.num_keys, pr.key_base + m_last / p.group + 1));
    min_lim = max(0, min(pr.num_keys, pr.key_base + m0 / p.group + 1));
  } else {
    tile_keys = pr.num_keys;
    min_lim = tile_keys;
  }
  // Chunks are whole tiles, so only the last tile of the range can be partial.
  const int chunk = CeilDivD(CeilDivD(tile_keys, p.splits), kBn) * kBn;
  KeyRange r;
  r.kb = min(tile_keys, static_cast<int>(blockIdx.z) * chunk);
  r.ke = min(tile_keys, r.kb + chunk);
  r.mask_from = min(r.ke, min_lim);
  return r;
}

// Per M row of the tile: off = q row * heads + q head (-1: past the problem's rows, never
// written), lim = keys visible to it (own: causal limit; context: all).
template <bool kOwn, int kBm, int kThreads>
__device__ __forceinline__ void SetupRows(const KernelParams& p, const Problem& pr, int m0, int g,
                                          int64_t* s_off, int* s_lim) {
  for (int t = threadIdx.x; t < kBm; t += kThreads) {
    const int m = m0 + t;
    int64_t off = -1;
    int lim = 0;
    if (m < pr.m_count) {
      const int c = m / p.group;
      const int hg = m - c * p.group;
      const int row = kOwn ? pr.q_begin + c : RowOf(p.rows, c);
      off = static_cast<int64_t>(row) * p.heads + g * p.group + hg;
      lim = kOwn ? max(0, min(pr.num_keys, pr.key_base + c + 1)) : INT_MAX;
    }
    s_off[t] = off;
    s_lim[t] = lim;
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor-core kernel (16-bit K/V, head_dim D in {64, 80, 128}).
//
// kWarps warps; warp w owns M rows [w * 16 * kMi, (w + 1) * 16 * kMi) of the kBm-row tile. Per
// key tile of kBn keys: S = Q K^T (mma, K fragments by ldmatrix from shared memory), logits and
// masks, online softmax in registers, P (rounded to T) reused in registers as the A operand of
// O += P V (V fragments by ldmatrix.trans). Shared-memory rows are padded by 16 bytes
// (stride D + 8 elements), which makes every ldmatrix phase conflict-free.

// A biased variant's row states (V::Row, 8 bytes) live in shared memory after s_lim, read where
// the logits are formed: kept in registers across the key loop, they made the 128-row D = 128
// tiles spill on sm_90.
template <int D, int kWarps, int kMi, int kBn, int kStages, typename V>
struct FlashShape {
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBm = 16 * kMi * kWarps;
  static constexpr int kLd = D + 8;
  static constexpr size_t kRowBytes = V::kAddsBias ? sizeof(typename V::Row) : 0;
  static constexpr size_t kSmem =
      (static_cast<size_t>(kBm) * kLd + static_cast<size_t>(kStages) * 2 * kBn * kLd) *
          sizeof(uint16_t) +
      static_cast<size_t>(kBm) * (sizeof(int64_t) + sizeof(int) + kRowBytes);
};

template <typename T, int D, int kWarps, int kMi, int kBn, int kStages, bool kOwn, typename V>
__global__ void __launch_bounds__(kWarps * 32) FlashKernel(const __grid_constant__ ParamsOf<V> p) {
  using Shape = FlashShape<D, kWarps, kMi, kBn, kStages, V>;
  constexpr int kThreads = Shape::kThreads;
  constexpr int kBm = Shape::kBm;
  constexpr int kLd = Shape::kLd;
  constexpr int kDt = D / 8;  // n8 tiles of the output
  // Keys per register sub-tile: 32 when the output accumulators are large (kMi * D >= 256),
  // which keeps the 4 x 2 x 128 tile within 255 registers.
  constexpr int kBs = kMi * D >= 256 ? 32 : kBn;
  constexpr int kNt = kBs / 8;             // n8 tiles of the scores
  constexpr int kKs = D / 16;              // k16 steps of Q K^T
  constexpr int kChunks = D / 8;           // 16-byte chunks per K/V row
  constexpr bool kQRegs = kMi * D <= 128;  // Q fragments stay in registers when they fit
  static_assert(D % 16 == 0 && kBn % kBs == 0 && kBs % 16 == 0 && kStages >= 2, "tile shape");

  unsigned char* smem = DynamicSmem();
  uint16_t* s_q = reinterpret_cast<uint16_t*>(smem);                       // [kBm][kLd]
  uint16_t* s_k = s_q + kBm * kLd;                                         // [kStages][kBn][kLd]
  uint16_t* s_v = s_k + kStages * kBn * kLd;                               // [kStages][kBn][kLd]
  int64_t* s_off = reinterpret_cast<int64_t*>(s_v + kStages * kBn * kLd);  // [kBm]
  int* s_lim = reinterpret_cast<int*>(s_off + kBm);                        // [kBm]
  // [kBm] biased variants only (kBm is a multiple of 16: 8-byte aligned after s_lim)
  [[maybe_unused]] auto* s_vrow = reinterpret_cast<typename V::Row*>(s_lim + kBm);

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int prob = kOwn ? FindProblem(p, blockIdx.x) : 0;
  const Problem& pr = p.problems[prob];
  const int m0 = (static_cast<int>(blockIdx.x) - p.tile_start[prob]) * kBm;
  const int g = blockIdx.y;
  const KeyRange range = BlockKeyRange<kOwn, kBm, kBn>(p, pr, m0);
  const int kb = range.kb, ke = range.ke;
  const int n_tiles = CeilDivD(ke - kb, kBn);

  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * D;  // elements between keys
  const uint16_t* k_base = static_cast<const uint16_t*>(pr.k) + static_cast<int64_t>(g) * D;
  const uint16_t* v_base = static_cast<const uint16_t*>(pr.v) + static_cast<int64_t>(g) * D;
  // Keys [n0, n0 + kBn) of K and V into pipeline stage `stage`; keys >= ke are zero-filled.
  // Each thread copies the same 16-byte column chunk of rows r0, r0 + kRowsPerPass, ...;
  // running pointers keep the per-row offsets out of registers.
  constexpr int kRowsPerPass = kThreads / kChunks;
  auto load_tile = [&](int stage, int n0) {
    if constexpr (kThreads % kChunks == 0) {
      const int r0 = tid / kChunks;
      const int ch = tid - r0 * kChunks;
      const int64_t first = static_cast<int64_t>(n0 + r0) * kv_stride + ch * 8;
      const uint16_t* src_k = k_base + first;
      const uint16_t* src_v = v_base + first;
      const int64_t step = kRowsPerPass * kv_stride;
      const int soff = stage * kBn * kLd + r0 * kLd + ch * 8;
#pragma unroll
      for (int i = 0; i < kBn / kRowsPerPass; ++i) {
        const bool ok = n0 + r0 + i * kRowsPerPass < ke;
        // Past the range nothing is read (src-size 0); the address stays a valid one.
        CpAsync16(s_k + soff + i * kRowsPerPass * kLd, ok ? src_k : k_base, ok);
        CpAsync16(s_v + soff + i * kRowsPerPass * kLd, ok ? src_v : v_base, ok);
        src_k += step;
        src_v += step;
      }
    } else {
      uint16_t* dk = s_k + stage * kBn * kLd;
      uint16_t* dv = s_v + stage * kBn * kLd;
#pragma unroll
      for (int idx = tid; idx < kBn * kChunks; idx += kThreads) {
        const int r = idx / kChunks;
        const int ch = idx - r * kChunks;
        const int j = n0 + r;
        const bool ok = j < ke;
        const int64_t src = ok ? static_cast<int64_t>(j) * kv_stride + ch * 8 : 0;
        CpAsync16(dk + r * kLd + ch * 8, k_base + src, ok);
        CpAsync16(dv + r * kLd + ch * 8, v_base + src, ok);
      }
    }
  };

  SetupRows<kOwn, kBm, kThreads>(p, pr, m0, g, s_off, s_lim);
  if constexpr (V::kAddsBias) {
    // The variant's state of each row of the problem (rows past it have lim = 0: never read).
    for (int t = tid; t < kBm; t += kThreads) {
      const int m = m0 + t;
      typename V::Row row{};
      if (m < pr.m_count) {
        const int c = m / p.group;
        row = V::MakeRow(p, prob, c, g * p.group + (m - c * p.group));
      }
      s_vrow[t] = row;
    }
  }
  // Pipeline prologue: tiles 0 .. kStages-2 in flight (one commit group per tile, empty groups
  // included, so wait_group counts stay uniform).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_tiles) load_tile(s, kb + s * kBn);
    CpAsyncCommit();
  }
  __syncthreads();  // s_off / s_lim visible
  // Q tile, converted to T (rows past the problem are zeros).
  for (int idx = tid; idx < kBm * D; idx += kThreads) {
    const int r = idx / D;
    const int d = idx - r * D;
    const int64_t off = s_off[r];
    const float x = off >= 0 ? LoadAsFloat(p.q, p.q_type, off * D + d) : 0.0f;
    s_q[r * kLd + d] = ToBits<T>(x);
  }
  __syncthreads();  // s_q visible

  const int warp_row = warp * 16 * kMi;
  // Rows of this thread in the mma accumulator layout: (mi, hf) -> warp_row + mi*16 + hf*8 +
  // lane/4; lim = number of visible keys (keys >= lim are masked).
  int lim[kMi][2];
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      lim[mi][hf] = kOwn ? min(ke, s_lim[warp_row + mi * 16 + hf * 8 + (lane >> 2)]) : ke;
    }
  }
  uint32_t qf[kQRegs ? kMi : 1][kQRegs ? kKs : 1][4];
  if constexpr (kQRegs) {
#pragma unroll
    for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
      for (int ks = 0; ks < kKs; ++ks) {
        LdMatrixX4(qf[mi][ks],
                   s_q + (warp_row + mi * 16 + (lane & 15)) * kLd + ks * 16 + (lane >> 4) * 8);
      }
    }
  }

  float m_run[kMi][2];  // running max (log2 units); -inf until a key was seen
  float l_run[kMi][2];  // running sum of exp2(x - m_run) over this thread's columns only; the
                        // quad's partial sums are added at the end (all scale alike)
  float acc[kMi][kDt][4];
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      m_run[mi][hf] = NegInf();
      l_run[mi][hf] = 0.0f;
    }
#pragma unroll
    for (int dt = 0; dt < kDt; ++dt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][dt][e] = 0.0f;
    }
  }
  const float scale_log2 = p.scale_log2;
  const SoftCap cap{p.cap_log2, p.dot_to_capped};
  const float w_log2 = kOwn ? pr.log2_weight : 0.0f;
  const int w_from = kOwn ? pr.weighted_from : 0;

  int stage = 0;  // stage of tile t
  for (int t = 0; t < n_tiles; ++t) {
    CpAsyncWait<kStages - 2>();  // tile t has landed (this thread's copies) ...
    __syncthreads();             // ... for every thread; and everyone finished tile t - 1
    {
      // Refill the stage that tile t - 1 used (free: all threads passed the barrier above).
      const int tn = t + kStages - 1;
      int st = stage + kStages - 1;
      if (st >= kStages) st -= kStages;
      if (tn < n_tiles) load_tile(st, kb + tn * kBn);
      CpAsyncCommit();
    }
    const uint16_t* tk = s_k + stage * kBn * kLd;
    const uint16_t* tv = s_v + stage * kBn * kLd;
    const int n0 = kb + t * kBn;
    // The tile is processed in register sub-tiles of kBs keys (each its own online-softmax
    // step), so the score registers stay at kBs / 2 per mma row block.
#pragma unroll
    for (int sub = 0; sub < kBn / kBs; ++sub) {
      const int n0s = n0 + sub * kBs;
      const uint16_t* tks = tk + sub * kBs * kLd;
      const uint16_t* tvs = tv + sub * kBs * kLd;

      // ---- S = Q K^T ----
      float s[kMi][kNt][4];
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
        for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) s[mi][nt][e] = 0.0f;
        }
      }
      auto qk_step = [&](int ks) {
        uint32_t a[kMi][4];
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          if constexpr (kQRegs) {
#pragma unroll
            for (int e = 0; e < 4; ++e) a[mi][e] = qf[mi][ks][e];
          } else {
            LdMatrixX4(a[mi],
                       s_q + (warp_row + mi * 16 + (lane & 15)) * kLd + ks * 16 + (lane >> 4) * 8);
          }
        }
#pragma unroll
        for (int np = 0; np < kNt / 2; ++np) {
          // Matrices: (keys +0..7, k 0..7), (keys +0..7, k 8..15), (keys +8..15, k 0..7),
          // (keys +8..15, k 8..15) -> B fragments of n8 tiles 2np and 2np+1.
          uint32_t b[4];
          LdMatrixX4(b, tks + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * kLd + ks * 16 +
                            ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int mi = 0; mi < kMi; ++mi) {
            Mma<T>(s[mi][2 * np], a[mi], b[0], b[1]);
            Mma<T>(s[mi][2 * np + 1], a[mi], b[2], b[3]);
          }
        }
      };
      if constexpr (kQRegs || kKs < 8) {
#pragma unroll
        for (int ks = 0; ks < kKs; ++ks) qk_step(ks);
      } else {
        // Q from shared memory (D = 128, 32 rows per warp): a partly unrolled loop keeps ptxas
        // from hoisting every step's fragment loads, which would spill.
#pragma unroll 4
        for (int ks = 0; ks < kKs; ++ks) qk_step(ks);
      }

      // ---- logits in log2 units, masks ----
      bool need_mask = n0s + kBs > range.mask_from;
      float bias = 0.0f;
      if constexpr (kOwn) {
        if (w_log2 != 0.0f) {
          if (n0s >= w_from) {
            bias = w_log2;  // the whole tile is weighted
          } else if (n0s + kBs > w_from) {
            need_mask = true;  // the tile straddles weighted_from
          }
        }
      }
      if constexpr (V::kAddsBias) {
        // Every element: the variant's bias differs per (row, key).
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          typename V::Row vrow[2];
#pragma unroll
          for (int hf = 0; hf < 2; ++hf)
            vrow[hf] = s_vrow[warp_row + mi * 16 + hf * 8 + (lane >> 2)];
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int j = n0s + nt * 8 + (lane & 3) * 2 + (e & 1);
              float x = NegInf();
              if (j < lim[mi][e >> 1]) {
                x = cap.on() ? cap(s[mi][nt][e]) : s[mi][nt][e] * scale_log2;
                if constexpr (kOwn) x += j >= w_from ? w_log2 : 0.0f;
                x += V::Bias(p, prob, vrow[e >> 1], j);
              }
              s[mi][nt][e] = x;
            }
          }
        }
      } else if (need_mask) {
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int j = n0s + nt * 8 + (lane & 3) * 2 + (e & 1);
              float x = cap.on() ? cap(s[mi][nt][e]) : s[mi][nt][e] * scale_log2;
              if constexpr (kOwn) x += j >= w_from ? w_log2 : 0.0f;
              s[mi][nt][e] = j < lim[mi][e >> 1] ? x : NegInf();
            }
          }
        }
      } else {
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              s[mi][nt][e] =
                  cap.on() ? cap(s[mi][nt][e]) + bias : fmaf(s[mi][nt][e], scale_log2, bias);
            }
          }
        }
      }

      // ---- online softmax (a row's kBs values live in one quad of lanes, kBs / 4 each) ----
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float mx = NegInf();
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
            mx = fmaxf(mx, fmaxf(s[mi][nt][hf * 2], s[mi][nt][hf * 2 + 1]));
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float m_new = fmaxf(m_run[mi][hf], mx);
          // No visible key yet: subtract 0 instead of -inf (exp2(-inf - -inf) would be NaN);
          // every x is -inf then, so p = 0 and corr = 0 (acc and l are 0 anyway).
          const float m_use = m_new == NegInf() ? 0.0f : m_new;
          const float corr = Exp2(m_run[mi][hf] - m_use);
          m_run[mi][hf] = m_new;
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < kNt; ++nt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float pv = Exp2(s[mi][nt][hf * 2 + e] - m_use);
              s[mi][nt][hf * 2 + e] = pv;
              sum += pv;
            }
          }
          l_run[mi][hf] = l_run[mi][hf] * corr + sum;
#pragma unroll
          for (int dt = 0; dt < kDt; ++dt) {
            acc[mi][dt][hf * 2] *= corr;
            acc[mi][dt][hf * 2 + 1] *= corr;
          }
        }
      }

      // ---- O += P V: the score accumulators of n8 tiles 2kk, 2kk+1 are exactly the A fragment
      // of the k16 step kk (rows lane/4 and +8, columns 2*(lane%4) and +8) ----
#pragma unroll
      for (int kk = 0; kk < kBs / 16; ++kk) {
        uint32_t a[kMi][4];
#pragma unroll
        for (int mi = 0; mi < kMi; ++mi) {
          a[mi][0] = Pack2<T>(s[mi][2 * kk][0], s[mi][2 * kk][1]);
          a[mi][1] = Pack2<T>(s[mi][2 * kk][2], s[mi][2 * kk][3]);
          a[mi][2] = Pack2<T>(s[mi][2 * kk + 1][0], s[mi][2 * kk + 1][1]);
          a[mi][3] = Pack2<T>(s[mi][2 * kk + 1][2], s[mi][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          // Transposed matrices: (keys +0..7, d +0..7), (keys +8..15, d +0..7), (keys +0..7,
          // d +8..15), (keys +8..15, d +8..15) -> B fragments of output n8 tiles 2dp, 2dp+1.
          uint32_t b[4];
          LdMatrixX4Trans(b, tvs + (kk * 16 + (lane & 15)) * kLd + dp * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int mi = 0; mi < kMi; ++mi) {
            Mma<T>(acc[mi][2 * dp], a[mi], b[0], b[1]);
            Mma<T>(acc[mi][2 * dp + 1], a[mi], b[2], b[3]);
          }
        }
      }
    }
    if (++stage == kStages) stage = 0;
  }
  CpAsyncWait<0>();  // only empty groups can be outstanding; drain before exit regardless

  // ---- epilogue: all shuffles first (every lane must take part), then the stores ----
  float l_tot[kMi][2];
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = l_run[mi][hf];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      l_tot[mi][hf] = l;
    }
  }
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int64_t off = s_off[warp_row + mi * 16 + hf * 8 + (lane >> 2)];
      if (off < 0) continue;
      const float l = l_tot[mi][hf];
      const float inv = l > 0.0f ? 1.0f / l : 0.0f;
      // l > 0 implies a visible key, hence a finite m_run.
      const float lse = l > 0.0f ? (m_run[mi][hf] + log2f(l)) * kLn2 : NegInf();
      if (p.splits == 1) {
#pragma unroll
        for (int dt = 0; dt < kDt; ++dt) {
          const int d = dt * 8 + (lane & 3) * 2;
          StoreFromFloat(p.o, p.o_type, off * D + d, acc[mi][dt][hf * 2] * inv);
          StoreFromFloat(p.o, p.o_type, off * D + d + 1, acc[mi][dt][hf * 2 + 1] * inv);
        }
        if ((lane & 3) == 0 && p.lse != nullptr) p.lse[off] = lse;
      } else {
        const int64_t poff = static_cast<int64_t>(blockIdx.z) * p.part_stride + off;
        float* po = p.part_o + poff * D;
#pragma unroll
        for (int dt = 0; dt < kDt; ++dt) {
          const int d = dt * 8 + (lane & 3) * 2;  // even: 8-byte aligned in the scratch
          *reinterpret_cast<float2*>(po + d) =
              make_float2(acc[mi][dt][hf * 2] * inv, acc[mi][dt][hf * 2 + 1] * inv);
        }
        if ((lane & 3) == 0) p.part_lse[poff] = lse;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Generic kernel: any K/V type, head_dim in [1, 256], any alignment.
//
// 4 warps x 4 M rows = 16 M rows per block. Per tile of 32 keys (converted to f32 in shared
// memory, K rows padded to a stride of 1 mod 32 words so lane j reading key j is conflict-free),
// lane j computes the 4 logits of key n0 + j; the warp reduces max / sum by shuffles; P goes
// through shared memory (broadcast reads) into O, where lane l owns dims l, l + 32, ... The tile
// steps are attention_device.cuh's, shared with biased_attention_kernels.cu's BiasedKernel.

constexpr int kGenWarps = 4;
constexpr int kGenRows = 4;  // M rows per warp
constexpr int kGenBm = kGenWarps * kGenRows;
constexpr int kGenBn = 32;
constexpr int kGenThreads = kGenWarps * 32;

size_t GenericSmem(int head_dim) {
  const size_t dp = PaddedDim(head_dim);
  const size_t floats = kGenBm * dp + kGenBn * (dp + 1) + kGenBn * dp + kGenBm * kGenBn;
  return floats * sizeof(float) + kGenBm * (sizeof(int64_t) + sizeof(int));
}

template <typename KV, bool kOwn>
__global__ void __launch_bounds__(kGenThreads)
    GenericKernel(const __grid_constant__ KernelParams p) {
  const int dim = p.head_dim;
  const int dp = PaddedDim(dim);
  const int ldk = dp + 1;
  unsigned char* gsmem = DynamicSmem();
  float* s_q = reinterpret_cast<float*>(gsmem);  // [kGenBm][dp]
  float* s_k = s_q + kGenBm * dp;                // [kGenBn][dp + 1]
  float* s_v = s_k + kGenBn * ldk;               // [kGenBn][dp]
  float* s_p = s_v + kGenBn * dp;                // [kGenBm][kGenBn]
  // Offset in floats: 80 * dp + 544, a multiple of 2: 8-byte aligned.
  int64_t* s_off = reinterpret_cast<int64_t*>(s_p + kGenBm * kGenBn);  // [kGenBm]
  int* s_lim = reinterpret_cast<int*>(s_off + kGenBm);                 // [kGenBm]

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int prob = kOwn ? FindProblem(p, blockIdx.x) : 0;
  const Problem& pr = p.problems[prob];
  const int m0 = (static_cast<int>(blockIdx.x) - p.tile_start[prob]) * kGenBm;
  const int g = blockIdx.y;
  const KeyRange range = BlockKeyRange<kOwn, kGenBm, kGenBn>(p, pr, m0);
  const int kb = range.kb, ke = range.ke;

  SetupRows<kOwn, kGenBm, kGenThreads>(p, pr, m0, g, s_off, s_lim);
  __syncthreads();
  LoadQTile<kGenBm, kGenThreads>(p.q, p.q_type, s_off, dim, dp, s_q);
  // (the barrier at the top of the key loop publishes s_q; with no key tile s_q is unused)

  const int row0 = warp * kGenRows;
  int lim[kGenRows];
  float m_run[kGenRows], l_run[kGenRows], o[kGenRows][kLaneDims];
#pragma unroll
  for (int rr = 0; rr < kGenRows; ++rr) {
    lim[rr] = kOwn ? min(ke, s_lim[row0 + rr]) : ke;
    m_run[rr] = NegInf();
    l_run[rr] = 0.0f;  // lane-partial: this lane's key of every tile
#pragma unroll
    for (int t = 0; t < kLaneDims; ++t) o[rr][t] = 0.0f;
  }
  const float scale_log2 = p.scale_log2;
  const SoftCap cap{p.cap_log2, p.dot_to_capped};
  const float w_log2 = kOwn ? pr.log2_weight : 0.0f;
  const int w_from = kOwn ? pr.weighted_from : 0;
  const int64_t kv_stride = static_cast<int64_t>(p.kv_heads) * dim;
  const KV* k_base = static_cast<const KV*>(pr.k) + static_cast<int64_t>(g) * dim;
  const KV* v_base = static_cast<const KV*>(pr.v) + static_cast<int64_t>(g) * dim;

  for (int n0 = kb; n0 < ke; n0 += kGenBn) {
    __syncthreads();  // the previous tile is consumed (and s_q is published)
    LoadKvTile<kGenBn, kGenThreads>(k_base, v_base, kv_stride, n0, ke, dim, dp, s_k, s_v);
    __syncthreads();

    const int j = n0 + lane;
    float sc[kGenRows];
    TileDots<kGenRows>(s_q + row0 * dp, s_k, lane, dim, dp, sc);
    const float bias = (kOwn && j >= w_from) ? w_log2 : 0.0f;
#pragma unroll
    for (int rr = 0; rr < kGenRows; ++rr) {
      const float x =
          j < lim[rr] ? (cap.on() ? cap(sc[rr]) + bias : fmaf(sc[rr], scale_log2, bias)) : NegInf();
      s_p[(row0 + rr) * kGenBn + lane] = OnlineSoftmaxStep(x, m_run[rr], l_run[rr], o[rr]);
    }
    __syncwarp();
    const int n_here = min(kGenBn, ke - n0);  // keys past the range have p = 0: skip them
    AccumulatePv<kGenRows, kGenBn>(s_v, s_p + row0 * kGenBn, n_here, dp, lane, o);
    // s_p is rewritten only after the next iteration's barriers.
  }

  float l_tot[kGenRows];
#pragma unroll
  for (int rr = 0; rr < kGenRows; ++rr) l_tot[rr] = WarpSum(l_run[rr]);
#pragma unroll
  for (int rr = 0; rr < kGenRows; ++rr) {
    const int64_t off = s_off[row0 + rr];
    if (off < 0) continue;
    const RowTotals fin = FinishRow(m_run[rr], l_tot[rr]);
    if (p.splits == 1) {
      StoreORow(p.o, p.o_type, off, dim, lane, o[rr], fin.inv);
      if (lane == 0 && p.lse != nullptr) p.lse[off] = fin.lse;
    } else {
      const int64_t poff = static_cast<int64_t>(blockIdx.z) * p.part_stride + off;
#pragma unroll
      for (int t = 0; t < kLaneDims; ++t) {
        const int d = lane + t * 32;
        if (d < dim) p.part_o[poff * dim + d] = o[rr][t] * fin.inv;
      }
      if (lane == 0) p.part_lse[poff] = fin.lse;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Finalize: one block per (compact row, head) of fp.rows. merge: o = sum_s w_s o_s / sum_s w_s,
// w_s = exp(lse_s - max), lse = max + ln(sum_s w_s) (MergeStates over the splits); otherwise
// o = 0, lse = -inf. The weights go to shared memory once; then thread t sums dims t, t + 128
// over the splits with independent (unrolled) loads, so even one row with a hundred splits is
// not latency bound.

constexpr int kFinThreads = 128;
constexpr int kMaxSplits = 1024;

__global__ void __launch_bounds__(kFinThreads)
    FinalizeKernel(const __grid_constant__ FinalizeParams fp) {
  __shared__ float s_w[kMaxSplits];
  __shared__ float s_max[kFinThreads / 32];
  __shared__ float s_sum[kFinThreads / 32];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int64_t item = blockIdx.x;
  const int32_t c = static_cast<int32_t>(item / fp.heads);
  const int32_t h = static_cast<int32_t>(item - static_cast<int64_t>(c) * fp.heads);
  const int64_t off = static_cast<int64_t>(RowOf(fp.rows, c)) * fp.heads + h;
  const int dim = fp.head_dim;
  const int splits = fp.splits;
  float mx = NegInf();
  if (fp.merge) {
    for (int s = tid; s < splits; s += kFinThreads) {
      mx = fmaxf(mx, fp.part_lse[s * fp.part_stride + off]);
    }
    mx = WarpMax(mx);
    if (lane == 0) s_max[warp] = mx;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kFinThreads / 32; ++w) mx = fmaxf(mx, s_max[w]);
  }
  if (mx == NegInf()) {  // block-uniform: not merging, or no split saw a key
    for (int d = tid; d < dim; d += kFinThreads) {
      StoreFromFloat(fp.o, fp.o_type, off * dim + d, 0.0f);
    }
    if (tid == 0 && fp.lse != nullptr) fp.lse[off] = NegInf();
    return;
  }
  float wsum = 0.0f;
  for (int s = tid; s < splits; s += kFinThreads) {
    const float w = expf(fp.part_lse[s * fp.part_stride + off] - mx);  // 0 for empty splits
    s_w[s] = w;
    wsum += w;
  }
  wsum = WarpSum(wsum);
  if (lane == 0) s_sum[warp] = wsum;
  __syncthreads();  // s_w and s_sum complete
  wsum = 0.0f;
#pragma unroll
  for (int w = 0; w < kFinThreads / 32; ++w) wsum += s_sum[w];
  const float inv = 1.0f / wsum;  // the max split contributes exp(0) = 1
  const int64_t stride = fp.part_stride * dim;
  for (int d = tid; d < dim; d += kFinThreads) {
    const float* po = fp.part_o + off * dim + d;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int s = 0;
    for (; s + 4 <= splits; s += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[u] = fmaf(s_w[s + u], po[(s + u) * stride], acc[u]);
    }
    for (; s < splits; ++s) acc[0] = fmaf(s_w[s], po[s * stride], acc[0]);
    StoreFromFloat(fp.o, fp.o_type, off * dim + d, ((acc[0] + acc[1]) + (acc[2] + acc[3])) * inv);
  }
  if (tid == 0 && fp.lse != nullptr) fp.lse[off] = mx + logf(wsum);
}

// ---------------------------------------------------------------------------------------------
// Host side.

// A kernel and its launch shape; P: its parameter struct (KernelParams or BiasedFlashParams).
template <typename P = KernelParams>
struct KernelChoice {
  void (*fn)(P) = nullptr;
  int threads = 0;
  size_t smem = 0;      // dynamic shared memory of this launch
  size_t max_smem = 0;  // the most any launch of fn needs (GenericKernel's grows with head_dim)
  int bm = 0;           // M rows per block
  int bn = 0;           // keys per tile (split chunks are multiples of it)
};

template <typename T, int D, int kWarps, int kMi, int kBn, int kStages, bool kOwn, typename V>
KernelChoice<ParamsOf<V>> FlashChoice() {
  using Shape = FlashShape<D, kWarps, kMi, kBn, kStages, V>;
  KernelChoice<ParamsOf<V>> c;
  c.fn = FlashKernel<T, D, kWarps, kMi, kBn, kStages, kOwn, V>;
  c.threads = Shape::kThreads;
  c.smem = Shape::kSmem;
  c.max_smem = Shape::kSmem;
  c.bm = Shape::kBm;
  c.bn = kBn;
  return c;
}

// Tile configurations of the tensor-core kernel, by M rows per (problem, kv head):
//   0: <= 16 rows (decode, batch 1): 1 warp, 16 x 64 tiles, 3 stages (2 tiles in flight per
//      block; memory bound: the split-K grid streams K/V. 64-key tiles with 3 stages rather
//      than 32-key tiles: a choice to verify on a GPU (tools/gpu), never measured here);
//   1: <= 64 rows: 4 warps x 16 rows, 64-key tiles, 2 stages;
//   2: more rows (batches, prefill): 4 warps x 32 rows = 128 x 64 tiles, 2 stages (each K/V
//      fragment loaded from shared memory feeds two mma rows: compute bound).
enum FlashCfg { kCfgSmall = 0, kCfgMid = 1, kCfgBig = 2 };

// kBigTiles false: the big configuration runs the mid tiles (and is never instantiated).
template <typename T, int D, bool kOwn, typename V = PlainVariant, bool kBigTiles = true>
KernelChoice<ParamsOf<V>> FlashChoiceFor(int cfg) {
  if (cfg == kCfgSmall) return FlashChoice<T, D, 1, 1, 64, 3, kOwn, V>();
  if constexpr (kBigTiles) {
    if (cfg == kCfgBig) return FlashChoice<T, D, 4, 2, 64, 2, kOwn, V>();
  }
  return FlashChoice<T, D, 4, 1, 64, 2, kOwn, V>();
}

int FlashCfgFor(int64_t max_m) { return max_m <= 16 ? kCfgSmall : max_m <= 64 ? kCfgMid : kCfgBig; }

template <bool kOwn>
KernelChoice<> SelectKernel(ElemType kv_type, int head_dim, bool fast_ok, int64_t max_m) {
  const int cfg = FlashCfgFor(max_m);
  if (fast_ok && kv_type != ElemType::kF32) {
    const bool f16 = kv_type == ElemType::kF16;
    switch (head_dim) {
      case 64:
        return f16 ? FlashChoiceFor<__half, 64, kOwn>(cfg)
                   : FlashChoiceFor<__nv_bfloat16, 64, kOwn>(cfg);
      case 80:
        return f16 ? FlashChoiceFor<__half, 80, kOwn>(cfg)
                   : FlashChoiceFor<__nv_bfloat16, 80, kOwn>(cfg);
      case 128:
        return f16 ? FlashChoiceFor<__half, 128, kOwn>(cfg)
                   : FlashChoiceFor<__nv_bfloat16, 128, kOwn>(cfg);
      default:
        break;
    }
  }
  KernelChoice<> c;
  switch (kv_type) {
    case ElemType::kF16:
      c.fn = GenericKernel<__half, kOwn>;
      break;
    case ElemType::kBF16:
      c.fn = GenericKernel<__nv_bfloat16, kOwn>;
      break;
    default:
      c.fn = GenericKernel<float, kOwn>;
      break;
  }
  c.threads = kGenThreads;
  c.smem = GenericSmem(head_dim);
  c.max_smem = GenericSmem(256);
  c.bm = kGenBm;
  c.bn = kGenBn;
  return c;
}

bool FastHeadDim(int head_dim) { return head_dim == 64 || head_dim == 80 || head_dim == 128; }

bool Aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Splits of the key range. Cost model: (waves of `resident` blocks, the blocks the device holds
// at once) x (keys per block + a fixed cost per block), minimised over the split count. (Chosen
// over a per-SM-throughput model, which splits compute-bound batches more; which is faster is
// unmeasured: no GPU has run this code, tools/gpu's benchmarks are where to compare them.)
int ChooseSplits(int64_t blocks, int64_t resident, int64_t keys, int bn) {
  if (blocks <= 0 || resident <= 0 || keys <= 0 || blocks >= 4 * resident) return 1;
  const int64_t min_chunk = std::max<int64_t>(256, bn);
  const int64_t max_splits = std::min<int64_t>(CeilDiv(keys, min_chunk), kMaxSplits);
  const int64_t overhead = 2 * bn;  // Q load, output / partial writes, merge
  int best = 1;
  int64_t best_cost = std::numeric_limits<int64_t>::max();
  for (int64_t s = 1; s <= max_splits; ++s) {
    const int64_t chunk = CeilDiv(CeilDiv(keys, s), bn) * bn;
    const int64_t cost = CeilDiv(blocks * s, resident) * (chunk + overhead);
    if (cost < best_cost) {
      best_cost = cost;
      best = static_cast<int>(s);
    }
  }
  return best;
}

// Per (kernel, device, shared memory): the kernel's dynamic shared-memory limit raised to the most
// any of its launches needs (AllowDynamicSmem), and the occupancy at this launch's size queried
// once (both cost host time worth avoiding on every call of a decoding step).
struct Capacity {
  cudaError_t error = cudaSuccess;
  int64_t sms = 0;
  int64_t per_sm = 0;
};

template <typename P>
Capacity KernelCapacity(const KernelChoice<P>& k) {
  using Key = std::tuple<const void*, int, size_t>;
  static std::mutex mu;
  static std::map<Key, Capacity>* cache = new std::map<Key, Capacity>();
  Capacity cap;
  int device = 0;
  cap.error = cudaGetDevice(&device);
  if (cap.error != cudaSuccess) return cap;
  const Key key(reinterpret_cast<const void*>(k.fn), device, k.smem);
  {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  cap.error = AllowDynamicSmem(k.fn, k.smem, k.max_smem);
  if (cap.error != cudaSuccess) return cap;  // not cached: reported on every call
  int sms = 0, per_sm = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess &&
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k.fn, k.threads, k.smem) ==
          cudaSuccess) {
    cap.sms = sms;
    cap.per_sm = per_sm;
  } else {
    (void)cudaGetLastError();  // unknown capacity: run unsplit
  }
  std::lock_guard<std::mutex> lock(mu);
  (*cache)[key] = cap;
  return cap;
}

void AddSegment(RowMap& map, int32_t row, int32_t len) {
  if (len <= 0) return;
  const int n = map.num_segments;
  if (n > 0 && map.seg_row[n - 1] + (map.seg_start[n] - map.seg_start[n - 1]) == row) {
    map.seg_start[n] += len;  // contiguous with the previous segment: extend it
    return;
  }
  map.seg_row[n] = row;
  map.seg_start[n + 1] = map.seg_start[n] + len;
  map.num_segments = n + 1;
}

void InitRowMap(RowMap& map) { std::memset(&map, 0, sizeof(map)); }

int64_t RowMapTotal(const RowMap& map) { return map.seg_start[map.num_segments]; }

bool ValidCommon(const AttnParams& p) {
  if (p.q == nullptr || p.o == nullptr) return false;
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.kv_heads > 65535) {
    return false;
  }
  if (p.head_dim < 1 || p.head_dim > 256 || p.tokens < 0) return false;
  if (p.num_sequences < 0 || p.num_sequences > kMaxAttnSequences) return false;
  if (static_cast<int64_t>(p.tokens) * p.heads * p.head_dim > (int64_t{1} << 40)) return false;
  for (int s = 0; s < p.num_sequences; ++s) {
    const AttnSequence& seq = p.sequences[s];
    if (seq.q_len < 0 || seq.kv_len < 0 || seq.q_begin < 0) return false;
    if (static_cast<int64_t>(seq.q_begin) + seq.q_len > p.tokens) return false;
    if (static_cast<int64_t>(seq.q_len) * (p.heads / p.kv_heads) > INT32_MAX / 2) return false;
  }
  return true;
}

void FillCommon(const AttnParams& p, KernelParams& kp) {
  std::memset(&kp, 0, sizeof(kp));
  kp.q = p.q;
  kp.o = p.o;
  kp.lse = p.lse;
  kp.part_stride = static_cast<int64_t>(p.tokens) * p.heads;
  kp.heads = p.heads;
  kp.kv_heads = p.kv_heads;
  kp.group = p.heads / p.kv_heads;
  kp.head_dim = p.head_dim;
  kp.splits = 1;
  kp.q_type = p.q_type;
  kp.o_type = p.o_type;
  kp.scale_log2 = p.scale * kLog2e;
  if (p.softcap > 0.0f) {
    kp.cap_log2 = p.softcap * kLog2e;
    kp.dot_to_capped = p.scale / p.softcap;
  }
}

cudaError_t LaunchFinalize(const KernelParams& p, const RowMap& rows, const float* part_o,
                           const float* part_lse, int splits, bool merge, cudaStream_t stream) {
  const int64_t total = RowMapTotal(rows);
  if (total == 0) return cudaSuccess;
  FinalizeParams fp;
  std::memset(&fp, 0, sizeof(fp));
  fp.o = p.o;
  fp.lse = p.lse;
  fp.part_o = part_o;
  fp.part_lse = part_lse;
  fp.part_stride = p.part_stride;
  fp.heads = p.heads;
  fp.head_dim = p.head_dim;
  fp.splits = splits;
  fp.merge = merge ? 1 : 0;
  fp.total_rows = total;
  fp.o_type = p.o_type;
  fp.rows = rows;
  const int64_t blocks = total * p.heads;  // one per (row, head)
  if (blocks > INT32_MAX || splits > kMaxSplits) return cudaErrorInvalidValue;
  void* args[] = {&fp};
  return LaunchResult(cudaLaunchKernel(FinalizeKernel, dim3(static_cast<unsigned>(blocks)),
                                       dim3(kFinThreads), args, 0, stream));
}

// Runs the chosen kernel over kp's problems (kp.num_problems, tile_start filled for k.bm),
// split-K when the grid is too small for the device, then merges the splits over `rows`.
template <typename P>
cudaError_t RunAttention(P& kp, const KernelChoice<P>& k, int64_t tiles, int64_t max_keys,
                         const RowMap& rows, cudaStream_t stream) {
  if (tiles <= 0) return cudaSuccess;
  if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  const Capacity cap = KernelCapacity(k);
  if (cap.error != cudaSuccess) return cap.error;
  const int64_t blocks = tiles * kp.kv_heads;
  int splits = ChooseSplits(blocks, cap.sms * cap.per_sm, max_keys, k.bn);
  float* scratch = nullptr;
  if (splits > 1) {
    const int64_t states = static_cast<int64_t>(splits) * kp.part_stride;
    const size_t bytes = static_cast<size_t>(states) * (kp.head_dim + 1) * sizeof(float);
    if (cudaMallocAsync(reinterpret_cast<void**>(&scratch), bytes, stream) != cudaSuccess) {
      (void)cudaGetLastError();  // out of scratch: clear the error and run unsplit
      scratch = nullptr;
      splits = 1;
    } else {
      kp.part_o = scratch;
      kp.part_lse = scratch + states * kp.head_dim;
    }
  }
  kp.splits = splits;
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(kp.kv_heads),
                  static_cast<unsigned>(splits));
  void* args[] = {&kp};
  cudaError_t err =
      LaunchResult(cudaLaunchKernel(k.fn, grid, dim3(k.threads), args, k.smem, stream));
  if (err == cudaSuccess && splits > 1) {
    err = LaunchFinalize(kp, rows, kp.part_o, kp.part_lse, splits, /*merge=*/true, stream);
  }
  if (scratch != nullptr) {
    const cudaError_t free_err = cudaFreeAsync(scratch, stream);
    if (free_err != cudaSuccess) (void)cudaGetLastError();  // reported here, once
    if (err == cudaSuccess) err = free_err;
  }
  return err;
}

// The flash kernel of variant V for 16-bit K/V of a fast head_dim (the caller checked both).
template <typename V>
KernelChoice<BiasedFlashParams> BiasedFlashChoice(ElemType kv_type, int head_dim, int cfg) {
  const bool f16 = kv_type == ElemType::kF16;
  switch (head_dim) {
    case 64:
      return f16 ? FlashChoiceFor<__half, 64, true, V>(cfg)
                 : FlashChoiceFor<__nv_bfloat16, 64, true, V>(cfg);
    case 80:
      return f16 ? FlashChoiceFor<__half, 80, true, V>(cfg)
                 : FlashChoiceFor<__nv_bfloat16, 80, true, V>(cfg);
    default:
      // 32 rows per warp at D = 128 spill on sm_90 with a bias (ptxas: 8 to 24 bytes): the mid
      // tiles' 16 rows per warp instead, which ptxas keeps within registers.
      return f16 ? FlashChoiceFor<__half, 128, true, V, false>(cfg)
                 : FlashChoiceFor<__nv_bfloat16, 128, true, V, false>(cfg);
  }
}

// A biased problem as the flash kernel's own-keys problem: rows q_begin.., causal from
// causal_base (or every key: a limit at num_keys), the log-weight, and its bias.
void ToFlashProblem(const BiasedProblem& in, int group, Problem& pr, ProblemBias& b) {
  pr.k = in.k;
  pr.v = in.v;
  pr.num_keys = in.num_keys;
  pr.m_count = in.rows * group;
  pr.q_begin = in.q_begin;
  pr.key_base = in.causal_base >= 0 ? in.causal_base : in.num_keys;
  pr.weighted_from = in.weighted_from;
  pr.log2_weight = in.log_weight * kLog2e;
  std::memset(&b, 0, sizeof(b));
  switch (in.bias_kind) {
    case BiasKind::kDense:
      b.table = in.bias;
      b.head_stride = static_cast<int64_t>(in.rows) * in.num_keys;
      b.row_stride = in.num_keys;
      break;
    case BiasKind::kRelative:
      b.table = in.bias;
      b.head_stride = static_cast<int64_t>(in.rows) + in.num_keys - 1;
      b.row_stride = -1;
      b.base = in.rows - 1;
      break;
    case BiasKind::kAlibi:
      b.slopes = in.slopes;
      b.key_pos = in.key_pos;
      b.query_pos = in.query_pos;
      break;
    default:
      break;
  }
}

// Whether any problem of p has ALiBi, and whether any has a bias table.
struct BiasMix {
  bool alibi = false;
  bool table = false;
};

BiasMix MixOf(const BiasedAttnParams& p) {
  BiasMix mix;
  for (int i = 0; i < p.num_problems; ++i) {
    const BiasKind kind = p.problems[i].rows > 0 ? p.problems[i].bias_kind : BiasKind::kNone;
    mix.alibi = mix.alibi || kind == BiasKind::kAlibi;
    mix.table = mix.table || kind == BiasKind::kDense || kind == BiasKind::kRelative;
  }
  return mix;
}

}  // namespace

bool BiasedFlashApplies(ElemType kv_type, int head_dim) {
  return kv_type != ElemType::kF32 && FastHeadDim(head_dim);
}

bool BiasedFlashTakes(const BiasedAttnParams& p) {
  if (!BiasedFlashApplies(p.kv_type, p.head_dim)) return false;
  if (p.num_problems < 0 || p.num_problems > kMaxBiasedProblems) return false;
  for (int i = 0; i < p.num_problems; ++i) {
    const BiasedProblem& pr = p.problems[i];
    if (pr.rows == 0) continue;
    if (pr.num_keys > 0 && !(Aligned16(pr.k) && Aligned16(pr.v))) return false;
    if (static_cast<int64_t>(pr.num_keys) + pr.rows > INT32_MAX / 2) return false;
  }
  const BiasMix mix = MixOf(p);
  return !(mix.alibi && mix.table);
}

cudaError_t LaunchBiasedFlashAttention(const BiasedAttnParams& p, cudaStream_t stream) {
  static_assert(kMaxBiasedProblems <= kMaxAttnSequences, "a launch's problems fit the kernel");
  if (!BiasedFlashTakes(p)) return cudaErrorInvalidValue;
  const bool alibi = MixOf(p).alibi;
  // ~14 KiB of descriptors: on the heap rather than the caller's stack.
  auto kp = std::make_unique<BiasedFlashParams>();
  std::memset(kp.get(), 0, sizeof(BiasedFlashParams));
  AttnParams common;  // the fields FillCommon reads
  common.q = p.q;
  common.q_type = p.q_type;
  common.tokens = p.tokens;
  common.heads = p.heads;
  common.kv_heads = p.kv_heads;
  common.head_dim = p.head_dim;
  common.scale = p.scale;
  common.softcap = p.softcap;
  common.o = p.o;
  common.o_type = p.o_type;
  common.lse = p.lse;
  FillCommon(common, *kp);
  const int group = kp->group;
  RowMap rows;
  InitRowMap(rows);
  int64_t max_m = 0, max_keys = 0;
  int n = 0;
  for (int i = 0; i < p.num_problems; ++i) {
    const BiasedProblem& in = p.problems[i];
    if (in.rows == 0) continue;
    ToFlashProblem(in, group, kp->problems[n], kp->bias[n]);
    max_m = std::max<int64_t>(max_m, kp->problems[n].m_count);
    max_keys = std::max<int64_t>(max_keys, in.num_keys);
    AddSegment(rows, in.q_begin, in.rows);
    ++n;
  }
  if (n == 0) return cudaSuccess;
  kp->num_problems = n;
  const int cfg = FlashCfgFor(max_m);
  const KernelChoice<BiasedFlashParams> k =
      alibi ? BiasedFlashChoice<AlibiVariant>(p.kv_type, p.head_dim, cfg)
            : BiasedFlashChoice<T5BiasVariant>(p.kv_type, p.head_dim, cfg);
  int64_t tiles = 0;
  for (int i = 0; i < n; ++i) {
    kp->tile_start[i] = static_cast<int32_t>(tiles);
    tiles += CeilDiv(kp->problems[i].m_count, k.bm);
    if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  }
  kp->tile_start[n] = static_cast<int32_t>(tiles);
  return RunAttention(*kp, k, tiles, max_keys, rows, stream);
}

cudaError_t LaunchAttendOwn(const AttnParams& p, cudaStream_t stream) {
  if (!ValidCommon(p)) return cudaErrorInvalidValue;
  KernelParams params;
  FillCommon(p, params);
  const int group = params.group;
  // Problems: the sequences with rows. The fast path needs 16-byte aligned K/V everywhere.
  RowMap rows;
  InitRowMap(rows);
  bool aligned = true;
  int64_t max_m = 0, max_keys = 0;
  int n = 0;
  for (int s = 0; s < p.num_sequences; ++s) {
    const AttnSequence& seq = p.sequences[s];
    if (seq.q_len <= 0) continue;
    if (seq.kv_len > 0 && (seq.k == nullptr || seq.v == nullptr)) return cudaErrorInvalidValue;
    Problem& pr = params.problems[n++];
    pr.k = seq.k;
    pr.v = seq.v;
    pr.num_keys = seq.kv_len;
    pr.m_count = seq.q_len * group;
    pr.q_begin = seq.q_begin;
    pr.key_base = seq.kv_len - seq.q_len;
    pr.weighted_from = seq.weighted_from;
    pr.log2_weight = seq.own_log_weight * kLog2e;
    aligned = aligned && Aligned16(seq.k) && Aligned16(seq.v);
    max_m = std::max<int64_t>(max_m, pr.m_count);
    max_keys = std::max<int64_t>(max_keys, seq.kv_len);
    AddSegment(rows, seq.q_begin, seq.q_len);
  }
  if (n == 0) return cudaSuccess;
  params.num_problems = n;
  const KernelChoice<> k =
      SelectKernel<true>(p.kv_type, p.head_dim, aligned && FastHeadDim(p.head_dim), max_m);
  int64_t tiles = 0;
  for (int i = 0; i < n; ++i) {
    params.tile_start[i] = static_cast<int32_t>(tiles);
    tiles += CeilDiv(params.problems[i].m_count, k.bm);
    if (tiles > INT32_MAX) return cudaErrorInvalidValue;
  }
  params.tile_start[n] = static_cast<int32_t>(tiles);
  return RunAttention(params, k, tiles, max_keys, rows, stream);
}

cudaError_t LaunchAttendContext(const AttnParams& p, const void* context_k, const void* context_v,
                                int64_t context_len, cudaStream_t stream) {
  if (!ValidCommon(p) || context_len < 0 || context_len > INT32_MAX / 2) {
    return cudaErrorInvalidValue;
  }
  if (context_len > 0 && (context_k == nullptr || context_v == nullptr)) {
    return cudaErrorInvalidValue;
  }
  KernelParams params;
  FillCommon(p, params);
  const int group = params.group;
  // Rows that see the context (own index >= context_from) and rows that do not.
  RowMap blind;
  InitRowMap(blind);
  InitRowMap(params.rows);
  for (int s = 0; s < p.num_sequences; ++s) {
    const AttnSequence& seq = p.sequences[s];
    if (seq.q_len <= 0) continue;
    const int64_t base = static_cast<int64_t>(seq.kv_len) - seq.q_len;  // own index of row 0
    int64_t first =
        std::clamp<int64_t>(static_cast<int64_t>(seq.context_from) - base, 0, seq.q_len);
    if (context_len == 0) first = seq.q_len;  // no key to see
    AddSegment(blind, seq.q_begin, static_cast<int32_t>(first));
    AddSegment(params.rows, seq.q_begin + static_cast<int32_t>(first),
               seq.q_len - static_cast<int32_t>(first));
  }
  const int64_t m_count = RowMapTotal(params.rows) * group;
  if (m_count > INT32_MAX / 2) return cudaErrorInvalidValue;
  cudaError_t err = cudaSuccess;
  if (m_count > 0) {
    Problem& pr = params.problems[0];
    pr.k = context_k;
    pr.v = context_v;
    pr.num_keys = static_cast<int32_t>(context_len);
    pr.m_count = static_cast<int32_t>(m_count);
    params.num_problems = 1;
    const bool fast = FastHeadDim(p.head_dim) && Aligned16(context_k) && Aligned16(context_v);
    const KernelChoice<> k = SelectKernel<false>(p.kv_type, p.head_dim, fast, m_count);
    const int64_t tiles = CeilDiv(m_count, k.bm);
    params.tile_start[0] = 0;
    params.tile_start[1] = static_cast<int32_t>(std::min<int64_t>(tiles, INT32_MAX));
    err = RunAttention(params, k, tiles, context_len, params.rows, stream);
  }
  if (err == cudaSuccess) {
    err = LaunchFinalize(params, blind, nullptr, nullptr, 1, /*merge=*/false, stream);
  }
  return err;
}

}  // namespace manyshot::cuda

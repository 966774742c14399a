#include "engine/cpu/cpu_decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/cpu/vector_math.h"

// Compiled once per instruction set (hwy/foreach_target.h); the entry points dispatch at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/cpu_decode_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// After foreach_target.h: included once per target.
#include "engine/cpu/simd-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
MANYSHOT_SIMD_BEGIN
namespace manyshot::cpu_internal::HWY_NAMESPACE {
namespace {

constexpr int64_t kTile = 64;  // keys per online-softmax step
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Below this many K/V bytes one thread does it all: waking the pool costs more.
constexpr int64_t kSerialBytes = int64_t{256} << 10;

// kLanes stored values at element index i of a K/V tensor of storage dtype kDt, as f32.
template <DType kDt>
inline VF LoadAt(const void* base, int64_t i) {
  if constexpr (kDt == DType::kF32) {
    return LoadF32(static_cast<const float*>(base) + i);
  } else if constexpr (kDt == DType::kBF16) {
    return LoadBF16(static_cast<const uint16_t*>(base) + i);
  } else {
    return LoadF16(static_cast<const uint16_t*>(base) + i);
  }
}

// One thread's keys: per head the running max and sum of the online softmax and the
// unnormalised output.
struct Partial {
  std::vector<float> max, sum, o, scores;
};

struct Shape {
  int64_t heads, group, dim, row_elems;  // row_elems: kv_heads * dim, one key's row
};

// The logits of a tile's n keys for every head (s [head, key of the tile], kTile apart) through
// the Logits policy, then the log-weight on keys t0 + jj >= weighted_from: a capped logit gets its
// weight after the cap, as the tiled path adds it. A row's vectors past n are within its kTile
// entries and ignored after.
template <class Logits>
void CapThenWeight(const Logits& logits, int64_t heads, int64_t n, int64_t t0,
                   int64_t weighted_from, float log_weight, float* s) {
  for (int64_t h = 0; h < heads; ++h) {
    float* row = s + h * kTile;
    for (int64_t jj = 0; jj < n; jj += kLanes)
      hn::StoreU(logits(LoadF32(row + jj)), DF(), row + jj);
    for (int64_t jj = std::max<int64_t>(0, weighted_from - t0); jj < n; ++jj) row[jj] += log_weight;
  }
}

// Keys [j0, j1) into `part`. q is pre-scaled. Both passes over a tile read whole key rows (every
// kv head) in key order, so K and V stream front to back.
template <DType kDt, class Logits>
void AttendRange(const float* q, const Shape& sh, const void* k, const void* v, int64_t j0,
                 int64_t j1, int64_t weighted_from, float log_weight, const Logits& logits,
                 Partial& part) {
  const DF d;
  const int64_t H = sh.heads, D = sh.dim;
  part.max.assign(static_cast<size_t>(H), kNegInf);
  part.sum.assign(static_cast<size_t>(H), 0.0f);
  part.o.assign(static_cast<size_t>(H * D), 0.0f);
  part.scores.resize(static_cast<size_t>(H * kTile));
  float* s = part.scores.data();  // [head, key of the tile]
  for (int64_t t0 = j0; t0 < j1; t0 += kTile) {
    const int64_t n = std::min(kTile, j1 - t0);
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t row = (t0 + jj) * sh.row_elems;
      const float extra = t0 + jj >= weighted_from ? log_weight : 0.0f;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = row + (h / sh.group) * D;
        // Two accumulators: with narrower vectors one would be a chain of D / kLanes dependent
        // FMAs per key and head.
        VF acc0 = hn::Zero(d), acc1 = hn::Zero(d);
        int64_t c = 0;
        for (; c + 2 * kLanes <= D; c += 2 * kLanes) {
          acc0 = hn::MulAdd(LoadAt<kDt>(k, base + c), LoadF32(q + h * D + c), acc0);
          acc1 =
              hn::MulAdd(LoadAt<kDt>(k, base + c + kLanes), LoadF32(q + h * D + c + kLanes), acc1);
        }
        if (c < D) acc0 = hn::MulAdd(LoadAt<kDt>(k, base + c), LoadF32(q + h * D + c), acc0);
        const float logit = ReduceSum(hn::Add(acc0, acc1));
        s[h * kTile + jj] = Logits::kCapped ? logit : logit + extra;  // capped: in CapTile
      }
    }
    if constexpr (Logits::kCapped) CapThenWeight(logits, H, n, t0, weighted_from, log_weight, s);
    for (int64_t h = 0; h < H; ++h) {
      float* sh_row = s + h * kTile;
      float tile_max = kNegInf;
      for (int64_t jj = 0; jj < n; ++jj) tile_max = std::max(tile_max, sh_row[jj]);
      const float new_max = std::max(part.max[h], tile_max);
      const float correction = vmath::Exp(part.max[h] - new_max);  // first tile: exp(-inf) = 0
      // The exponentials in a loop of their own, which vectorises; summed in key order after
      // (in one loop with the sum, an in-order float reduction, both stayed scalar).
      for (int64_t jj = 0; jj < n; ++jj) sh_row[jj] = vmath::Exp(sh_row[jj] - new_max);
      float tile_sum = 0.0f;
      for (int64_t jj = 0; jj < n; ++jj) tile_sum += sh_row[jj];
      part.sum[h] = part.sum[h] * correction + tile_sum;
      part.max[h] = new_max;
      if (correction != 1.0f) {
        for (int64_t i = 0; i < D; ++i) part.o[h * D + i] *= correction;
      }
    }
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t row = (t0 + jj) * sh.row_elems;
      for (int64_t h = 0; h < H; ++h) {
        const VF p = hn::Set(d, s[h * kTile + jj]);
        const int64_t base = row + (h / sh.group) * D;
        float* o = part.o.data() + h * D;
        for (int64_t c = 0; c < D; c += kLanes) {
          hn::StoreU(hn::MulAdd(p, LoadAt<kDt>(v, base + c), LoadF32(o + c)), d, o + c);
        }
      }
    }
  }
}

// AttendRange for keys [j0, j1) of K/V in their storage dtype.
template <class Logits>
void AttendRangeOf(const Tensor& k, const Tensor& v, const float* q, const Shape& sh, int64_t j0,
                   int64_t j1, int64_t weighted_from, float log_weight, const Logits& logits,
                   Partial& part) {
  switch (k.dtype()) {
    case DType::kF32:
      return AttendRange<DType::kF32>(q, sh, k.raw(), v.raw(), j0, j1, weighted_from, log_weight,
                                      logits, part);
    case DType::kBF16:
      return AttendRange<DType::kBF16>(q, sh, k.raw(), v.raw(), j0, j1, weighted_from, log_weight,
                                       logits, part);
    default:  // f16 (the fronts admit float K/V only)
      return AttendRange<DType::kF16>(q, sh, k.raw(), v.raw(), j0, j1, weighted_from, log_weight,
                                      logits, part);
  }
}

}  // namespace

bool DecodeKernelSupportsImpl(int64_t head_dim) {
  return HWY_TARGET != HWY_SCALAR && head_dim >= 16 && head_dim <= 256 && head_dim % 16 == 0;
}

void AttendOneTokenImpl(ThreadPool& pool, const float* q, int64_t heads, const Tensor& k,
                        const Tensor& v, int64_t kv_len, int64_t weighted_from, float log_weight,
                        float scale, float softcap, float* out, float* lse) {
  const int64_t kv_heads = k.dim(1), D = k.dim(2);
  const Shape sh{heads, heads / kv_heads, D, kv_heads * D};
  std::vector<float> scaled(static_cast<size_t>(heads * D));
  for (int64_t i = 0; i < heads * D; ++i) scaled[i] = q[i] * scale;
  const int64_t bytes = 2 * kv_len * sh.row_elems * static_cast<int64_t>(DTypeSize(k.dtype()));
  const int64_t chunks =
      bytes < kSerialBytes ? 1 : std::min<int64_t>(pool.size(), (kv_len + kTile - 1) / kTile);
  std::vector<Partial> parts(static_cast<size_t>(chunks));
  auto run = [&](int64_t c) {
    const int64_t j0 = kv_len * c / chunks, j1 = kv_len * (c + 1) / chunks;
    if (softcap > 0.0f) {
      AttendRangeOf(k, v, scaled.data(), sh, j0, j1, weighted_from, log_weight,
                    SoftCappedLogits{softcap}, parts[c]);
    } else {
      AttendRangeOf(k, v, scaled.data(), sh, j0, j1, weighted_from, log_weight, LogitsAsIs{},
                    parts[c]);
    }
  };
  if (chunks == 1) {
    run(0);
  } else {
    pool.ParallelFor(chunks, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) run(c);
    });
  }
  // Merge the chunks' states by their log-sum-exp.
  for (int64_t h = 0; h < heads; ++h) {
    float m = kNegInf;
    for (const Partial& p : parts) m = std::max(m, p.max[h]);
    float total = 0.0f;
    float* o = out + h * D;
    std::fill(o, o + D, 0.0f);
    for (const Partial& p : parts) {
      if (p.sum[h] == 0.0f) continue;  // an empty range
      const float w = std::exp(p.max[h] - m);
      total += p.sum[h] * w;
      for (int64_t d = 0; d < D; ++d) o[d] += p.o[h * D + d] * w;
    }
    const float inv = 1.0f / total;  // kv_len >= 1: the maximum's own term is 1
    for (int64_t d = 0; d < D; ++d) o[d] *= inv;
    lse[h] = m + std::log(total);
  }
}

}  // namespace manyshot::cpu_internal::HWY_NAMESPACE
MANYSHOT_SIMD_END
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace manyshot::cpu_internal {

HWY_EXPORT(DecodeKernelSupportsImpl);
HWY_EXPORT(AttendOneTokenImpl);

// The scalar target (no SIMD) leaves decode to the sgemm path.
bool DecodeKernelSupports(int64_t head_dim) {
  return HWY_DYNAMIC_DISPATCH(DecodeKernelSupportsImpl)(head_dim);
}

void AttendOneToken(ThreadPool& pool, const float* q, int64_t heads, const Tensor& k,
                    const Tensor& v, int64_t kv_len, int64_t weighted_from, float log_weight,
                    float scale, float softcap, float* out, float* lse) {
  HWY_DYNAMIC_DISPATCH(AttendOneTokenImpl)
  (pool, q, heads, k, v, kv_len, weighted_from, log_weight, scale, softcap, out, lse);
}

}  // namespace manyshot::cpu_internal
#endif  // HWY_ONCE

#include "engine/cpu/cpu_decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/cpu/simd512.h"
#include "engine/cpu/vector_math.h"

namespace manyshot::cpu_internal {

#if MANYSHOT_AVX512
MANYSHOT_AVX512_BEGIN

namespace {

constexpr int64_t kTile = 64;  // keys per online-softmax step
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Below this many K/V bytes one thread does it all: waking the pool costs more.
constexpr int64_t kSerialBytes = int64_t{256} << 10;

// 16 stored values at element index i of a K/V tensor of storage dtype kDt, as f32.
template <DType kDt>
inline __m512 Load16At(const void* base, int64_t i) {
  if constexpr (kDt == DType::kF32) {
    return simd512::LoadF32(static_cast<const float*>(base) + i);
  } else if constexpr (kDt == DType::kBF16) {
    return simd512::LoadBF16(static_cast<const uint16_t*>(base) + i);
  } else {
    return simd512::LoadF16(static_cast<const uint16_t*>(base) + i);
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

// Keys [j0, j1) into `part`. q is pre-scaled. Both passes over a tile read whole key rows (every
// kv head) in key order, so K and V stream front to back.
template <DType kDt>
void AttendRange(const float* q, const Shape& sh, const void* k, const void* v, int64_t j0,
                 int64_t j1, int64_t weighted_from, float log_weight, Partial& part) {
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
        __m512 acc = _mm512_setzero_ps();
        for (int64_t c = 0; c < D; c += 16) {
          acc = _mm512_fmadd_ps(Load16At<kDt>(k, base + c), _mm512_loadu_ps(q + h * D + c), acc);
        }
        s[h * kTile + jj] = _mm512_reduce_add_ps(acc) + extra;
      }
    }
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
        for (int64_t d = 0; d < D; ++d) part.o[h * D + d] *= correction;
      }
    }
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t row = (t0 + jj) * sh.row_elems;
      for (int64_t h = 0; h < H; ++h) {
        const __m512 p = _mm512_set1_ps(s[h * kTile + jj]);
        const int64_t base = row + (h / sh.group) * D;
        float* o = part.o.data() + h * D;
        for (int64_t c = 0; c < D; c += 16) {
          _mm512_storeu_ps(o + c,
                           _mm512_fmadd_ps(p, Load16At<kDt>(v, base + c), _mm512_loadu_ps(o + c)));
        }
      }
    }
  }
}

}  // namespace

bool DecodeKernelSupports(int64_t head_dim) {
  return head_dim >= 16 && head_dim <= 256 && head_dim % 16 == 0;
}

void AttendOneToken(ThreadPool& pool, const float* q, int64_t heads, const Tensor& k,
                    const Tensor& v, int64_t kv_len, int64_t weighted_from, float log_weight,
                    float scale, float* out, float* lse) {
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
    switch (k.dtype()) {
      case DType::kF32:
        return AttendRange<DType::kF32>(scaled.data(), sh, k.raw(), v.raw(), j0, j1, weighted_from,
                                        log_weight, parts[c]);
      case DType::kBF16:
        return AttendRange<DType::kBF16>(scaled.data(), sh, k.raw(), v.raw(), j0, j1, weighted_from,
                                         log_weight, parts[c]);
      default:  // f16 (the fronts admit float K/V only)
        return AttendRange<DType::kF16>(scaled.data(), sh, k.raw(), v.raw(), j0, j1, weighted_from,
                                        log_weight, parts[c]);
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

MANYSHOT_AVX512_END
#else  // no AVX-512 in this build: callers take the sgemm path

bool DecodeKernelSupports(int64_t) { return false; }

void AttendOneToken(ThreadPool&, const float*, int64_t, const Tensor&, const Tensor&, int64_t,
                    int64_t, float, float, float*, float*) {}

#endif

}  // namespace manyshot::cpu_internal

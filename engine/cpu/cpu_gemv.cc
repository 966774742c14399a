#include "engine/cpu/cpu_gemv.h"

#include <algorithm>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/cpu/simd512.h"

namespace manyshot::cpu_internal {
namespace {

// Below this many weight bytes one thread does the whole product: waking the pool costs more.
constexpr int64_t kSerialWeightBytes = int64_t{256} << 10;
// The shortest range of [out, in] weight rows a thread takes at a time (ThreadPool::
// ParallelForGuided): a few microseconds of streaming, long enough for the prefetchers.
constexpr int64_t kMinRangeBytes = int64_t{64} << 10;

inline float WeightAt(const float* w, int64_t i) { return w[i]; }
inline float WeightAt(const uint16_t* w, int64_t i) { return BF16ToF32(w[i]); }

#if MANYSHOT_AVX512
MANYSHOT_AVX512_BEGIN

using simd512::FirstLanes;
// 16 weights (or activations) as f32; `n` < 16 loads only the first n.
inline __m512 Load16(const float* p) { return simd512::LoadF32(p); }
inline __m512 Load16(const float* p, int64_t n) { return simd512::LoadF32(p, n); }
inline __m512 Load16(const uint16_t* p) { return simd512::LoadBF16(p); }
inline __m512 Load16(const uint16_t* p, int64_t n) { return simd512::LoadBF16(p, n); }

// [out, in] weights: out[r, o] for o in [o0, o1). Each weight row is read once, front to back, so
// the thread's whole range is one sequential stream; four accumulators per activation row keep
// the FMAs independent when the weights come from cache.
template <int R, typename W>
void OutInRange(const float* x, int64_t in, const W* w, int64_t o0, int64_t o1,
                int64_t out_features, const float* bias, float* out) {
  for (int64_t o = o0; o < o1; ++o) {
    const W* wr = w + o * in;
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 64 <= in; i += 64) {
      for (int u = 0; u < 4; ++u) {
        const __m512 wv = Load16(wr + i + 16 * u);
        for (int r = 0; r < R; ++r) {
          acc[r][u] = _mm512_fmadd_ps(wv, Load16(x + r * in + i + 16 * u), acc[r][u]);
        }
      }
    }
    for (; i < in; i += 16) {
      const int64_t n = std::min<int64_t>(16, in - i);
      const __m512 wv = Load16(wr + i, n);
      for (int r = 0; r < R; ++r) {
        acc[r][0] = _mm512_fmadd_ps(wv, Load16(x + r * in + i, n), acc[r][0]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 sum =
          _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
      out[r * out_features + o] = _mm512_reduce_add_ps(sum) + (bias ? bias[o] : 0.0f);
    }
  }
}

// [in, out] weights: partial[r, :] += sum over i in [i0, i1) of x[r, i] * W[i, :]. K weight rows
// at a time are streamed side by side (K sequential streams through the thread's contiguous
// block) while the partial sums stay in L1/L2.
template <int R, int K, typename W>
void InOutRows(const float* x, int64_t in, const W* w, int64_t out_features, int64_t i,
               float* partial) {
  __m512 xs[R][K];
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) xs[r][k] = _mm512_set1_ps(x[r * in + i + k]);
  }
  const W* wr[K];
  for (int k = 0; k < K; ++k) wr[k] = w + (i + k) * out_features;
  int64_t c = 0;
  for (; c + 16 <= out_features; c += 16) {
    __m512 wv[K];
    for (int k = 0; k < K; ++k) wv[k] = Load16(wr[k] + c);
    for (int r = 0; r < R; ++r) {
      float* p = partial + r * out_features + c;
      __m512 acc = _mm512_loadu_ps(p);
      for (int k = 0; k < K; ++k) acc = _mm512_fmadd_ps(wv[k], xs[r][k], acc);
      _mm512_storeu_ps(p, acc);
    }
  }
  if (c < out_features) {
    const int64_t n = out_features - c;
    __m512 wv[K];
    for (int k = 0; k < K; ++k) wv[k] = Load16(wr[k] + c, n);
    for (int r = 0; r < R; ++r) {
      float* p = partial + r * out_features + c;
      __m512 acc = Load16(p, n);
      for (int k = 0; k < K; ++k) acc = _mm512_fmadd_ps(wv[k], xs[r][k], acc);
      _mm512_mask_storeu_ps(p, FirstLanes(n), acc);
    }
  }
}

// f32 weights, [in, out]: four rows per pass over the partial sums (a quarter of their loads and
// stores).
template <int R>
void InOutRange(const float* x, int64_t in, const float* w, int64_t out_features, int64_t i0,
                int64_t i1, float* partial) {
  int64_t i = i0;
  for (; i + 4 <= i1; i += 4) InOutRows<R, 4>(x, in, w, out_features, i, partial);
  for (; i < i1; ++i) InOutRows<R, 1>(x, in, w, out_features, i, partial);
}

// bf16 weights, 32 at a time (64 bytes) as two f32 vectors without a shuffle: the even elements
// 0, 2, .., 30 are the low halves of the 32-bit lanes shifted up, the odd ones the high halves
// with the low halves cleared (both exact). Widening 16 at a time (zero-extend, then shift) cost
// three times the instructions and made the bf16 kernels compute-bound at half the f32 GB/s.
// The kernels keep their activations ([out, in]) or partial sums ([in, out]) in the same order:
// within each block of 32, the 16 even positions then the 16 odd ones (PairOrder).
inline void SplitPairsBF16(__m512i v, __m512& even, __m512& odd) {
  even = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
  odd = _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
inline void LoadPairsBF16(const uint16_t* p, __m512& even, __m512& odd) {
  SplitPairsBF16(_mm512_loadu_si512(p), even, odd);
}
// n < 32: elements past n read as zero (and are not loaded).
inline void LoadPairsBF16(const uint16_t* p, int64_t n, __m512& even, __m512& odd) {
  SplitPairsBF16(_mm512_maskz_loadu_epi16(static_cast<__mmask32>((uint64_t{1} << n) - 1), p), even,
                 odd);
}

// [out, in] bf16 weights: out[r, o] for o in [o0, o1), with xp the activation rows in PairOrder
// (row stride `padded`, a multiple of 32, zeros past `in`).
template <int R>
void OutInRangeBF16(const float* xp, int64_t padded, int64_t in, const uint16_t* w, int64_t o0,
                    int64_t o1, int64_t out_features, const float* bias, float* out) {
  for (int64_t o = o0; o < o1; ++o) {
    const uint16_t* wr = w + o * in;
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_setzero_ps();
    }
    int64_t i = 0;
    for (; i + 64 <= in; i += 64) {
      __m512 wv[4];
      LoadPairsBF16(wr + i, wv[0], wv[1]);
      LoadPairsBF16(wr + i + 32, wv[2], wv[3]);
      for (int r = 0; r < R; ++r) {
        for (int u = 0; u < 4; ++u) {
          acc[r][u] =
              _mm512_fmadd_ps(wv[u], _mm512_loadu_ps(xp + r * padded + i + 16 * u), acc[r][u]);
        }
      }
    }
    for (; i < in; i += 32) {
      __m512 even, odd;
      LoadPairsBF16(wr + i, std::min<int64_t>(32, in - i), even, odd);
      for (int r = 0; r < R; ++r) {
        acc[r][0] = _mm512_fmadd_ps(even, _mm512_loadu_ps(xp + r * padded + i), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(odd, _mm512_loadu_ps(xp + r * padded + i + 16), acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 sum =
          _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
      out[r * out_features + o] = _mm512_reduce_add_ps(sum) + (bias ? bias[o] : 0.0f);
    }
  }
}

// [in, out] bf16 weights: partial[r, :] (PairOrder, row stride `padded`) += x[r, i + k] * W[i + k,
// :] for k < K, K weight rows side by side, each row's terms added in order of i.
template <int R, int K>
void InOutRowsBF16(const float* x, int64_t in, const uint16_t* w, int64_t out_features,
                   int64_t padded, int64_t i, float* partial) {
  __m512 xs[R][K];
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) xs[r][k] = _mm512_set1_ps(x[r * in + i + k]);
  }
  const uint16_t* wr[K];
  for (int k = 0; k < K; ++k) wr[k] = w + (i + k) * out_features;
  for (int64_t c = 0; c < out_features; c += 32) {
    const int64_t n = std::min<int64_t>(32, out_features - c);
    __m512 even[K], odd[K];
    for (int k = 0; k < K; ++k) {
      if (n == 32) {
        LoadPairsBF16(wr[k] + c, even[k], odd[k]);
      } else {
        LoadPairsBF16(wr[k] + c, n, even[k], odd[k]);
      }
    }
    for (int r = 0; r < R; ++r) {
      float* p = partial + r * padded + c;
      __m512 pe = _mm512_loadu_ps(p), po = _mm512_loadu_ps(p + 16);
      for (int k = 0; k < K; ++k) {
        pe = _mm512_fmadd_ps(even[k], xs[r][k], pe);
        po = _mm512_fmadd_ps(odd[k], xs[r][k], po);
      }
      _mm512_storeu_ps(p, pe);
      _mm512_storeu_ps(p + 16, po);
    }
  }
}

template <int R>
void InOutRangeBF16(const float* x, int64_t in, const uint16_t* w, int64_t out_features,
                    int64_t padded, int64_t i0, int64_t i1, float* partial) {
  int64_t i = i0;
  for (; i + 4 <= i1; i += 4) InOutRowsBF16<R, 4>(x, in, w, out_features, padded, i, partial);
  for (; i < i1; ++i) InOutRowsBF16<R, 1>(x, in, w, out_features, padded, i, partial);
}

MANYSHOT_AVX512_END

#else  // portable fallback (no AVX-512): the same partition, plain loops

template <int R, typename W>
void OutInRange(const float* x, int64_t in, const W* w, int64_t o0, int64_t o1,
                int64_t out_features, const float* bias, float* out) {
  for (int64_t o = o0; o < o1; ++o) {
    for (int r = 0; r < R; ++r) {
      float sum = 0.0f;
      for (int64_t i = 0; i < in; ++i) sum += x[r * in + i] * WeightAt(w, o * in + i);
      out[r * out_features + o] = sum + (bias ? bias[o] : 0.0f);
    }
  }
}

template <int R, typename W>
void InOutRange(const float* x, int64_t in, const W* w, int64_t out_features, int64_t i0,
                int64_t i1, float* partial) {
  for (int64_t i = i0; i < i1; ++i) {
    for (int r = 0; r < R; ++r) {
      const float xi = x[r * in + i];
      float* p = partial + r * out_features;
      for (int64_t c = 0; c < out_features; ++c) p[c] += xi * WeightAt(w, i * out_features + c);
    }
  }
}

#endif

// Contiguous, near-equal chunks of [0, n) in units of `unit`, one per thread.
int64_t ChunkBegin(int64_t n, int64_t unit, int64_t chunks, int64_t c) {
  const int64_t units = (n + unit - 1) / unit;
  return std::min(n, units * c / chunks * unit);
}

// bf16 weights take the PairOrder kernels where the build has AVX-512.
template <typename W>
constexpr bool kPairOrder = MANYSHOT_AVX512 && sizeof(W) == 2;

// Where element j of a vector lies in PairOrder (blocks of 32: the even elements, then the odd).
inline int64_t PairPosition(int64_t j) {
  const int64_t q = j % 32;
  return j - q + (q % 2 == 0 ? q / 2 : 16 + q / 2);
}

template <int R, typename W>
void GemvTyped(ThreadPool& pool, const float* x, int64_t in, const W* w, WeightLayout layout,
               int64_t out_features, const float* bias, float* out) {
  const int64_t weight_bytes = in * out_features * static_cast<int64_t>(sizeof(W));
  const int64_t chunks = weight_bytes < kSerialWeightBytes ? 1 : pool.size();
  auto for_each_chunk = [&](auto&& fn) {
    if (chunks == 1) {
      fn(0);
      return;
    }
    pool.ParallelFor(chunks, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) fn(c);
    });
  };
  if (layout == WeightLayout::kOutIn) {
    // Threads take contiguous ranges of output rows, each streaming its block of W front to back;
    // guided ranges (long first, then shrinking) so that neither waits long for the other.
    auto for_each_range = [&](auto&& fn) {
      if (chunks == 1) {
        fn(0, out_features);
        return;
      }
      const int64_t row_bytes = in * static_cast<int64_t>(sizeof(W));
      pool.ParallelForGuided(out_features, std::max<int64_t>(1, kMinRangeBytes / row_bytes), fn);
    };
    if constexpr (kPairOrder<W>) {
      const int64_t padded = (in + 31) / 32 * 32;
      std::vector<float> xp(static_cast<size_t>(R * padded), 0.0f);
      for (int r = 0; r < R; ++r) {
        for (int64_t i = 0; i < in; ++i) xp[r * padded + PairPosition(i)] = x[r * in + i];
      }
      for_each_range([&](int64_t o0, int64_t o1) {
        OutInRangeBF16<R>(xp.data(), padded, in, w, o0, o1, out_features, bias, out);
      });
    } else {
      for_each_range([&](int64_t o0, int64_t o1) {
        OutInRange<R>(x, in, w, o0, o1, out_features, bias, out);
      });
    }
    return;
  }
  // Threads split the input rows (again one contiguous block of W each) into partial sums, which
  // are then added up; the partials are small (rows x out_features floats per thread).
  const int64_t padded = kPairOrder<W> ? (out_features + 31) / 32 * 32 : out_features;
  std::vector<float> partials(static_cast<size_t>(chunks * R * padded), 0.0f);
  for_each_chunk([&](int64_t c) {
    const int64_t i0 = ChunkBegin(in, 4, chunks, c), i1 = ChunkBegin(in, 4, chunks, c + 1);
    float* partial = partials.data() + c * R * padded;
    if constexpr (kPairOrder<W>) {
      InOutRangeBF16<R>(x, in, w, out_features, padded, i0, i1, partial);
    } else {
      InOutRange<R>(x, in, w, out_features, i0, i1, partial);
    }
  });
  // Every element is the bias plus the chunks' partial sums in chunk order (as before), now added
  // a chunk at a time (vectorised; element by element over the chunks it was scalar), in the
  // partials' order, then put in output order.
  std::vector<float> sum(static_cast<size_t>(padded));
  for (int r = 0; r < R; ++r) {
    for (int64_t j = 0; j < out_features; ++j) {
      sum[kPairOrder<W> ? PairPosition(j) : j] = bias ? bias[j] : 0.0f;
    }
    for (int64_t c = 0; c < chunks; ++c) {
      const float* p = partials.data() + (c * R + r) * padded;
      for (int64_t k = 0; k < padded; ++k) sum[k] += p[k];
    }
    float* o = out + r * out_features;
    for (int64_t j = 0; j < out_features; ++j) o[j] = sum[kPairOrder<W> ? PairPosition(j) : j];
  }
}

template <typename W>
void GemvRows(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const W* w,
              WeightLayout layout, int64_t out_features, const float* bias, float* out) {
  switch (rows) {
    case 1:
      return GemvTyped<1>(pool, x, in, w, layout, out_features, bias, out);
    case 2:
      return GemvTyped<2>(pool, x, in, w, layout, out_features, bias, out);
    case 3:
      return GemvTyped<3>(pool, x, in, w, layout, out_features, bias, out);
    default:
      return GemvTyped<4>(pool, x, in, w, layout, out_features, bias, out);
  }
}

}  // namespace

static_assert(kGemvMaxRows == 4, "GemvRows instantiates rows 1..4");

void Gemv(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const void* weight,
          DType weight_dtype, WeightLayout layout, int64_t out_features, const float* bias,
          float* out) {
  if (weight_dtype == DType::kBF16) {
    GemvRows(pool, x, rows, in, static_cast<const uint16_t*>(weight), layout, out_features, bias,
             out);
  } else {
    GemvRows(pool, x, rows, in, static_cast<const float*>(weight), layout, out_features, bias, out);
  }
}

}  // namespace manyshot::cpu_internal

#include "engine/cpu/cpu_gemv.h"

#include <algorithm>
#include <vector>

#include "engine/core/dtype.h"

// Compiled once per instruction set (hwy/foreach_target.h); Gemv dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/cpu_gemv.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// After foreach_target.h: included once per target.
#include "engine/cpu/simd-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
MANYSHOT_SIMD_BEGIN
namespace manyshot::cpu_internal::HWY_NAMESPACE {
namespace {

// Below this many weight bytes one thread does the whole product: waking the pool costs more.
constexpr int64_t kSerialWeightBytes = int64_t{256} << 10;
// The shortest range of [out, in] weight rows a thread takes at a time (ThreadPool::
// ParallelForGuided): a few microseconds of streaming, long enough for the prefetchers.
constexpr int64_t kMinRangeBytes = int64_t{64} << 10;
// bf16 weights are read a vector of 32-bit lanes (two bf16 each) at a time: kPair values.
constexpr int64_t kPair = 2 * kLanes;

// Accumulators per activation row in the [out, in] kernels: four independent FMA chains where the
// registers hold R rows of them besides the weights (AVX-512's 32 registers always do), else two.
// Even, so that a bf16 vector pair fills two.
template <int R>
constexpr int kAccs = (kRegisters - 2) / R >= 4 ? 4 : 2;

// kLanes values (or the first n, the rest zero) as f32.
inline VF Load(const float* p, int64_t n) { return n == kLanes ? LoadF32(p) : LoadPartial(p, n); }

// [out, in] weights: out[r, o] for o in [o0, o1). Each weight row is read once, front to back, so
// the thread's whole range is one sequential stream; U accumulators per activation row keep the
// FMAs independent when the weights come from cache.
template <int R>
void OutInRange(const float* x, int64_t in, const float* w, int64_t o0, int64_t o1,
                int64_t out_features, const float* bias, float* out) {
  constexpr int U = kAccs<R>;
  const DF d;
  for (int64_t o = o0; o < o1; ++o) {
    const float* wr = w + o * in;
    VF acc[R][U];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < U; ++u) acc[r][u] = hn::Zero(d);
    }
    int64_t i = 0;
    for (; i + U * kLanes <= in; i += U * kLanes) {
      for (int u = 0; u < U; ++u) {
        const VF wv = LoadF32(wr + i + kLanes * u);
        for (int r = 0; r < R; ++r) {
          acc[r][u] = hn::MulAdd(wv, LoadF32(x + r * in + i + kLanes * u), acc[r][u]);
        }
      }
    }
    for (; i < in; i += kLanes) {
      const int64_t n = std::min<int64_t>(kLanes, in - i);
      const VF wv = Load(wr + i, n);
      for (int r = 0; r < R; ++r) acc[r][0] = hn::MulAdd(wv, Load(x + r * in + i, n), acc[r][0]);
    }
    for (int r = 0; r < R; ++r) {
      VF sum = acc[r][0];
      for (int u = 1; u < U; ++u) sum = hn::Add(sum, acc[r][u]);
      out[r * out_features + o] = ReduceSum(sum) + (bias ? bias[o] : 0.0f);
    }
  }
}

// [in, out] weights: partial[r, :] += sum over i in [i0, i1) of x[r, i] * W[i, :]. K weight rows
// at a time are streamed side by side (K sequential streams through the thread's contiguous
// block) while the partial sums stay in L1/L2.
template <int R, int K>
void InOutRows(const float* x, int64_t in, const float* w, int64_t out_features, int64_t i,
               float* partial) {
  const DF d;
  VF xs[R][K];
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) xs[r][k] = hn::Set(d, x[r * in + i + k]);
  }
  const float* wr[K];
  for (int k = 0; k < K; ++k) wr[k] = w + (i + k) * out_features;
  for (int64_t c = 0; c < out_features; c += kLanes) {
    const int64_t n = std::min<int64_t>(kLanes, out_features - c);
    VF wv[K];
    for (int k = 0; k < K; ++k) wv[k] = Load(wr[k] + c, n);
    for (int r = 0; r < R; ++r) {
      float* p = partial + r * out_features + c;
      VF acc = Load(p, n);
      for (int k = 0; k < K; ++k) acc = hn::MulAdd(wv[k], xs[r][k], acc);
      if (n == kLanes) {
        hn::StoreU(acc, d, p);
      } else {
        StorePartial(acc, p, n);
      }
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

// bf16 weights, kPair at a time (a vector of 32-bit lanes) as two f32 vectors without a shuffle:
// the even elements 0, 2, .. are the low halves of the 32-bit lanes shifted up, the odd ones the
// high halves with the low halves cleared (both exact). Widening kLanes at a time (zero-extend,
// then shift) cost three times the instructions and made the bf16 kernels compute-bound at half
// the f32 GB/s. The kernels keep their activations ([out, in]) or partial sums ([in, out]) in the
// same order: within each block of kPair, the kLanes even positions then the odd ones (PairOrder).
inline void SplitPairsBF16(hn::Vec<DU32> v, VF& even, VF& odd) {
  const DF d;
  even = hn::BitCast(d, hn::ShiftLeft<16>(v));
  odd = hn::BitCast(d, hn::And(v, hn::Set(DU32(), 0xFFFF0000u)));
}
inline void LoadPairsBF16(const uint16_t* p, VF& even, VF& odd) {
#if HWY_TARGET == HWY_SCALAR  // one lane: the pair is one 32-bit word
  uint32_t word;
  std::memcpy(&word, p, sizeof(word));
  SplitPairsBF16(hn::Set(DU32(), word), even, odd);
#else
  SplitPairsBF16(hn::BitCast(DU32(), hn::LoadU(DU16Pairs(), p)), even, odd);
#endif
}
// n < kPair: elements past n read as zero (and are not loaded).
inline void LoadPairsBF16(const uint16_t* p, int64_t n, VF& even, VF& odd) {
  alignas(64) uint16_t buf[kPair] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(uint16_t));
  LoadPairsBF16(buf, even, odd);
}

// [out, in] bf16 weights: out[r, o] for o in [o0, o1), with xp the activation rows in PairOrder
// (row stride `padded`, a multiple of kPair, zeros past `in`).
template <int R>
void OutInRangeBF16(const float* xp, int64_t padded, int64_t in, const uint16_t* w, int64_t o0,
                    int64_t o1, int64_t out_features, const float* bias, float* out) {
  constexpr int U = kAccs<R>;
  const DF d;
  for (int64_t o = o0; o < o1; ++o) {
    const uint16_t* wr = w + o * in;
    VF acc[R][U];
    for (int r = 0; r < R; ++r) {
      for (int u = 0; u < U; ++u) acc[r][u] = hn::Zero(d);
    }
    int64_t i = 0;
    for (; i + U * kLanes <= in; i += U * kLanes) {
      VF wv[U];
      for (int u = 0; u < U; u += 2) LoadPairsBF16(wr + i + kLanes * u, wv[u], wv[u + 1]);
      for (int r = 0; r < R; ++r) {
        for (int u = 0; u < U; ++u) {
          acc[r][u] = hn::MulAdd(wv[u], LoadF32(xp + r * padded + i + kLanes * u), acc[r][u]);
        }
      }
    }
    for (; i < in; i += kPair) {
      VF even, odd;
      LoadPairsBF16(wr + i, std::min<int64_t>(kPair, in - i), even, odd);
      for (int r = 0; r < R; ++r) {
        acc[r][0] = hn::MulAdd(even, LoadF32(xp + r * padded + i), acc[r][0]);
        acc[r][1] = hn::MulAdd(odd, LoadF32(xp + r * padded + i + kLanes), acc[r][1]);
      }
    }
    for (int r = 0; r < R; ++r) {
      VF sum = acc[r][0];
      for (int u = 1; u < U; ++u) sum = hn::Add(sum, acc[r][u]);
      out[r * out_features + o] = ReduceSum(sum) + (bias ? bias[o] : 0.0f);
    }
  }
}

// [in, out] bf16 weights: partial[r, :] (PairOrder, row stride `padded`) += x[r, i + k] * W[i + k,
// :] for k < K, K weight rows side by side, each row's terms added in order of i.
template <int R, int K>
void InOutRowsBF16(const float* x, int64_t in, const uint16_t* w, int64_t out_features,
                   int64_t padded, int64_t i, float* partial) {
  const DF d;
  VF xs[R][K];
  for (int r = 0; r < R; ++r) {
    for (int k = 0; k < K; ++k) xs[r][k] = hn::Set(d, x[r * in + i + k]);
  }
  const uint16_t* wr[K];
  for (int k = 0; k < K; ++k) wr[k] = w + (i + k) * out_features;
  for (int64_t c = 0; c < out_features; c += kPair) {
    const int64_t n = std::min<int64_t>(kPair, out_features - c);
    VF even[K], odd[K];
    for (int k = 0; k < K; ++k) {
      if (n == kPair) {
        LoadPairsBF16(wr[k] + c, even[k], odd[k]);
      } else {
        LoadPairsBF16(wr[k] + c, n, even[k], odd[k]);
      }
    }
    for (int r = 0; r < R; ++r) {
      float* p = partial + r * padded + c;
      VF pe = LoadF32(p), po = LoadF32(p + kLanes);
      for (int k = 0; k < K; ++k) {
        pe = hn::MulAdd(even[k], xs[r][k], pe);
        po = hn::MulAdd(odd[k], xs[r][k], po);
      }
      hn::StoreU(pe, d, p);
      hn::StoreU(po, d, p + kLanes);
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

// Contiguous, near-equal chunks of [0, n) in units of `unit`, one per thread.
int64_t ChunkBegin(int64_t n, int64_t unit, int64_t chunks, int64_t c) {
  const int64_t units = (n + unit - 1) / unit;
  return std::min(n, units * c / chunks * unit);
}

// bf16 weights take the PairOrder kernels.
template <typename W>
constexpr bool kPairOrder = sizeof(W) == 2;

// Where element j of a vector lies in PairOrder (blocks of kPair: the even elements, then the odd).
inline int64_t PairPosition(int64_t j) {
  const int64_t q = j % kPair;
  return j - q + (q % 2 == 0 ? q / 2 : kLanes + q / 2);
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
      const int64_t padded = (in + kPair - 1) / kPair * kPair;
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
  const int64_t padded = kPairOrder<W> ? (out_features + kPair - 1) / kPair * kPair : out_features;
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

void GemvImpl(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const void* weight,
              DType weight_dtype, WeightLayout layout, int64_t out_features, const float* bias,
              float* out) {
  if (weight_dtype == DType::kBF16) {
    GemvRows(pool, x, rows, in, static_cast<const uint16_t*>(weight), layout, out_features, bias,
             out);
  } else {
    GemvRows(pool, x, rows, in, static_cast<const float*>(weight), layout, out_features, bias, out);
  }
}

}  // namespace manyshot::cpu_internal::HWY_NAMESPACE
MANYSHOT_SIMD_END
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace manyshot::cpu_internal {

HWY_EXPORT(GemvImpl);

void Gemv(ThreadPool& pool, const float* x, int64_t rows, int64_t in, const void* weight,
          DType weight_dtype, WeightLayout layout, int64_t out_features, const float* bias,
          float* out) {
  HWY_DYNAMIC_DISPATCH(GemvImpl)
  (pool, x, rows, in, weight, weight_dtype, layout, out_features, bias, out);
}

}  // namespace manyshot::cpu_internal
#endif  // HWY_ONCE

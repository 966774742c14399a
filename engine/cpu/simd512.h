// AVX-512 loads shared by the CPU kernels: 16 values of a storage dtype as 16 f32 lanes. Only
// where the build targets AVX-512 (MANYSHOT_NATIVE on such a machine); MANYSHOT_AVX512 says so.
//
// GCC 12's AVX-512 headers build "undefined" vectors as `__m512i __Y = __Y;`, which
// -W(maybe-)uninitialized reports wherever such an intrinsic is inlined (GCC 13 no longer does):
// kernel files wrap their AVX-512 code in MANYSHOT_AVX512_BEGIN / MANYSHOT_AVX512_END.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MANYSHOT_AVX512 1
#include <immintrin.h>

#include <cstdint>

#define MANYSHOT_AVX512_BEGIN                                                                \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define MANYSHOT_AVX512_END _Pragma("GCC diagnostic pop")

namespace manyshot::simd512 {

inline __mmask16 FirstLanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

inline __m512 LoadF32(const float* p) { return _mm512_loadu_ps(p); }
// n < 16: only the first n lanes are read; the rest are zero.
inline __m512 LoadF32(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(FirstLanes(n), p); }

// bf16 is the top half of an f32: widening is a zero-extension and a shift, exact.
inline __m512 WidenBF16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
inline __m512 LoadBF16(const uint16_t* p) {
  return WidenBF16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
inline __m512 LoadBF16(const uint16_t* p, int64_t n) {
  return WidenBF16(_mm256_maskz_loadu_epi16(FirstLanes(n), p));
}
// IEEE half to f32 (vcvtph2ps), exact.
inline __m512 LoadF16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// exp(x) for 16 lanes, for softmax weights: Cody-Waite reduction x = n ln2 + r (|r| <= ln2 / 2,
// ln2 split in two so n ln2 is exact enough), a degree-6 Taylor polynomial for e^r (truncation
// below 2^-23 relative) and vscalefps for the 2^n; a few ulp in all. x below -87.3 (e^x under
// the normal floats), -inf and NaN give 0.
inline __m512 Exp(__m512 x) {
  const __m512 t = _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 720);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __mmask16 in_range = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3365447504f), _CMP_GE_OQ);
  return _mm512_maskz_mov_ps(in_range, _mm512_scalef_ps(p, n));
}

}  // namespace manyshot::simd512

#else
#define MANYSHOT_AVX512 0
#define MANYSHOT_AVX512_BEGIN
#define MANYSHOT_AVX512_END
#endif

// AVX-512 loads shared by the CPU kernels: 16 values of a storage dtype as 16 f32 lanes. Only
// where the build targets AVX-512 (MANYSHOT_NATIVE on such a machine); MANYSHOT_AVX512 says so.
//
// GCC 12's AVX-512 headers build "undefined" vectors as `__m512i __Y = __Y;`, which
// -Wmaybe-uninitialized reports wherever such an intrinsic is inlined (GCC 13 no longer does):
// kernel files wrap their AVX-512 code in MANYSHOT_AVX512_BEGIN / MANYSHOT_AVX512_END.
#pragma once

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define MANYSHOT_AVX512 1
#include <immintrin.h>

#include <cstdint>

#define MANYSHOT_AVX512_BEGIN \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
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

}  // namespace manyshot::simd512

#else
#define MANYSHOT_AVX512 0
#define MANYSHOT_AVX512_BEGIN
#define MANYSHOT_AVX512_END
#endif

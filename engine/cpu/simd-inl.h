// Vector helpers shared by the CPU kernels, compiled once per instruction set that Highway
// dispatches to at run time (cpu_target.h): loads of a storage dtype widened to f32 lanes, partial
// loads and stores for vector tails, exp for softmax weights. Included by the kernel files inside
// their foreach_target.h pass, after hwy/highway.h, as Highway's -inl.h headers are: the include
// guard toggles once per target.
//
// Lanes(d) is a compile-time constant on every target the kernels are built for (x86, NEON); the
// scalable SVE targets are left out (CMakeLists.txt) because the kernels keep vectors in arrays.

// GCC 12's AVX-512 headers build "undefined" vectors as `__m512i __Y = __Y;`, which
// -W(maybe-)uninitialized reports wherever such an intrinsic is inlined (GCC 13 no longer does):
// kernel files wrap their per-target code in MANYSHOT_SIMD_BEGIN / MANYSHOT_SIMD_END.
#ifndef MANYSHOT_SIMD_BEGIN
#define MANYSHOT_SIMD_BEGIN                                                                  \
  _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"") \
      _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")
#define MANYSHOT_SIMD_END _Pragma("GCC diagnostic pop")
#endif

#if defined(MANYSHOT_ENGINE_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MANYSHOT_ENGINE_CPU_SIMD_INL_H_
#undef MANYSHOT_ENGINE_CPU_SIMD_INL_H_
#else
#define MANYSHOT_ENGINE_CPU_SIMD_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
// In the kernels' own namespace, so that every kernel file names them (and hn) as they are.
namespace manyshot::cpu_internal::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using DU32 = hn::RebindToUnsigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;  // as many u16 lanes as f32 ones
using DH = hn::Rebind<hwy::float16_t, DF>;
using DU16Pairs = hn::Repartition<uint16_t, DF>;  // twice as many u16 lanes: a full vector

// f32 lanes per vector on this target.
constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(DF()));
// Vector registers the kernels may plan their register tiles for.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM_A64
constexpr int kRegisters = 32;
#else
constexpr int kRegisters = 16;
#endif

inline VF LoadF32(const float* p) { return hn::LoadU(DF(), p); }

// bf16 is the top half of an f32: widening is a zero-extension and a shift, exact.
inline VF WidenBF16(hn::Vec<DU16> h) {
  const DU32 du;
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}
inline VF LoadBF16(const uint16_t* p) { return WidenBF16(hn::LoadU(DU16(), p)); }
// IEEE half to f32 (F16C's vcvtph2ps where the target has it), exact.
inline VF LoadF16(const uint16_t* p) {
  return hn::PromoteTo(DF(), hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(p)));
}

// The first n < kLanes values at p, the other lanes zero; reads nothing past p + n (vector
// tails at the end of a buffer: a full load there could cross into an unmapped page).
inline VF LoadPartial(const float* p, int64_t n) {
  alignas(64) float buf[kLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(float));
  return hn::Load(DF(), buf);
}
inline void StorePartial(VF v, float* p, int64_t n) {
  alignas(64) float buf[kLanes];
  hn::Store(v, DF(), buf);
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(float));
}

// Asks for the cache line at p in L2 (prefetcht1 on x86): for reads the prefetchers do not see
// coming, short rows of a long stride.
inline void PrefetchL2(const void* p) { __builtin_prefetch(p, 0, 2); }

inline float ReduceSum(VF v) { return hn::GetLane(hn::SumOfLanes(DF(), v)); }

// exp(x) per lane, for softmax weights: Cody-Waite reduction x = n ln2 + r (|r| <= ln2 / 2, ln2
// split in two so n ln2 is exact enough), a degree-6 Taylor polynomial for e^r (truncation below
// 2^-23 relative) and 2^n built in the exponent field; a few ulp in all. x below -87.3 (e^x under
// the normal floats), -inf and NaN give 0. x <= 88 (callers pass logit - max, at most a small
// slack above 0).
inline VF Exp(VF x) {
  const DF d;
  const hn::RebindToSigned<DF> di;
  const VF n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  VF r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  VF p = hn::Set(d, 1.0f / 720);
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 120));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 24));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f / 6));
  p = hn::MulAdd(p, r, hn::Set(d, 0.5f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  p = hn::MulAdd(p, r, hn::Set(d, 1.0f));
  const auto in_range = hn::Ge(x, hn::Set(d, -87.3365447504f));
  // n is in [-126, 128] wherever in_range holds: 2^n is a normal float with exponent n + 127.
  const VF n_safe = hn::IfThenElseZero(in_range, n);
  const VF scale =
      hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n_safe), hn::Set(di, 127))));
  return hn::IfThenElseZero(in_range, hn::Mul(p, scale));
}

// How the attention kernels turn scale * q.k into the softmax's logits, a compile-time policy of
// each kernel: as they are, or soft-capped (Gemma 2's attn_logit_softcapping) as cap * tanh(logit
// / cap), per logit before the max and exp. The uncapped instantiation is the kernel without it.
struct LogitsAsIs {
  static constexpr bool kCapped = false;
  VF operator()(VF logit) const { return logit; }
};
struct SoftCappedLogits {
  static constexpr bool kCapped = true;
  float cap;  // > 0
  // Highway's Tanh: at most 4 ulp over all floats.
  VF operator()(VF logit) const {
    const DF d;
    return hn::Mul(hn::Set(d, cap), hn::Tanh(d, hn::Mul(logit, hn::Set(d, 1.0f / cap))));
  }
};

}  // namespace manyshot::cpu_internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // MANYSHOT_ENGINE_CPU_SIMD_INL_H_

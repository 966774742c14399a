#include "engine/cpu/cpu_soft_cap.h"

// Compiled once per instruction set (hwy/foreach_target.h); the entry point dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/cpu_soft_cap.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// After foreach_target.h: included once per target.
#include "engine/cpu/simd-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
MANYSHOT_SIMD_BEGIN
namespace manyshot::cpu_internal::HWY_NAMESPACE {

void SoftCapScoresImpl(float* s, int64_t n, float cap) {
  const SoftCappedLogits capped{cap};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) hn::StoreU(capped(LoadF32(s + j)), DF(), s + j);
  if (j < n) StorePartial(capped(LoadPartial(s + j, n - j)), s + j, n - j);
}

}  // namespace manyshot::cpu_internal::HWY_NAMESPACE
MANYSHOT_SIMD_END
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace manyshot::cpu_internal {

HWY_EXPORT(SoftCapScoresImpl);

void SoftCapScores(float* s, int64_t n, float cap) {
  HWY_DYNAMIC_DISPATCH(SoftCapScoresImpl)(s, n, cap);
}

}  // namespace manyshot::cpu_internal
#endif  // HWY_ONCE

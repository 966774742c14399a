#include "engine/cpu/cpu_target.h"

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

// A probe compiled once per target like the kernels (same flags, so the same targets): it
// reports which of them HWY_DYNAMIC_DISPATCH picks.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/cpu_target.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace manyshot::HWY_NAMESPACE {
int64_t DispatchedTarget() { return HWY_TARGET; }
}  // namespace manyshot::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace manyshot {
namespace {

HWY_EXPORT(DispatchedTarget);

std::string LowerName(int64_t target) {
  std::string name = hwy::TargetName(target);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

// The targets compiled here (HWY_TARGETS) that the CPU executes, one bit each; a lower bit is a
// better target. Read once, before any choice narrows what SupportedTargets() returns.
int64_t RunnableMask() {
  static const int64_t mask = [] {
    hwy::SetSupportedTargetsForTest(0);
    return hwy::SupportedTargets() & HWY_TARGETS;
  }();
  return mask;
}

}  // namespace

std::vector<std::string> RunnableCpuTargets() {
  std::vector<std::string> names;
  for (int64_t mask = RunnableMask(); mask != 0; mask &= mask - 1) {
    names.push_back(LowerName(mask & -mask));
  }
  return names;
}

absl::Status SetCpuTarget(std::string_view name) {
  const int64_t runnable = RunnableMask();
  if (name == "best") {
    hwy::SetSupportedTargetsForTest(0);  // what the CPU supports
    return absl::OkStatus();
  }
  for (int64_t mask = runnable; mask != 0; mask &= mask - 1) {
    const int64_t target = mask & -mask;
    if (LowerName(target) == name) {
      // SupportedTargets() is then this target and the ones below it; dispatch takes the best.
      hwy::SetSupportedTargetsForTest(runnable & ~(target - 1));
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("CPU target \"", std::string(name),
                                                 "\" is not one this CPU runs; choose best, ",
                                                 absl::StrJoin(RunnableCpuTargets(), ", ")));
}

absl::Status ApplyCpuTargetFromEnvironment() {
  static const absl::Status applied = [] {
    const char* value = std::getenv(kCpuTargetVariable);
    if (value == nullptr || *value == '\0') return absl::OkStatus();
    absl::Status s = SetCpuTarget(value);
    if (s.ok()) return s;
    // Said once, where an operator sees it; the kernels then run the best target.
    std::fprintf(stderr, "manyshot: %s=%s ignored: %s\n", kCpuTargetVariable, value,
                 std::string(s.message()).c_str());
    return absl::InvalidArgumentError(absl::StrCat(kCpuTargetVariable, ": ", s.message()));
  }();
  return applied;
}

std::string CpuTargetName() {
  ApplyCpuTargetFromEnvironment().IgnoreError();
  return LowerName(HWY_DYNAMIC_DISPATCH(DispatchedTarget)());
}

}  // namespace manyshot
#endif  // HWY_ONCE

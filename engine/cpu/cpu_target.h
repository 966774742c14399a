// Which instruction set the CPU kernels run on. One binary carries the kernels compiled for
// several (Google Highway's dynamic dispatch: AVX-512, AVX2 + FMA, SSE4 and scalar code on x86;
// NEON on ARM) and runs the best that the CPU executes, unless MANYSHOT_CPU_TARGET names another
// ("avx2", "sse4", ...; "best"). Names are Highway's, in lower case: "avx3" is AVX-512 (F, BW, DQ,
// VL), "avx2" AVX2 with FMA and F16C.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace manyshot {

// The environment variable that forces a target, for tests and benchmarks.
inline constexpr char kCpuTargetVariable[] = "MANYSHOT_CPU_TARGET";

// The target the kernels dispatch to now (applies MANYSHOT_CPU_TARGET first, once per process).
std::string CpuTargetName();

// Every target this binary carries that this CPU executes, best first (on x86 the last is
// "scalar"; on ARM, NEON is the baseline and the only one).
std::vector<std::string> RunnableCpuTargets();

// Makes the kernels run `name` ("best": the best this CPU executes). InvalidArgument, listing the
// runnable targets, for a name that is not one of them. Affects every thread: call it while no
// kernel runs (at start-up, or between a test's calls).
absl::Status SetCpuTarget(std::string_view name);

// Applies MANYSHOT_CPU_TARGET (when set) the first time it is called; later calls return the first
// call's result. CpuTargetName and the CPU backend's constructor call it.
absl::Status ApplyCpuTargetFromEnvironment();

}  // namespace manyshot

// The run-time choice of the CPU kernels' instruction set (cpu_target.h): what this machine can
// run, forcing each of those, refusing names it cannot run, and MANYSHOT_CPU_TARGET (tests/
// CMakeLists.txt runs TheEnvironmentVariableChoosesTheTarget again with the variable set).
#include "engine/cpu/cpu_target.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot {
namespace {

using ::testing::HasSubstr;

class CpuTargetChoiceTest : public ::testing::Test {
 protected:
  void SetUp() override { ApplyCpuTargetFromEnvironment().IgnoreError(); }
  void TearDown() override { ASSERT_TRUE(SetCpuTarget("best").ok()); }
};

bool Runs(const std::string& name) {
  const auto names = RunnableCpuTargets();
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST_F(CpuTargetChoiceTest, TheBinaryCarriesTheTargetsThisCpuRuns) {
  const auto names = RunnableCpuTargets();
  ASSERT_FALSE(names.empty());
#if defined(__x86_64__)
  EXPECT_EQ(names.back(), "scalar");
  __builtin_cpu_init();
  EXPECT_TRUE(Runs("sse4"));
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_TRUE(Runs("avx2"));
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl")) {
    EXPECT_EQ(names.front(), "avx3");
  }
#elif defined(__aarch64__)
  // NEON is ARMv8's baseline: Highway compiles no scalar fallback below it.
  EXPECT_EQ(names.front(), "neon");
#endif
}

TEST_F(CpuTargetChoiceTest, EachRunnableTargetCanBeForcedAndBestRestoresTheFirst) {
  for (const std::string& name : RunnableCpuTargets()) {
    ASSERT_TRUE(SetCpuTarget(name).ok()) << name;
    EXPECT_EQ(CpuTargetName(), name);
  }
  ASSERT_TRUE(SetCpuTarget("best").ok());
  EXPECT_EQ(CpuTargetName(), RunnableCpuTargets().front());
}

TEST_F(CpuTargetChoiceTest, AnUnknownTargetIsInvalidArgumentListingTheChoices) {
  const std::string before = CpuTargetName();
  const absl::Status s = SetCpuTarget("avx512");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("\"avx512\""));
  EXPECT_THAT(std::string(s.message()), HasSubstr("best, " + RunnableCpuTargets().front()));
  EXPECT_EQ(CpuTargetName(), before);
}

TEST_F(CpuTargetChoiceTest, TheBackendDescriptionNamesTheTarget) {
  const std::string last = RunnableCpuTargets().back();  // not the default where there are two
  ASSERT_TRUE(SetCpuTarget(last).ok());
  CpuBackend backend(1);
  EXPECT_THAT(backend.description(), HasSubstr("kernels " + last + ","));
}

// Unset: the best target. A runnable name: that target. Anything else: InvalidArgument naming
// the variable, and the best target.
TEST_F(CpuTargetChoiceTest, TheEnvironmentVariableChoosesTheTarget) {
  const char* value = std::getenv(kCpuTargetVariable);
  const std::string wanted = value == nullptr ? "" : value;
  const absl::Status s = ApplyCpuTargetFromEnvironment();
  if (wanted.empty() || wanted == "best" || Runs(wanted)) {
    EXPECT_TRUE(s.ok()) << s;
    EXPECT_EQ(CpuTargetName(), Runs(wanted) ? wanted : RunnableCpuTargets().front());
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr(kCpuTargetVariable));
    EXPECT_EQ(CpuTargetName(), RunnableCpuTargets().front());
  }
}

}  // namespace
}  // namespace manyshot

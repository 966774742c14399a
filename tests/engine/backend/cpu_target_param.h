// A fixture for the CPU kernel tests: each test runs once per kernel target this machine executes
// (cpu_target.h), so the AVX2 and SSE4 code is checked on an AVX-512 machine too, and the scalar
// fallback on every x86 machine.
#pragma once

#include <string>

#include "engine/cpu/cpu_target.h"
#include "gtest/gtest.h"

namespace manyshot::testing {

class CpuTargetTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // MANYSHOT_CPU_TARGET (if set) is applied once, now, so that it cannot undo the choice below.
    ApplyCpuTargetFromEnvironment().IgnoreError();
    ASSERT_TRUE(SetCpuTarget(GetParam()).ok());
    ASSERT_EQ(CpuTargetName(), GetParam());
  }
  void TearDown() override { ASSERT_TRUE(SetCpuTarget("best").ok()); }
};

inline std::string CpuTargetParamName(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace manyshot::testing

// Instantiates the TEST_P tests of `fixture` (derived from CpuTargetTest) for every target.
#define MANYSHOT_FOR_EVERY_CPU_TARGET(fixture)                                    \
  INSTANTIATE_TEST_SUITE_P(EveryCpuTarget, fixture,                               \
                           ::testing::ValuesIn(::manyshot::RunnableCpuTargets()), \
                           ::manyshot::testing::CpuTargetParamName)

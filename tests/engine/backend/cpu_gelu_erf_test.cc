// The CPU's erf GELU (GPT-NeoX's "gelu"), whose erf is a vectorisable approximation
// (vector_math.h), against the double formula 0.5 x (1 + erf(x / sqrt(2))) from libm.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace manyshot {
namespace {

TEST(CpuGeluErfTest, MatchesTheErfFormula) {
  CpuBackend backend(2);
  std::vector<float> x;
  for (int i = -4000; i <= 4000; ++i) x.push_back(static_cast<float>(i) * 0.0025f);  // [-10, 10]
  x.push_back(40.0f);
  x.push_back(-40.0f);
  auto t = backend.Allocate(DType::kF32, {static_cast<int64_t>(x.size())});
  ASSERT_TRUE(t.ok());
  backend.CopyFromHost(x.data(), *t);
  backend.GeluErf(*t);
  std::vector<float> y(x.size());
  ASSERT_TRUE(backend.CopyToHost(*t, y.data()).ok());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], want = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    // erf's 1.5e-7 times |x| / 2, plus float rounding of the result.
    const double tolerance = 2e-7 * std::max(1.0, std::abs(v)) + 1.2e-7 * std::abs(want);
    EXPECT_NEAR(y[i], want, tolerance) << "x = " << v;
  }
  EXPECT_EQ(y[y.size() - 2], 40.0f);
  EXPECT_EQ(y.back(), 0.0f);
}

}  // namespace
}  // namespace manyshot

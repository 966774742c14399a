#include "bench/percentile.h"

#include <vector>

#include "gtest/gtest.h"

namespace manyshot::bench {
namespace {

TEST(PercentileTest, MedianOfAnEvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({10, 20}, 0.5), 15);
}

TEST(PercentileTest, MedianOfAnOddCountIsTheMiddleValue) {
  EXPECT_DOUBLE_EQ(Percentile({5, 1, 3}, 0.5), 3);
  EXPECT_DOUBLE_EQ(Percentile({7}, 0.5), 7);
}

TEST(PercentileTest, InterpolatesLinearlyBetweenRanks) {
  // Ranks 0..4 over the sorted values 0, 10, 20, 30, 40; p99 sits at rank 3.96.
  const std::vector<double> v = {40, 0, 30, 10, 20};
  EXPECT_DOUBLE_EQ(Percentile(v, 0.0), 0);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.25), 10);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.3), 12);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.99), 39.6);
  EXPECT_DOUBLE_EQ(Percentile(v, 1.0), 40);
}

TEST(PercentileTest, EmptyIsZero) { EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0); }

}  // namespace
}  // namespace manyshot::bench

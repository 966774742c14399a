// The compute thread pool: every index is run exactly once per call, whether the workers are
// still spinning from the previous call or have gone to sleep, and nested calls run serially.
#include "engine/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace manyshot {
namespace {

// Runs ParallelFor, ParallelForEach and ParallelForGuided over n indices and checks each index
// was visited once by each.
void ExpectEveryIndexOnce(ThreadPool& pool, int64_t n) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  pool.ParallelForGuided(n, 1 + n % 5, [&](int64_t begin, int64_t end) {
    ASSERT_LT(begin, end);
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  pool.ParallelForEach(n, [&](int64_t i, int thread) {
    ASSERT_GE(thread, 0);
    ASSERT_LT(thread, pool.size());
    hits[i].fetch_add(1);
  });
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 3) << "index " << i << " of " << n;
}

TEST(ThreadPoolTest, BackToBackCallsWhileTheWorkersSpin) {
  ThreadPool pool(4);
  for (int call = 0; call < 2000; ++call) ExpectEveryIndexOnce(pool, 1 + call % 37);
}

TEST(ThreadPoolTest, CallsAfterTheWorkersWentToSleep) {
  ThreadPool pool(3);
  for (int call = 0; call < 5; ++call) {
    // Longer than the spin budget (200 us), so the workers wait on the condition variable.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ExpectEveryIndexOnce(pool, 100);
  }
}

TEST(ThreadPoolTest, NestedCallsRunSeriallyInsideTheOuterOne) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.ParallelForEach(8, [&](int64_t, int) {
    pool.ParallelFor(10, [&](int64_t begin, int64_t end) { total.fetch_add(end - begin); });
  });
  EXPECT_EQ(total.load(), 80);
}

TEST(ThreadPoolTest, GuidedRangesShrinkAndRespectTheMinimum) {
  ThreadPool pool(2);
  std::mutex mutex;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  pool.ParallelForGuided(1000, 30, [&](int64_t begin, int64_t end) {
    std::lock_guard<std::mutex> lock(mutex);
    ranges.push_back({begin, end});
  });
  std::sort(ranges.begin(), ranges.end());
  ASSERT_FALSE(ranges.empty());
  EXPECT_EQ(ranges.front().first, 0);
  EXPECT_EQ(ranges.back().second, 1000);
  for (size_t i = 0; i < ranges.size(); ++i) {
    const int64_t length = ranges[i].second - ranges[i].first;
    // A quarter of what was left (2 threads), at least 30, except for the last range.
    EXPECT_EQ(length, std::min<int64_t>(1000 - ranges[i].first,
                                        std::max<int64_t>(30, (1000 - ranges[i].first) / 4)))
        << "range " << i;
    if (i > 0) {
      EXPECT_EQ(ranges[i].first, ranges[i - 1].second);
    }
  }
}

TEST(ThreadPoolTest, OneThreadRunsEverythingOnTheCaller) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.size(), 1);
  ExpectEveryIndexOnce(pool, 17);
}

}  // namespace
}  // namespace manyshot

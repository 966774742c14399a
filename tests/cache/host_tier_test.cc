// The pinned host tier between the memory tier and RocksDB: a context evicted from memory is kept
// in host memory and comes back bit-exact without a RocksDB read; its own LRU budget; deletes
// reach it. Runs on the CPU backend, on the CUDA backend's code over the SIMT emulator
// ("simt-cuda": device memory <-> pinned host buffers, as on a GPU) and on a GPU ("cuda").
#include "cache/host_tier.h"

#include <string>

#include "cache/context_cache.h"
#include "cache/memory_tier.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

constexpr int64_t kLayers = 2, kTokens = 100, kHeads = 2, kDim = 16;

class HostTierTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string why = BackendUnavailable(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
  }
  Backend& backend() { return *NamedTestBackend(GetParam(), nullptr); }
  EncodedContext Synthetic(uint64_t seed) {
    return SyntheticContext(backend(), seed, kLayers, kTokens, kHeads, kDim);
  }
};

TEST_P(HostTierTest, KeepsCopiesUnderItsBudgetLeastRecentlyUsedFirst) {
  const EncodedContext a = Synthetic(1), b = Synthetic(2), c = Synthetic(3);
  const size_t one = ContextTensorBytes(a);
  HostTier tier(2 * one, backend());
  ASSERT_TRUE(tier.Put("a", a).ok());
  ASSERT_TRUE(tier.Put("b", b).ok());
  ASSERT_TRUE(tier.Restore("a").value().has_value());  // a is now the most recent
  ASSERT_TRUE(tier.Put("c", c).ok());                  // evicts b
  EXPECT_FALSE(tier.Restore("b").value().has_value());
  auto restored = tier.Restore("c");
  ASSERT_TRUE(restored.ok() && restored->has_value());
  EXPECT_EQ(CompareContexts(**restored, c, backend()), "");
  const HostTier::Stats s = tier.stats();
  EXPECT_EQ(s.bytes, 2 * one);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  HostTier small(one - 1, backend());  // a context larger than the budget is not kept
  ASSERT_TRUE(small.Put("a", a).ok());
  EXPECT_EQ(small.stats().rejected, 1u);
  EXPECT_FALSE(small.Restore("a").value().has_value());
  tier.Erase("c");
  EXPECT_FALSE(tier.Restore("c").value().has_value());
  EXPECT_EQ(tier.stats().bytes, one);
}

TEST_P(HostTierTest, AContextEvictedFromMemoryComesBackFromHostNotFromDisk) {
  const auto dir = FreshTempDir("host-tier");
  ContextCacheOptions options;
  const size_t one = ContextTensorBytes(Synthetic(1));
  options.memory_budget_bytes = one + one / 2;  // one context at a time
  options.host_budget_bytes = 4 * one;
  auto cache = ContextCache::Open(dir, options, backend());
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (uint64_t seed : {1, 2}) {
    auto created = (*cache)->CreateTask(
        {"t" + std::to_string(seed), "tenant", "spec", "hash", "key" + std::to_string(seed), 1},
        [this, seed]() -> absl::StatusOr<EncodedContext> { return Synthetic(seed); });
    ASSERT_TRUE(created.ok()) << created.status();
  }  // creating key2 evicted key1 from memory into the host tier
  CacheStats before = (*cache)->Stats();
  EXPECT_EQ(before.memory_evictions, 1u);
  EXPECT_EQ(before.host_entries, 1u);
  auto again = (*cache)->Acquire("key1", nullptr);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CompareContexts(**again, Synthetic(1), backend()), "");
  CacheStats after = (*cache)->Stats();
  EXPECT_EQ(after.host_hits, 1u);
  EXPECT_EQ(after.loads, before.loads);  // no RocksDB read
  EXPECT_EQ(after.encodes, before.encodes);
  again->Release();
  // Deleting the task drops its host copy too.
  ASSERT_TRUE((*cache)->DeleteTask("t2").ok());
  ASSERT_TRUE((*cache)->DeleteTask("t1").ok());
  EXPECT_EQ((*cache)->Stats().host_entries, 0u);
  cache->reset();
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Backends, HostTierTest, ::testing::Values("cpu", "simt-cuda"),
                         BackendTestName);
// On a GPU (ctest label gpu; SKIPPED where none can be used): copies from device memory.
INSTANTIATE_TEST_SUITE_P(Cuda, HostTierTest, ::testing::Values("cuda"), BackendTestName);

}  // namespace
}  // namespace manyshot::testing

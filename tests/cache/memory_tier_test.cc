// The memory tier: LRU order, pinning, the byte budget exact to the byte.
#include "cache/memory_tier.h"

#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

using Keys = std::vector<std::string>;

// A context of exactly 2 * tokens * 2 * 16 * 4 = 256 * tokens bytes (one layer, f32).
std::shared_ptr<const EncodedContext> Ctx(int64_t tokens, uint64_t seed = 1) {
  return std::make_shared<const EncodedContext>(
      SyntheticContext(TestBackend(), seed, 1, tokens, 2, 16));
}

TEST(MemoryTierTest, AccountsExactBytes) {
  auto ctx = Ctx(10);
  EXPECT_EQ(ContextTensorBytes(*ctx), 2560u);
  EXPECT_EQ(ContextTensorBytes(*ctx), ctx->bytes());
  // bf16 halves it.
  EXPECT_EQ(ContextTensorBytes(SyntheticContext(TestBackend(), 1, 1, 10, 2, 16, DType::kBF16)),
            1280u);
  MemoryTier tier(10000);
  tier.Insert("a", Ctx(10));
  tier.Insert("b", Ctx(3));
  EXPECT_EQ(tier.bytes(), 2560u + 768u);
  tier.Erase("a");
  EXPECT_EQ(tier.bytes(), 768u);
  tier.Erase("b");
  EXPECT_EQ(tier.bytes(), 0u);
  EXPECT_EQ(tier.stats().entries, 0u);
}

TEST(MemoryTierTest, EvictsLeastRecentlyUsedFirst) {
  MemoryTier tier(256 * 30);  // room for exactly three 10-token contexts
  tier.Insert("a", Ctx(10));
  tier.Insert("b", Ctx(10));
  tier.Insert("c", Ctx(10));
  EXPECT_EQ(tier.bytes(), 256u * 30);
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"a", "b", "c"}));
  ASSERT_TRUE(tier.Lookup("a").has_value());  // a becomes most recent
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"b", "c", "a"}));
  tier.Insert("d", Ctx(10));  // evicts b
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"c", "a", "d"}));
  tier.Insert("e", Ctx(20));  // needs two slots: evicts c then a
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"d", "e"}));
  EXPECT_EQ(tier.bytes(), 256u * 30);
  auto s = tier.stats();
  EXPECT_EQ(s.evictions, 3u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_FALSE(tier.Lookup("b").has_value());
  EXPECT_EQ(tier.stats().misses, 1u);
}

TEST(MemoryTierTest, PinnedEntriesAreNeverEvicted) {
  MemoryTier tier(256 * 20);
  PinnedContext a = tier.Insert("a", Ctx(10, 7));
  tier.Insert("b", Ctx(10));
  EXPECT_EQ(tier.stats().pinned_entries, 1u);
  // a is least recently used but pinned: b goes.
  tier.Insert("c", Ctx(10));
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"a", "c"}));
  // Nothing unpinned can make room for 20 tokens while a is pinned: not admitted, nothing evicted.
  {
    PinnedContext c = *tier.Lookup("c");
    PinnedContext big = tier.Insert("big", Ctx(20));
    EXPECT_TRUE(big);
    EXPECT_FALSE(big.cached());
    EXPECT_EQ(big->tokens, 20);
    EXPECT_EQ(tier.KeysByRecency(), (Keys{"a", "c"}));
    EXPECT_EQ(tier.stats().rejected, 1u);
  }
  // The pinned context's memory stays valid and unchanged.
  EXPECT_EQ(CompareContexts(*a, *Ctx(10, 7), TestBackend()), "");
  a.Release();
  tier.Insert("big", Ctx(20));  // now both a and c are evictable
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"big"}));
  EXPECT_EQ(tier.bytes(), 256u * 20);
}

TEST(MemoryTierTest, ErasedWhilePinnedStaysCountedUntilReleased) {
  MemoryTier tier(256 * 20);
  PinnedContext a = tier.Insert("a", Ctx(10));
  PinnedContext a2 = *tier.Lookup("a");
  tier.Erase("a");
  EXPECT_FALSE(tier.Contains("a"));
  EXPECT_EQ(tier.bytes(), 2560u);  // still in use by the batches holding it
  a.Release();
  EXPECT_EQ(tier.bytes(), 2560u);
  a2.Release();
  EXPECT_EQ(tier.bytes(), 0u);
}

TEST(MemoryTierTest, InsertingAResidentKeyReturnsTheResidentEntry) {
  MemoryTier tier(256 * 20);
  auto first = Ctx(10, 1);
  tier.Insert("a", first);
  PinnedContext again = tier.Insert("a", Ctx(10, 2));
  EXPECT_EQ(again.get(), first.get());
  EXPECT_EQ(tier.bytes(), 2560u);
}

TEST(MemoryTierTest, MovedHandlesUnpinOnce) {
  MemoryTier tier(256 * 10);
  PinnedContext a = tier.Insert("a", Ctx(10));
  PinnedContext b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(tier.stats().pinned_entries, 1u);
  b = PinnedContext();
  EXPECT_EQ(tier.stats().pinned_entries, 0u);
}

TEST(MemoryTierTest, ReservationsShareTheBudgetAndEvictUnpinnedContexts) {
  std::vector<std::string> sunk;
  MemoryTier tier(256 * 30, [&](const std::string& key, std::shared_ptr<const EncodedContext>) {
    sunk.push_back(key);
  });
  tier.Insert("a", Ctx(10));
  PinnedContext b = tier.Insert("b", Ctx(10));
  tier.Insert("c", Ctx(10));
  // 2560 more bytes than are free: the least recently used unpinned context (a) goes, to the
  // eviction sink like any eviction.
  std::optional<MemoryReservation> held = tier.Reserve(1000);
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->bytes(), 1000u);
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"b", "c"}));
  EXPECT_EQ(sunk, Keys{"a"});
  MemoryTier::Stats s = tier.stats();
  EXPECT_EQ(s.bytes, 2u * 2560 + 1000);
  EXPECT_EQ(s.reserved_bytes, 1000u);
  EXPECT_EQ(s.evictions, 1u);
  // With b pinned, at most c's 2560 bytes can be freed, leaving room for 4120: 4121 more cannot
  // fit, and nothing is evicted trying.
  EXPECT_FALSE(tier.Reserve(4121).has_value());
  EXPECT_EQ(tier.KeysByRecency(), (Keys{"b", "c"}));
  EXPECT_EQ(tier.stats().rejected, 1u);
  EXPECT_FALSE(tier.Reserve(256 * 30 + 1).has_value());  // more than the whole budget
  // A context that would not fit beside the reservation is refused, not admitted over budget.
  tier.Erase("c");
  EXPECT_FALSE(tier.Insert("d", Ctx(20)).cached());
  EXPECT_EQ(tier.bytes(), 2560u + 1000);
  // Released on destruction (or Release), once, also after a move.
  MemoryReservation moved = *std::move(held);
  held.reset();
  EXPECT_EQ(tier.stats().reserved_bytes, 1000u);
  moved.Release();
  moved.Release();
  EXPECT_EQ(tier.stats().reserved_bytes, 0u);
  EXPECT_EQ(tier.bytes(), 2560u);
  EXPECT_TRUE(tier.Insert("d", Ctx(20)).cached());
}

}  // namespace
}  // namespace manyshot::testing

// Group layouts token by token for each alignment (docs/structured_prompting.md, "Groups").
#include "engine/prompting/groups.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
constexpr int32_t X = kMaskedSlot;
constexpr int32_t S = 220;  // space token

GroupOptions Options(int64_t L, Alignment a) {
  GroupOptions o;
  o.group_length = L;
  o.alignment = a;
  o.space_id = S;
  return o;
}

TEST(GroupsTest, TruncateCutsTheOldestDemonstrationAndPadsOnlyTheLastGroup) {
  // L = 6: 5 slots per group.
  std::vector<std::vector<int32_t>> demos = {{1, 2}, {3, 4}, {5, 6, 7}, {8}, {9, 10}};
  auto layout = BuildGroups(demos, Options(6, Alignment::kTruncate));
  ASSERT_TRUE(layout.ok()) << layout.status();
  // {1,2}+{3,4}+{5,6,7} = 7 > 5: cut from the left -> [3,4,5,6,7]; then {8}+{9,10} left over.
  ASSERT_EQ(layout->groups(), 2);
  EXPECT_THAT(layout->slots[0], ElementsAre(3, 4, 5, 6, 7));
  EXPECT_THAT(layout->slots[1], ElementsAre(X, X, 8, 9, 10));
  EXPECT_THAT(layout->demonstrations_per_group, ElementsAre(2, 2));
  EXPECT_EQ(layout->context_tokens, 8);
}

TEST(GroupsTest, TruncateClosesAnExactlyFullGroupWithoutCutting) {
  std::vector<std::vector<int32_t>> demos = {{1, 2}, {3, 4, 5}, {6, 7, 8, 9, 10}};
  auto layout = BuildGroups(demos, Options(6, Alignment::kTruncate));
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->groups(), 2);
  EXPECT_THAT(layout->slots[0], ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(layout->slots[1], ElementsAre(6, 7, 8, 9, 10));
  EXPECT_THAT(layout->demonstrations_per_group, ElementsAre(2, 1));
  EXPECT_EQ(layout->context_tokens, 10);
}

TEST(GroupsTest, AttentionMaskKeepsWholeDemonstrationsAndMasksPads) {
  std::vector<std::vector<int32_t>> demos = {{1, 2}, {3, 4}, {5, 6, 7}, {8}, {9, 10}};
  auto layout = BuildGroups(demos, Options(6, Alignment::kAttentionMask));
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->groups(), 3);
  EXPECT_THAT(layout->slots[0], ElementsAre(X, 1, 2, 3, 4));
  EXPECT_THAT(layout->slots[1], ElementsAre(X, 5, 6, 7, 8));
  EXPECT_THAT(layout->slots[2], ElementsAre(X, X, X, 9, 10));
  EXPECT_THAT(layout->demonstrations_per_group, ElementsAre(2, 2, 1));
  EXPECT_EQ(layout->context_tokens, 10);
}

TEST(GroupsTest, PadSpaceFillsWithTheSpaceToken) {
  std::vector<std::vector<int32_t>> demos = {{1, 2}, {3, 4}, {5, 6, 7}, {8}, {9, 10}};
  auto layout = BuildGroups(demos, Options(6, Alignment::kPadSpace));
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->groups(), 3);
  EXPECT_THAT(layout->slots[0], ElementsAre(S, 1, 2, 3, 4));
  EXPECT_THAT(layout->slots[1], ElementsAre(S, 5, 6, 7, 8));
  EXPECT_THAT(layout->slots[2], ElementsAre(S, S, S, 9, 10));
  EXPECT_EQ(layout->context_tokens, 15);  // pads are attended tokens
}

TEST(GroupsTest, OneDemonstrationMakesOnePaddedGroupUnderEveryAlignment) {
  for (Alignment a : {Alignment::kTruncate, Alignment::kAttentionMask, Alignment::kPadSpace}) {
    auto layout = BuildGroups({{7, 8}}, Options(5, a));
    ASSERT_TRUE(layout.ok());
    ASSERT_EQ(layout->groups(), 1);
    int32_t pad = a == Alignment::kPadSpace ? S : X;
    EXPECT_THAT(layout->slots[0], ElementsAre(pad, pad, 7, 8));
    EXPECT_THAT(layout->demonstrations_per_group, ElementsAre(1));
  }
}

TEST(GroupsTest, ExactlyFullGroupsNeedNoPadding) {
  std::vector<std::vector<int32_t>> demos = {{1, 2}, {3, 4}, {5, 6}, {7, 8}};
  for (Alignment a : {Alignment::kTruncate, Alignment::kAttentionMask, Alignment::kPadSpace}) {
    auto layout = BuildGroups(demos, Options(5, a));
    ASSERT_TRUE(layout.ok());
    ASSERT_EQ(layout->groups(), 2);
    EXPECT_THAT(layout->slots[0], ElementsAre(1, 2, 3, 4));
    EXPECT_THAT(layout->slots[1], ElementsAre(5, 6, 7, 8));
  }
}

TEST(GroupsTest, LongDemonstrationIsRejectedNamingItOrTruncatedKeepingItsEnd) {
  std::vector<std::vector<int32_t>> demos = {{1}, {2, 3, 4, 5, 6, 7}};
  auto rejected = BuildGroups(demos, Options(5, Alignment::kAttentionMask));
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(rejected.status().message(), HasSubstr("demonstration 1 has 6 tokens"));
  GroupOptions o = Options(5, Alignment::kAttentionMask);
  o.long_demonstrations = LongDemonstrationPolicy::kTruncate;
  auto truncated = BuildGroups(demos, o);
  ASSERT_TRUE(truncated.ok());
  EXPECT_EQ(truncated->truncated_demonstrations, 1);
  ASSERT_EQ(truncated->groups(), 2);
  EXPECT_THAT(truncated->slots[0], ElementsAre(X, X, X, 1));
  EXPECT_THAT(truncated->slots[1], ElementsAre(4, 5, 6, 7));
}

TEST(GroupsTest, InvalidInputsAreClearErrors) {
  EXPECT_EQ(BuildGroups({}, Options(5, Alignment::kTruncate)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildGroups({{1}}, Options(1, Alignment::kTruncate)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto empty = BuildGroups({{1}, {}}, Options(5, Alignment::kTruncate));
  EXPECT_THAT(empty.status().message(), HasSubstr("demonstration 1 renders to no tokens"));
  GroupOptions no_space = Options(5, Alignment::kPadSpace);
  no_space.space_id = -1;
  EXPECT_EQ(BuildGroups({{1}}, no_space).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GroupsTest, ShuffleIsTheSpecifiedSplitMixFisherYates) {
  EXPECT_THAT(ShuffledOrder(5, 0), ElementsAre(0, 1, 2, 3, 4));
  // Independent computation of the first swap: SplitMix64(1).next() mod 5.
  uint64_t z = 1 + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  std::vector<int64_t> order = ShuffledOrder(5, 1);
  std::vector<int64_t> expected = {0, 1, 2, 3, 4};
  std::swap(expected[4], expected[z % 5]);
  EXPECT_EQ(order[4], expected[4]);
  std::vector<int64_t> sorted = order;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_THAT(sorted, ElementsAre(0, 1, 2, 3, 4));
  EXPECT_NE(ShuffledOrder(50, 1), ShuffledOrder(50, 2));
  EXPECT_EQ(ShuffledOrder(50, 3), ShuffledOrder(50, 3));
}

TEST(GroupsTest, ConventionalWindowTakesWholeDemonstrationsUntilOneDoesNotFit) {
  std::vector<std::vector<int32_t>> demos = {{1, 2}, {3}, {4, 5, 6}, {7}};
  ConventionalWindow w = BuildConventionalWindow(demos, 6, 0);
  EXPECT_THAT(w.tokens, ElementsAre(1, 2, 3));
  EXPECT_EQ(w.demonstrations, 2);
}

}  // namespace
}  // namespace manyshot

// Properties of the T5 prompt modes (engine/t5/prompt_modes.h) on the tiny T5 models of both
// configs: permutation invariance of SAICL, FiD and ENSEMBLE (and CONVENTIONAL's lack of it, so the
// check can fail), the block-attention path against T5's own encoder, FiD with k = 1 against
// CONVENTIONAL, segment lengths and truncation, and the errors for bad arguments.
#include <algorithm>
#include <numeric>

#include "engine/t5/block_attention.h"
#include "engine/t5/prompt_modes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/t5/t5_test_support.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

// Demonstrations of several lengths and a test input, ids in [2, 500) (both models have 512).
std::vector<std::vector<int32_t>> Demonstrations(int64_t k, uint32_t seed) {
  std::vector<std::vector<int32_t>> demos;
  uint32_t state = seed;
  for (int64_t i = 0; i < k; ++i) {
    std::vector<int32_t> d(static_cast<size_t>(3 + (i * 5) % 9));
    for (int32_t& t : d) {
      state = state * 1664525u + 1013904223u;
      t = static_cast<int32_t>(2 + (state >> 8) % 498);
    }
    demos.push_back(std::move(d));
  }
  return demos;
}

const std::vector<int32_t> kTest = {17, 250, 31, 402, 77, 5, 1};
const std::vector<std::vector<int32_t>> kCandidates = {{1}, {44, 1}, {300, 12, 9, 1}};

std::vector<T5CandidateScore> Score(const T5Model& model,
                                    const std::vector<std::vector<int32_t>>& demos,
                                    const T5ModeOptions& options, int64_t segment_length = 10) {
  T5SegmentOptions segments;
  segments.segment_length = segment_length;
  auto set = PrepareT5Demonstrations(model, demos, segments);
  EXPECT_TRUE(set.ok()) << set.status();
  if (!set.ok()) return {};
  auto encoding = EncodeT5Prompts(model, *set, options, kTest);
  EXPECT_TRUE(encoding.ok()) << encoding.status();
  if (!encoding.ok()) return {};
  auto scores = ScoreT5Prompts(model, *encoding, kCandidates);
  EXPECT_TRUE(scores.ok()) << scores.status();
  return scores.ok() ? *scores : std::vector<T5CandidateScore>{};
}

double LargestDifference(const std::vector<T5CandidateScore>& a,
                         const std::vector<T5CandidateScore>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i].sum_logprob - b[i].sum_logprob));
    worst = std::max(worst, std::abs(a[i].mean_logprob - b[i].mean_logprob));
  }
  return worst;
}

T5ModeOptions Mode(T5PromptMode mode, int64_t groups = 0,
                   T5PromptAttention attention = T5PromptAttention::kSaicl) {
  T5ModeOptions options;
  options.mode = mode;
  options.groups = groups;
  options.group_attention = attention;
  return options;
}

class PromptModesTest : public ::testing::TestWithParam<std::string> {
 protected:
  const T5Model& model() const { return T5GoldenModel(GetParam()); }
};

// Shuffled demonstrations (two permutations of 8): SAICL, FiD and ENSEMBLE scores move by at most
// float rounding; CONVENTIONAL (one concatenated input, full attention) moves by far more.
TEST_P(PromptModesTest, PermutationInvariance) {
  const auto demos = Demonstrations(8, 7);
  std::vector<std::vector<int32_t>> reversed(demos.rbegin(), demos.rend());
  std::vector<std::vector<int32_t>> rotated = demos;
  std::rotate(rotated.begin(), rotated.begin() + 3, rotated.end());
  for (T5PromptMode mode : {T5PromptMode::kSaicl, T5PromptMode::kFid, T5PromptMode::kEnsemble}) {
    const auto base = Score(model(), demos, Mode(mode));
    EXPECT_LE(LargestDifference(base, Score(model(), reversed, Mode(mode))), 1e-5)
        << T5PromptModeName(mode);
    EXPECT_LE(LargestDifference(base, Score(model(), rotated, Mode(mode))), 1e-5)
        << T5PromptModeName(mode);
  }
  const auto conventional = Score(model(), demos, Mode(T5PromptMode::kConventional));
  EXPECT_GT(
      LargestDifference(conventional, Score(model(), reversed, Mode(T5PromptMode::kConventional))),
      1e-3);
}

// CONVENTIONAL goes through the block attention (four blocks, biases offset across segments) and
// the cached first-layer q|k|v; T5's own encoder over the concatenation must give the same states.
TEST_P(PromptModesTest, ConventionalEqualsPlainEncoder) {
  const auto demos = Demonstrations(5, 3);
  T5SegmentOptions segments;
  segments.segment_length = 6;  // some demonstrations are truncated to their last 6 tokens
  auto set = PrepareT5Demonstrations(model(), demos, segments);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_GT(set->truncated_demonstrations, 0);
  auto encoding = EncodeT5Prompts(model(), *set, Mode(T5PromptMode::kConventional), kTest);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  std::vector<int32_t> concatenated;
  for (const auto& s : set->segments) concatenated.insert(concatenated.end(), s.begin(), s.end());
  const std::vector<int32_t> test_segment(kTest.end() - 6, kTest.end());
  concatenated.insert(concatenated.end(), test_segment.begin(), test_segment.end());
  EXPECT_TRUE(encoding->test_truncated);
  auto plain = model().Encode({concatenated});
  ASSERT_TRUE(plain.ok()) << plain.status();
  auto a = model().StatesToHost(encoding->prompts, 0);
  auto b = model().StatesToHost(*plain, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  double worst = 0;
  for (size_t i = 0; i < a->size(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs((*a)[i] - (*b)[i])));
  }
  EXPECT_LE(worst, 1e-5);
}

// FiD, ENSEMBLE and CONVENTIONAL with one demonstration are the same prompt and the same scores.
TEST_P(PromptModesTest, OneDemonstrationFidEqualsConventional) {
  const auto demos = Demonstrations(1, 5);
  const auto conventional = Score(model(), demos, Mode(T5PromptMode::kConventional));
  EXPECT_LE(LargestDifference(conventional, Score(model(), demos, Mode(T5PromptMode::kFid))), 1e-5);
  EXPECT_LE(LargestDifference(conventional, Score(model(), demos, Mode(T5PromptMode::kEnsemble))),
            1e-5);
  // GROUP_FID with one group of full attention is CONVENTIONAL; with SAICL groups it is SAICL.
  const auto many = Demonstrations(6, 9);
  EXPECT_LE(LargestDifference(
                Score(model(), many, Mode(T5PromptMode::kConventional)),
                Score(model(), many, Mode(T5PromptMode::kGroupFid, 1, T5PromptAttention::kFull))),
            1e-5);
  EXPECT_LE(LargestDifference(
                Score(model(), many, Mode(T5PromptMode::kSaicl)),
                Score(model(), many, Mode(T5PromptMode::kGroupFid, 1, T5PromptAttention::kSaicl))),
            1e-5);
  // And SAICL is not full attention (the block mask matters).
  EXPECT_GT(LargestDifference(Score(model(), many, Mode(T5PromptMode::kConventional)),
                              Score(model(), many, Mode(T5PromptMode::kSaicl))),
            1e-3);
}

// ENSEMBLE scores every prompt in one decoder pass: the same as one pass per prompt.
TEST_P(PromptModesTest, OneDecoderPassForAllPromptsEqualsOnePerPrompt) {
  auto set = PrepareT5Demonstrations(model(), Demonstrations(5, 8), {});
  ASSERT_TRUE(set.ok()) << set.status();
  auto encoding = EncodeT5Prompts(model(), *set, Mode(T5PromptMode::kEnsemble), kTest);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  const std::vector<int64_t> inputs = {4, 0, 2, 2};
  auto together = ScoreT5CandidatesForInputs(model(), encoding->prompts, inputs, kCandidates);
  ASSERT_TRUE(together.ok()) << together.status();
  ASSERT_EQ(together->size(), inputs.size());
  for (size_t j = 0; j < inputs.size(); ++j) {
    auto alone = ScoreT5Candidates(model(), encoding->prompts, inputs[j], kCandidates);
    ASSERT_TRUE(alone.ok()) << alone.status();
    // Float rounding only: the GEMMs block a batch of 28 rows differently from one of 7.
    EXPECT_LE(LargestDifference((*together)[j], *alone), 1e-5) << "input " << inputs[j];
  }
  EXPECT_GT(LargestDifference((*together)[0], (*together)[1]), 1e-4);  // the prompts differ
}

INSTANTIATE_TEST_SUITE_P(BothConfigs, PromptModesTest, ::testing::ValuesIn(kT5Goldens));

const T5Model& Model() { return T5GoldenModel("v1_0"); }

// The encoder makes the same two AttendBiased calls per layer for any k (cost linear in k); group
// prompts split the demonstrations as evenly as possible, larger groups first.
TEST(PromptModesLayoutTest, RoundsAndGroups) {
  for (int64_t k : {1, 4, 32}) {
    auto set = PrepareT5Demonstrations(Model(), Demonstrations(k, 1), {});
    ASSERT_TRUE(set.ok()) << set.status();
    auto encoding = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kSaicl), kTest);
    ASSERT_TRUE(encoding.ok()) << encoding.status();
    EXPECT_EQ(encoding->attention_rounds, 2) << k;
    EXPECT_EQ(encoding->decoder.inputs(), 1);
  }
  auto set = PrepareT5Demonstrations(Model(), Demonstrations(7, 1), {});
  ASSERT_TRUE(set.ok());
  auto encoding = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kGroupFid, 3), kTest);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_EQ(encoding->prompt_demonstrations,
            (std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(encoding->prompts.inputs(), 3);
  EXPECT_EQ(encoding->decoder.inputs(), 1);
  int64_t rows = 0;
  for (const auto& s : set->segments) rows += static_cast<int64_t>(s.size());
  EXPECT_EQ(encoding->decoder.lengths[0], rows + 3 * static_cast<int64_t>(kTest.size()));
  auto ensemble = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kEnsemble), kTest);
  ASSERT_TRUE(ensemble.ok()) << ensemble.status();
  EXPECT_EQ(ensemble->decoder.inputs(), 7);
}

// S defaults to the longest demonstration, capped at 256; longer samples keep their last S
// tokens (TRUNCATE) or are refused (REJECT), naming the sample.
TEST(PromptModesLayoutTest, SegmentLengthAndTruncation) {
  auto demos = Demonstrations(3, 2);
  auto set = PrepareT5Demonstrations(Model(), demos, {});
  ASSERT_TRUE(set.ok());
  size_t longest = 0;
  for (const auto& d : demos) longest = std::max(longest, d.size());
  EXPECT_EQ(set->segment_length, static_cast<int64_t>(longest));
  EXPECT_EQ(set->truncated_demonstrations, 0);
  EXPECT_EQ(set->segments, demos);

  std::vector<int32_t> long_demo(300);
  std::iota(long_demo.begin(), long_demo.end(), 2);
  demos.push_back(long_demo);
  set = PrepareT5Demonstrations(Model(), demos, {});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->segment_length, kMaxT5SegmentLength);
  EXPECT_EQ(set->truncated_demonstrations, 1);
  EXPECT_EQ(set->segments.back(), std::vector<int32_t>(long_demo.end() - 256, long_demo.end()));

  T5SegmentOptions reject;
  reject.segment_length = 4;
  reject.long_demonstrations = LongDemonstrationPolicy::kReject;
  auto refused = PrepareT5Demonstrations(Model(), demos, reject);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  // Demonstration 0 (3 tokens) fits; demonstration 1 (8 tokens) does not.
  EXPECT_THAT(refused.status().message(),
              HasSubstr("demonstration 1 has 8 tokens, more than the segment length 4"));

  // The test input: truncated and reported, or refused.
  T5SegmentOptions short_segments;
  short_segments.segment_length = 4;
  set = PrepareT5Demonstrations(Model(), Demonstrations(2, 4), short_segments);
  ASSERT_TRUE(set.ok());
  auto encoding = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kSaicl), kTest);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_TRUE(encoding->test_truncated);
  EXPECT_EQ(encoding->test_tokens, 4);
  short_segments.long_demonstrations = LongDemonstrationPolicy::kReject;
  short_segments.segment_length = 11;  // every demonstration fits, the 7-token test does not...
  set = PrepareT5Demonstrations(Model(), Demonstrations(2, 4), short_segments);
  ASSERT_TRUE(set.ok()) << set.status();
  set->segment_length = 5;  // ...once S is below it
  encoding = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kSaicl), kTest);
  EXPECT_EQ(encoding.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(encoding.status().message(), HasSubstr("the test input has 7 tokens"));
}

TEST(PromptModesErrorsTest, BadArguments) {
  const auto demos = Demonstrations(4, 6);
  auto code = [](const auto& result) { return result.status().code(); };
  EXPECT_EQ(code(PrepareT5Demonstrations(Model(), {}, {})), absl::StatusCode::kInvalidArgument);
  auto with_empty = demos;
  with_empty[2].clear();
  auto status = PrepareT5Demonstrations(Model(), with_empty, {}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("demonstration 2 is empty"));
  auto bad_id = demos;
  bad_id[1][0] = 512;
  status = PrepareT5Demonstrations(Model(), bad_id, {}).status();
  EXPECT_THAT(status.message(), HasSubstr("demonstration 1 token 0: id 512"));
  T5SegmentOptions negative;
  negative.segment_length = -1;
  EXPECT_THAT(PrepareT5Demonstrations(Model(), demos, negative).status().message(),
              HasSubstr("segment_length must be >= 0"));

  auto set = PrepareT5Demonstrations(Model(), demos, {});
  ASSERT_TRUE(set.ok());
  EXPECT_THAT(EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kSaicl), {}).status().message(),
              HasSubstr("the test input is empty"));
  EXPECT_THAT(
      EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kSaicl), {3, -1}).status().message(),
      HasSubstr("the test input token 1: id -1"));
  auto groups_for_saicl = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kSaicl, 2), kTest);
  EXPECT_EQ(code(groups_for_saicl), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(groups_for_saicl.status().message(), HasSubstr("SAICL was given 2"));
  auto no_groups = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kGroupFid, 0), kTest);
  EXPECT_THAT(no_groups.status().message(), HasSubstr("GROUP_FID needs groups in [1, 4]"));
  auto too_many = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kEnsemble, 5), kTest);
  EXPECT_THAT(too_many.status().message(), HasSubstr("ENSEMBLE needs groups in [0, 4]"));
  auto unknown = EncodeT5Prompts(Model(), *set, Mode(static_cast<T5PromptMode>(9)), kTest);
  EXPECT_EQ(code(unknown), absl::StatusCode::kInvalidArgument);

  // ENSEMBLE only scores; an empty candidate is refused by the scorer.
  auto ensemble = EncodeT5Prompts(Model(), *set, Mode(T5PromptMode::kEnsemble), kTest);
  ASSERT_TRUE(ensemble.ok());
  EXPECT_THAT(GenerateT5Prompts(Model(), *ensemble, 3).status().message(),
              HasSubstr("ENSEMBLE runs the decoder per prompt"));
  EXPECT_THAT(ScoreT5Prompts(Model(), *ensemble, {{}}).status().message(),
              HasSubstr("candidate 0 is empty"));

  // A first-layer cache of other tokens is refused, not used.
  T5FirstLayerQkv wrong = set->first_layer;
  wrong.ids[0] = wrong.ids[0] == 2 ? 3 : 2;
  T5EncodeOptions options;
  options.first_layer = &wrong;
  auto encoded = Model().Encode(set->segments, options);
  EXPECT_EQ(code(encoded), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(encoded.status().message(), HasSubstr("first-layer q|k|v"));

  // Blocks outside the batch or with overlapping query ranges.
  EXPECT_THAT(T5BlockAttention::Create(Model(), 4, {{0, 2, 0, 5, false, 0}}).status().message(),
              HasSubstr("outside the batch's 4 rows"));
  EXPECT_THAT(T5BlockAttention::Create(Model(), 4, {{0, 2, 0, 2, false, 0}, {1, 2, 0, 2, false, 0}})
                  .status()
                  .message(),
              HasSubstr("overlap"));
  EXPECT_EQ(code(T5BlockAttention::Create(Model(), 4, {})), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace manyshot::testing

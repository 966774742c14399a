// SAICL, FiD, ensemble and group-FiD (engine/t5/prompt_modes.h) against the dense NumPy
// reference (tools/reference/saicl_reference.py: the SAICL block mask and segment-local bias
// written out as a full [T, T] bias over padded segments, from the paper's pseudo-code; the
// demonstrations include a one-token segment and one longer than S, the test input is longer than
// S):
// every prompt's encoder states, each candidate's log-probabilities and greedy generation, for
// both tiny T5 configs, within 1e-4.
#include <fstream>

#include "engine/t5/prompt_modes.h"
#include "gtest/gtest.h"
#include "tests/engine/t5/t5_test_support.h"

namespace manyshot::testing {
namespace {

constexpr double kTolerance = 1e-4;

const nlohmann::json& SaiclGolden(const std::string& name) {
  static std::map<std::string, nlohmann::json> goldens;
  auto& slot = goldens[name];
  if (slot.is_null()) {
    std::ifstream in(std::filesystem::path(MANYSHOT_SOURCE_DIR) / "tests/golden" /
                     ("saicl_" + name + ".json"));
    EXPECT_TRUE(in.good()) << "missing golden saicl_" << name;
    slot = nlohmann::json::parse(in);
  }
  return slot;
}

T5PromptMode ModeFromName(const std::string& name) {
  for (T5PromptMode m : {T5PromptMode::kConventional, T5PromptMode::kSaicl, T5PromptMode::kFid,
                         T5PromptMode::kEnsemble, T5PromptMode::kGroupFid}) {
    if (name == T5PromptModeName(m)) return m;
  }
  ADD_FAILURE() << "unknown mode " << name;
  return T5PromptMode::kSaicl;
}

class PromptModesGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptModesGoldenTest, MatchesDenseReference) {
  const nlohmann::json& golden = SaiclGolden(GetParam());
  const T5Model& model = T5GoldenModel(golden["t5_golden"].get<std::string>());
  T5SegmentOptions segment_options;
  segment_options.segment_length = golden["segment_length"].get<int64_t>();
  auto demos = PrepareT5Demonstrations(
      model, golden["demonstrations"].get<std::vector<std::vector<int32_t>>>(), segment_options);
  ASSERT_TRUE(demos.ok()) << demos.status();
  EXPECT_EQ(demos->truncated_demonstrations, 1);  // the 17-token demonstration, S = 12
  const auto test = golden["test_input"].get<std::vector<int32_t>>();
  const auto candidates = golden["candidates"].get<std::vector<std::vector<int32_t>>>();
  const int64_t d = model.config().d_model;
  for (const auto& m : golden["modes"]) {
    T5ModeOptions options;
    options.mode = ModeFromName(m["mode"].get<std::string>());
    options.groups = m["groups"].get<int64_t>();
    options.group_attention = m["group_attention"].get<std::string>() == "saicl"
                                  ? T5PromptAttention::kSaicl
                                  : T5PromptAttention::kFull;
    const std::string what = m["mode"].get<std::string>() + " groups " +
                             std::to_string(options.groups) + " " +
                             m["group_attention"].get<std::string>();
    auto encoding = EncodeT5Prompts(model, *demos, options, test);
    ASSERT_TRUE(encoding.ok()) << what << ": " << encoding.status();
    EXPECT_EQ(encoding->prompts.lengths, m["prompt_lengths"].get<std::vector<int64_t>>()) << what;
    // The test input is longer than S: its last S tokens are the test segment.
    EXPECT_TRUE(encoding->test_truncated) << what;
    EXPECT_EQ(encoding->test_tokens, segment_options.segment_length) << what;
    // Encoder states, prompt after prompt.
    std::vector<float> states;
    for (int64_t p = 0; p < encoding->prompts.inputs(); ++p) {
      auto host = model.StatesToHost(encoding->prompts, p);
      ASSERT_TRUE(host.ok()) << host.status();
      states.insert(states.end(), host->begin(), host->end());
    }
    const auto& expected = m["encoder_states"];
    ASSERT_EQ(static_cast<int64_t>(states.size()), static_cast<int64_t>(expected.size()) * d)
        << what;
    double worst = 0;
    for (size_t r = 0; r < expected.size(); ++r) {
      for (int64_t j = 0; j < d; ++j) {
        worst = std::max(worst, std::abs(states[r * d + j] - expected[r][j].get<double>()));
      }
    }
    EXPECT_LE(worst, kTolerance) << what << ": encoder states";
    // Candidate log-probabilities.
    auto scores = ScoreT5Prompts(model, *encoding, candidates);
    ASSERT_TRUE(scores.ok()) << what << ": " << scores.status();
    const auto sums = m["sum_logprob"].get<std::vector<double>>();
    const auto means = m["mean_logprob"].get<std::vector<double>>();
    ASSERT_EQ(scores->size(), candidates.size());
    for (size_t c = 0; c < candidates.size(); ++c) {
      EXPECT_NEAR((*scores)[c].sum_logprob, sums[c], kTolerance) << what << " candidate " << c;
      EXPECT_NEAR((*scores)[c].mean_logprob, means[c], kTolerance) << what << " candidate " << c;
    }
    // Greedy generation where the reference's top-2 margins made it a stable golden.
    if (options.mode == T5PromptMode::kEnsemble) {
      EXPECT_EQ(GenerateT5Prompts(model, *encoding, 3).status().code(),
                absl::StatusCode::kInvalidArgument);
    } else if (!m["greedy"].is_null()) {
      auto generated = GenerateT5Prompts(model, *encoding, 5);
      ASSERT_TRUE(generated.ok()) << what << ": " << generated.status();
      EXPECT_EQ(generated->tokens, m["greedy"].get<std::vector<int32_t>>()) << what;
      EXPECT_EQ(generated->ended_with_eos, m["greedy_ended_with_eos"].get<bool>()) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothConfigs, PromptModesGoldenTest, ::testing::ValuesIn(kT5Goldens));

}  // namespace
}  // namespace manyshot::testing

// Candidate scoring (mean log-probability of each answer given the encoder input) and greedy
// generation against the NumPy reference's values in the goldens, for both T5 configs.
#include <fstream>

#include "engine/t5/t5_scoring.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"
#include "tests/engine/support/golden_models.h"
#include "tests/engine/t5/t5_test_support.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

constexpr double kTolerance = 1e-4;

std::vector<std::vector<int32_t>> Inputs(const nlohmann::json& golden) {
  std::vector<std::vector<int32_t>> inputs;
  for (const auto& c : golden["cases"]) inputs.push_back(c["input"].get<std::vector<int32_t>>());
  return inputs;
}

class T5ScoringTest : public ::testing::TestWithParam<std::string> {
 protected:
  const T5Model& model() const { return T5GoldenModel(GetParam()); }
  const nlohmann::json& golden() const { return T5Golden(GetParam()); }
};

TEST_P(T5ScoringTest, CandidateLogProbsMatchReference) {
  auto encoded = model().Encode(Inputs(golden()));
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  int64_t input = 0;
  for (const auto& c : golden()["cases"]) {
    const auto candidates = c["candidates"].get<std::vector<std::vector<int32_t>>>();
    const auto sums = c["sum_logprob"].get<std::vector<double>>();
    const auto means = c["mean_logprob"].get<std::vector<double>>();
    auto scores = ScoreT5Candidates(model(), *encoded, input, candidates);
    ASSERT_TRUE(scores.ok()) << scores.status();
    ASSERT_EQ(scores->size(), candidates.size());
    for (size_t i = 0; i < candidates.size(); ++i) {
      EXPECT_NEAR((*scores)[i].sum_logprob, sums[i], kTolerance) << "input " << input << " " << i;
      EXPECT_NEAR((*scores)[i].mean_logprob, means[i], kTolerance) << "input " << input << " " << i;
      EXPECT_EQ((*scores)[i].tokens, static_cast<int64_t>(candidates[i].size()));
    }
    ++input;
  }
}

TEST_P(T5ScoringTest, GreedyGenerationMatchesReference) {
  auto encoded = model().Encode(Inputs(golden()));
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  auto generated = GenerateT5Greedy(model(), *encoded, 6);
  ASSERT_TRUE(generated.ok()) << generated.status();
  ASSERT_EQ(generated->size(), golden()["cases"].size());
  for (size_t i = 0; i < generated->size(); ++i) {
    const auto& c = golden()["cases"][i];
    EXPECT_EQ((*generated)[i].tokens, c["greedy"].get<std::vector<int32_t>>()) << "input " << i;
    EXPECT_EQ((*generated)[i].ended_with_eos, c["greedy_ended_with_eos"].get<bool>());
  }
}

// Candidates whose tokens exceed one pass (kMaxT5ScoredRowsPerPass rows) run in several: each
// scores as it does alone, wherever the pass boundaries fall.
TEST_P(T5ScoringTest, ManyLongCandidatesScoreAsEachAlone) {
  auto encoded = model().Encode(Inputs(golden()));
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const int64_t vocab = model().config().vocab_size;
  std::vector<std::vector<int32_t>> candidates;
  size_t rows = 0;
  for (int c = 0; c < 24; ++c) {
    std::vector<int32_t> cand;
    for (int t = 0; t < 1 + (c * 7) % 30; ++t) {
      cand.push_back(static_cast<int32_t>(3 + (c * 31 + t * 17) % (vocab - 3)));
    }
    rows += cand.size();
    candidates.push_back(std::move(cand));
  }
  const std::vector<int64_t> inputs = {0, 1};
  ASSERT_GT(rows * inputs.size(), 2 * kMaxT5ScoredRowsPerPass);
  auto together = ScoreT5CandidatesForInputs(model(), *encoded, inputs, candidates);
  ASSERT_TRUE(together.ok()) << together.status();
  for (size_t n = 0; n < inputs.size(); ++n) {
    for (size_t c = 0; c < candidates.size(); ++c) {
      auto alone = ScoreT5Candidates(model(), *encoded, inputs[n], {candidates[c]});
      ASSERT_TRUE(alone.ok()) << alone.status();
      EXPECT_NEAR((*together)[n][c].sum_logprob, (*alone)[0].sum_logprob, kTolerance)
          << "input " << n << " candidate " << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothConfigs, T5ScoringTest, ::testing::ValuesIn(kT5Goldens));

// The v1.1 model with its eos_token_id set to the third token its greedy generation of input 0
// produces: generation stops there, reporting eos, with the two tokens before it; other inputs
// go on (the batch shrinks as inputs finish).
TEST(T5GenerationTest, StopsAtEos) {
  const nlohmann::json& golden = T5Golden("v1_1");
  const auto expected = golden["cases"][0]["greedy"].get<std::vector<int32_t>>();
  ASSERT_GE(expected.size(), 3u);
  TempDir dir;
  for (const auto& entry : std::filesystem::directory_iterator(T5GoldenModelDir("v1_1"))) {
    std::filesystem::copy(entry.path(), dir.path() / entry.path().filename());
  }
  std::ifstream in(dir.path() / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  in.close();
  config["eos_token_id"] = expected[2];
  WriteFile(dir.path() / "config.json", config.dump());
  auto model = T5Model::Load(dir.path(), TestBackend());
  ASSERT_TRUE(model.ok()) << model.status();
  auto encoded = (*model)->Encode(Inputs(golden));
  ASSERT_TRUE(encoded.ok());
  auto generated = GenerateT5Greedy(**model, *encoded, 6);
  ASSERT_TRUE(generated.ok()) << generated.status();
  EXPECT_TRUE((*generated)[0].ended_with_eos);
  EXPECT_EQ((*generated)[0].tokens, std::vector<int32_t>(expected.begin(), expected.begin() + 2));
  for (size_t i = 1; i < generated->size(); ++i) {
    const auto others = golden["cases"][i]["greedy"].get<std::vector<int32_t>>();
    if (std::find(others.begin(), others.end(), expected[2]) == others.end()) {
      EXPECT_EQ((*generated)[i].tokens, others) << "input " << i;
      EXPECT_FALSE((*generated)[i].ended_with_eos);
    }
  }
}

TEST(T5ScoringErrorsTest, BadCandidatesAndLimits) {
  const T5Model& model = T5GoldenModel("v1_0");
  auto encoded = model.Encode({{4, 5, 6}});
  ASSERT_TRUE(encoded.ok());
  auto empty = ScoreT5Candidates(model, *encoded, 0, {{7}, {}});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("candidate 1 is empty"));
  auto bad_id = ScoreT5Candidates(model, *encoded, 0, {{7, 9999}});
  ASSERT_FALSE(bad_id.ok());
  EXPECT_EQ(bad_id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_id.status().message(), HasSubstr("candidate 0 token 1: id 9999"));
  auto bad_input = ScoreT5Candidates(model, *encoded, 3, {{7}});
  EXPECT_FALSE(bad_input.ok());
  auto negative = GenerateT5Greedy(model, *encoded, -1);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  auto none = GenerateT5Greedy(model, *encoded, 0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE((*none)[0].tokens.empty());
}

}  // namespace
}  // namespace manyshot::testing

// GenerateT5 (t5_generation.h): beam search and greedy decoding from T5's decoder with the
// decoder-only search's semantics, against the NumPy reference's beam searches in the goldens
// (tools/reference/beam_search.py over t5_reference.py), for both T5 configs.
#include "engine/t5/t5_generation.h"

#include <string>
#include <vector>

#include "engine/t5/t5_scoring.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
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

GenerationParams BeamParams(const nlohmann::json& beam) {
  GenerationParams params;
  params.beam_search = true;
  params.beam_width = beam["beam_width"].get<int>();
  params.length_penalty = beam["length_penalty"].get<double>();
  params.max_new_tokens = beam["max_new_tokens"].get<int>();
  params.eos_id = beam["eos_id"].get<int32_t>();
  return params;
}

const char* ReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
      return "EOS";
    case FinishReason::kStopString:
      return "STOP_STRING";
    case FinishReason::kMaxTokens:
      return "MAX_TOKENS";
  }
  return "?";
}

class T5BeamSearchTest : public ::testing::TestWithParam<std::string> {
 protected:
  const T5Model& model() const { return T5GoldenModel(GetParam()); }
  const nlohmann::json& golden() const { return T5Golden(GetParam()); }
};

// Every beam search of every input: tokens exactly, sum and score at 1e-4, and why it ended.
TEST_P(T5BeamSearchTest, BeamSearchMatchesReference) {
  auto encoded = model().Encode(Inputs(golden()));
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  int searches = 0;
  for (int64_t input = 0; input < encoded->inputs(); ++input) {
    for (const auto& beam : golden()["cases"][input]["beams"]) {
      SCOPED_TRACE(::testing::Message() << "input " << input << " beam " << beam.dump());
      auto out = GenerateT5(model(), *encoded, input, BeamParams(beam));
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->tokens, beam["tokens"].get<std::vector<int32_t>>());
      EXPECT_NEAR(out->sum_logprob, beam["sum_logprob"].get<double>(), kTolerance);
      EXPECT_NEAR(out->score, beam["score"].get<double>(), kTolerance);
      EXPECT_EQ(ReasonName(out->reason), beam["finish_reason"].get<std::string>());
      ++searches;
    }
  }
  EXPECT_GE(searches, 15);
}

// Width 1 (and greedy proper) gives GenerateT5Greedy's tokens, an implementation of its own.
TEST_P(T5BeamSearchTest, BeamWidthOneIsGreedy) {
  auto encoded = model().Encode(Inputs(golden()));
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  auto greedy = GenerateT5Greedy(model(), *encoded, 6);
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  for (int64_t input = 0; input < encoded->inputs(); ++input) {
    for (bool beam_search : {true, false}) {
      GenerationParams params;
      params.beam_search = beam_search;
      params.beam_width = 1;
      params.max_new_tokens = 6;
      params.eos_id = static_cast<int32_t>(model().config().eos_token_id);
      auto out = GenerateT5(model(), *encoded, input, params);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_EQ(out->tokens, (*greedy)[input].tokens) << "input " << input;
      EXPECT_EQ(out->reason == FinishReason::kEos, (*greedy)[input].ended_with_eos);
    }
  }
}

// The beams' caches are forked and extended token by token; the winning hypothesis's summed
// log-probability must equal the teacher-forced score of its tokens (and eos where it ended
// there) from a fresh decoder pass (ScoreT5Candidates).
TEST_P(T5BeamSearchTest, BeamSumIsTeacherForcedScore) {
  auto encoded = model().Encode(Inputs(golden()));
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  for (int64_t input = 0; input < encoded->inputs(); ++input) {
    for (const auto& beam : golden()["cases"][input]["beams"]) {
      const GenerationParams params = BeamParams(beam);
      auto out = GenerateT5(model(), *encoded, input, params);
      ASSERT_TRUE(out.ok()) << out.status();
      std::vector<int32_t> sequence = out->tokens;
      if (out->reason == FinishReason::kEos) sequence.push_back(*params.eos_id);
      auto scored = ScoreT5Candidates(model(), *encoded, input, {sequence});
      ASSERT_TRUE(scored.ok()) << scored.status();
      EXPECT_NEAR(out->sum_logprob, (*scored)[0].sum_logprob, kTolerance)
          << "input " << input << " beam " << beam.dump();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothConfigs, T5BeamSearchTest, ::testing::ValuesIn(kT5Goldens));

// A stop string ends a hypothesis as in the decoder-only search: the text is each token's id in
// angle brackets, the stop string the second token of the width-2 search's output.
TEST(T5BeamSearchStopTest, StopStringEndsTheSearch) {
  const T5Model& model = T5GoldenModel("v1_1");
  const nlohmann::json& beam = T5Golden("v1_1")["cases"][0]["beams"][1];
  const auto expected = beam["tokens"].get<std::vector<int32_t>>();
  ASSERT_GE(expected.size(), 2u);
  auto encoded = model.Encode({T5Golden("v1_1")["cases"][0]["input"].get<std::vector<int32_t>>()});
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  GenerationParams params;
  params.beam_search = false;
  params.max_new_tokens = 6;
  params.eos_id = static_cast<int32_t>(model.config().eos_token_id);
  params.decode = [](const std::vector<int32_t>& tokens) {
    std::string text;
    for (int32_t t : tokens) text += "<" + std::to_string(t) + ">";
    return text;
  };
  const auto greedy = T5Golden("v1_1")["cases"][0]["greedy"].get<std::vector<int32_t>>();
  params.stop = {"<" + std::to_string(greedy[1]) + ">"};
  auto out = GenerateT5(model, *encoded, 0, params);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->reason, FinishReason::kStopString);
  EXPECT_EQ(out->stop_string, params.stop[0]);
  EXPECT_EQ(out->tokens, std::vector<int32_t>(greedy.begin(), greedy.begin() + 2));
}

TEST(T5BeamSearchErrorsTest, BadParamsAreInvalidArgument) {
  const T5Model& model = T5GoldenModel("v1_0");
  auto encoded = model.Encode({{4, 5, 6}});
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  auto expect_invalid = [&](GenerationParams params, int64_t input, const std::string& words) {
    auto out = GenerateT5(model, *encoded, input, params);
    ASSERT_FALSE(out.ok()) << words;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << out.status();
    EXPECT_THAT(out.status().message(), HasSubstr(words));
  };
  GenerationParams ok;
  ok.beam_search = true;
  ok.beam_width = 2;
  ok.max_new_tokens = 3;
  ok.eos_id = 1;
  ASSERT_TRUE(GenerateT5(model, *encoded, 0, ok).ok());

  GenerationParams width0 = ok;
  width0.beam_width = 0;
  expect_invalid(width0, 0, "beam_width must be at least 1, got 0");
  GenerationParams none = ok;
  none.max_new_tokens = 0;
  expect_invalid(none, 0, "max_new_tokens must be between 1 and 4096, got 0");
  GenerationParams too_many = ok;
  too_many.max_new_tokens = static_cast<int>(kMaxT5NewTokens) + 1;
  expect_invalid(too_many, 0, "max_new_tokens must be between 1 and 4096, got 4097");
  GenerationParams bad_eos = ok;
  bad_eos.eos_id = 512;
  expect_invalid(bad_eos, 0, "eos_id 512 is outside the vocabulary [0, 512)");
  GenerationParams stop_without_decode = ok;
  stop_without_decode.stop = {"x"};
  expect_invalid(stop_without_decode, 0, "stop strings need a decode function");
  expect_invalid(ok, 1, "input 1 is not one of the encoder output's 1 inputs");
  expect_invalid(ok, -1, "input -1");

  GenerationParams cancelled = ok;
  cancelled.cancelled = [] { return true; };
  auto out = GenerateT5(model, *encoded, 0, cancelled);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled) << out.status();
}

}  // namespace
}  // namespace manyshot::testing

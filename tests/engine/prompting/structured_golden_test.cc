// Structured prompting against the independent NumPy reference (tools/reference/structured.py,
// which uses an explicit softmax with ln(factor) on the query's own keys, not the merge): group
// layouts token by token, candidate scores for classification and multi-choice in every mode and
// alignment, and greedy / beam-search generations (identical tokens), for every model family.
#include <fstream>

#include "engine/prompting/context_encoder.h"
#include "engine/prompting/generation.h"
#include "engine/prompting/query_runner.h"
#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

constexpr double kTolerance = 1e-4;

const nlohmann::json& StructuredGolden(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::ifstream in(std::string(MANYSHOT_SOURCE_DIR) + "/tests/golden/structured_" + name +
                     ".json");
    it = cache.emplace(name, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

Alignment ParseAlignment(const std::string& s) {
  if (s == "ATTENTION_MASK") return Alignment::kAttentionMask;
  if (s == "PAD_SPACE") return Alignment::kPadSpace;
  return Alignment::kTruncate;
}

class StructuredGoldenTest : public ModelBackendTest {};

TEST_P(StructuredGoldenTest, LayoutsScoresAndGenerations) {
  const auto& golden = StructuredGolden(family());
  const Transformer& model = this->model(golden["model"]);
  for (const auto& c : golden["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto demos = c["demonstrations"].get<std::vector<std::vector<int32_t>>>();
    const int64_t L = c["group_length"];
    const uint64_t seed = c["shuffle_seed"];
    const int32_t bos = c["bos_id"];
    absl::StatusOr<EncodedContext> context;
    QueryPlacement placement;
    if (c["mode"] == "CONVENTIONAL") {
      ConventionalWindow window = BuildConventionalWindow(demos, L, seed);
      EXPECT_EQ(window.tokens, c["expected_window"].get<std::vector<int32_t>>());
      context = EncodeWindow(model, window.tokens, bos);
      ASSERT_TRUE(context.ok());
      placement = ConventionalPlacement(context->tokens);
    } else {
      GroupOptions options;
      options.group_length = L;
      options.alignment = ParseAlignment(c["alignment"]);
      options.shuffle_seed = seed;
      options.space_id = c["space_id"];
      options.long_demonstrations = c["long_demonstrations"] == "TRUNCATE"
                                        ? LongDemonstrationPolicy::kTruncate
                                        : LongDemonstrationPolicy::kReject;
      auto layout = BuildGroups(demos, options);
      ASSERT_TRUE(layout.ok()) << layout.status();
      EXPECT_EQ(layout->order, c["expected_order"].get<std::vector<int64_t>>());
      const auto& groups = c["expected_groups"];
      ASSERT_EQ(layout->groups(), static_cast<int64_t>(groups.size()));
      for (size_t g = 0; g < groups.size(); ++g) {
        EXPECT_EQ(layout->slots[g], groups[g]["slots"].get<std::vector<int32_t>>())
            << "group " << g;
        EXPECT_EQ(layout->demonstrations_per_group[g], groups[g]["demonstrations"].get<int32_t>());
      }
      context = EncodeGroups(model, *layout, bos, /*groups_per_pass=*/3);
      ASSERT_TRUE(context.ok());
      placement = StructuredPlacement(L, c["effective_factor"].get<double>());
    }
    // All queries of the case in one batch.
    std::vector<QueryWithCandidates> items;
    for (const auto& q : c["queries"]) {
      items.push_back({q["tokens"].get<std::vector<int32_t>>(),
                       q["candidates"].get<std::vector<std::vector<int32_t>>>()});
    }
    auto scores = ScoreCandidates(model, &*context, placement, bos, items);
    ASSERT_TRUE(scores.ok()) << scores.status();
    double worst = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const auto& q = c["queries"][i];
      std::vector<double> means;
      for (size_t k = 0; k < items[i].candidates.size(); ++k) {
        worst = std::max(worst,
                         std::abs((*scores)[i][k].sum_logprob - q["sum_logprob"][k].get<double>()));
        worst = std::max(
            worst, std::abs((*scores)[i][k].mean_logprob - q["mean_logprob"][k].get<double>()));
      }
    }
    EXPECT_LE(worst, kTolerance);
    RecordProperty("max_abs_diff_" + c["name"].get<std::string>(), std::to_string(worst));

    if (c.contains("generation")) {
      const auto& g = c["generation"];
      auto state = QueryState::Start(model, &*context, placement, bos,
                                     g["query"].get<std::vector<int32_t>>());
      ASSERT_TRUE(state.ok());
      GenerationParams params;
      params.beam_search = g["strategy"] == "BEAM";
      params.beam_width = g["beam_width"];
      params.length_penalty = g["length_penalty"];
      params.max_new_tokens = g["max_new_tokens"];
      params.eos_id = c["eos_id"].get<int32_t>();
      auto out = Generate(*std::move(state), params);
      ASSERT_TRUE(out.ok());
      EXPECT_EQ(out->tokens, g["tokens"].get<std::vector<int32_t>>());
      EXPECT_NEAR(out->sum_logprob, g["sum_logprob"].get<double>(), kTolerance);
      EXPECT_NEAR(out->score, g["score"].get<double>(), kTolerance);
    }

    // Cases built from text: our rendering + tokenization gives the reference's ids.
    if (c.contains("demonstration_texts")) {
      auto tokenizer = LoadTokenizer(MANYSHOT_GPT2_TOKENIZER_DIR);
      ASSERT_TRUE(tokenizer.ok());
      const auto texts = c["demonstration_texts"].get<std::vector<std::string>>();
      for (size_t i = 0; i < texts.size(); ++i) {
        EXPECT_EQ(*(*tokenizer)->Encode(texts[i]), demos[i]) << "demonstration " << i;
      }
      const auto queries = c["query_texts"].get<std::vector<std::string>>();
      for (size_t i = 0; i < queries.size(); ++i) {
        EXPECT_EQ(*(*tokenizer)->Encode(queries[i]), items[i].query) << "query " << i;
      }
    }
  }
}

MANYSHOT_INSTANTIATE_ON_EVERY_BACKEND(StructuredGoldenTest);

}  // namespace
}  // namespace manyshot::testing

// The identities of DESIGN.md §1.8, to 1e-5, for every model family:
//  - one exactly full group with factor 1 equals the plain concatenated prompt;
//  - one demonstration per group (ATTENTION_MASK) does not depend on demonstration order;
//  - a query scores the same alone and inside batches of 2, 7 and 64;
// and the modes: PARALLEL is STRUCTURED with factor 1; CONVENTIONAL is the plain prompt
// [bos, window, query, candidate].
#include <random>

#include "engine/prompting/context_encoder.h"
#include "engine/prompting/query_runner.h"
#include "gtest/gtest.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

constexpr double kIdentityTolerance = 1e-5;

// Deterministic token lists in [3, vocab).
std::vector<int32_t> Tokens(std::mt19937& rng, int64_t vocab, int n) {
  std::uniform_int_distribution<int32_t> dist(
      3, static_cast<int32_t>(std::min<int64_t>(vocab, 30000)) - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

int32_t Bos(const Transformer& model) {
  return static_cast<int32_t>(model.config().bos_token_id);  // every tiny model's config has one
}

// Log-probs of `candidate` after [prefix...] computed with one plain causal forward pass.
std::pair<double, double> PlainScore(const Transformer& model, std::vector<int32_t> prefix,
                                     const std::vector<int32_t>& candidate) {
  const size_t start = prefix.size();
  prefix.insert(prefix.end(), candidate.begin(), candidate.end());
  std::vector<int32_t> positions(prefix.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<int32_t>(i);
  std::vector<int64_t> rows;
  for (size_t i = start - 1; i + 1 < prefix.size(); ++i) rows.push_back(static_cast<int64_t>(i));
  KvCache cache = model.NewCache(static_cast<int64_t>(prefix.size()));
  ForwardSequence seq{prefix, positions, &cache, rows};
  auto result = model.Forward({&seq, 1});
  EXPECT_TRUE(result.ok());
  double sum = 0;
  for (size_t r = 0; r < candidate.size(); ++r) {
    sum += LogSoftmax(result->row(r), result->vocab_size)[candidate[r]];
  }
  return {sum, sum / static_cast<double>(candidate.size())};
}

class IdentitiesTest : public ModelBackendTest {};

TEST_P(IdentitiesTest, OneFullGroupWithFactorOneIsThePlainPrompt) {
  std::mt19937 rng(11);
  const int64_t vocab = model().config().vocab_size;
  // Two demonstrations of 6 and 9 tokens fill L - 1 = 15 slots exactly.
  std::vector<std::vector<int32_t>> demos = {Tokens(rng, vocab, 6), Tokens(rng, vocab, 9)};
  GroupOptions options;
  options.group_length = 16;
  options.alignment = Alignment::kAttentionMask;
  auto layout = BuildGroups(demos, options);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->groups(), 1);
  auto context = EncodeGroups(model(), *layout, Bos(model()));
  ASSERT_TRUE(context.ok()) << context.status();
  QueryWithCandidates item{Tokens(rng, vocab, 4), {Tokens(rng, vocab, 1), Tokens(rng, vocab, 3)}};
  auto scores =
      ScoreCandidates(model(), &*context, StructuredPlacement(16, 1.0), Bos(model()), {item});
  ASSERT_TRUE(scores.ok()) << scores.status();
  std::vector<int32_t> prefix = {Bos(model())};
  for (const auto& d : demos) prefix.insert(prefix.end(), d.begin(), d.end());
  prefix.insert(prefix.end(), item.query.begin(), item.query.end());
  for (size_t c = 0; c < item.candidates.size(); ++c) {
    auto [sum, mean] = PlainScore(model(), prefix, item.candidates[c]);
    EXPECT_NEAR((*scores)[0][c].sum_logprob, sum, kIdentityTolerance) << "candidate " << c;
    EXPECT_NEAR((*scores)[0][c].mean_logprob, mean, kIdentityTolerance);
  }
}

TEST_P(IdentitiesTest, OneDemonstrationPerGroupIsOrderInvariant) {
  std::mt19937 rng(12);
  const int64_t vocab = model().config().vocab_size;
  std::vector<std::vector<int32_t>> demos;
  for (int i = 0; i < 6; ++i) demos.push_back(Tokens(rng, vocab, 6 + i % 3));  // 6..8 of 9 slots
  QueryWithCandidates item{Tokens(rng, vocab, 3), {Tokens(rng, vocab, 2), Tokens(rng, vocab, 1)}};
  std::vector<double> reference;
  for (uint64_t seed : {0, 1, 7, 12345}) {
    GroupOptions options;
    options.group_length = 10;
    options.alignment = Alignment::kAttentionMask;
    options.shuffle_seed = seed;
    auto layout = BuildGroups(demos, options);
    ASSERT_TRUE(layout.ok());
    ASSERT_EQ(layout->groups(), 6);
    auto context = EncodeGroups(model(), *layout, Bos(model()), /*groups_per_pass=*/4);
    ASSERT_TRUE(context.ok());
    auto scores =
        ScoreCandidates(model(), &*context, StructuredPlacement(10, 6.0), Bos(model()), {item});
    ASSERT_TRUE(scores.ok());
    std::vector<double> sums = {(*scores)[0][0].sum_logprob, (*scores)[0][1].sum_logprob};
    if (reference.empty()) {
      reference = sums;
    } else {
      EXPECT_NEAR(sums[0], reference[0], kIdentityTolerance) << "seed " << seed;
      EXPECT_NEAR(sums[1], reference[1], kIdentityTolerance) << "seed " << seed;
    }
  }
}

TEST_P(IdentitiesTest, AQueryScoresTheSameAloneAndInBatches) {
  std::mt19937 rng(13);
  const int64_t vocab = model().config().vocab_size;
  std::vector<std::vector<int32_t>> demos;
  for (int i = 0; i < 12; ++i) demos.push_back(Tokens(rng, vocab, 3 + i % 5));
  GroupOptions options;
  options.group_length = 20;
  auto layout = BuildGroups(demos, options);
  ASSERT_TRUE(layout.ok());
  auto context = EncodeGroups(model(), *layout, Bos(model()));
  ASSERT_TRUE(context.ok());
  const QueryPlacement placement = StructuredPlacement(20, static_cast<double>(layout->groups()));
  std::vector<QueryWithCandidates> pool;
  for (int i = 0; i < 64; ++i) {
    pool.push_back({Tokens(rng, vocab, 1 + i % 6), {Tokens(rng, vocab, 1), Tokens(rng, vocab, 2)}});
  }
  auto alone = ScoreCandidates(model(), &*context, placement, Bos(model()), {pool[0]});
  ASSERT_TRUE(alone.ok());
  for (size_t batch : {2u, 7u, 64u}) {
    std::vector<QueryWithCandidates> items(pool.begin(), pool.begin() + batch);
    // The query of interest sits in the middle of the batch, not first.
    std::swap(items[0], items[batch / 2]);
    auto scores = ScoreCandidates(model(), &*context, placement, Bos(model()), items);
    ASSERT_TRUE(scores.ok());
    for (size_t c = 0; c < 2; ++c) {
      EXPECT_NEAR((*scores)[batch / 2][c].sum_logprob, (*alone)[0][c].sum_logprob,
                  kIdentityTolerance)
          << "batch " << batch << " candidate " << c;
    }
  }
}

// Many long candidates run in several bounded passes (kMaxScoredRowsPerPass rows each): every
// candidate scores as it does alone, wherever the pass boundaries fall.
TEST_P(IdentitiesTest, ManyLongCandidatesScoreAsEachAlone) {
  std::mt19937 rng(16);
  const int64_t vocab = model().config().vocab_size;
  std::vector<std::vector<int32_t>> demos;
  for (int i = 0; i < 6; ++i) demos.push_back(Tokens(rng, vocab, 4));
  GroupOptions options;
  options.group_length = 16;
  auto layout = BuildGroups(demos, options);
  ASSERT_TRUE(layout.ok());
  auto context = EncodeGroups(model(), *layout, Bos(model()));
  ASSERT_TRUE(context.ok());
  const QueryPlacement placement = StructuredPlacement(16, static_cast<double>(layout->groups()));
  std::vector<QueryWithCandidates> items(3);
  size_t rows = 0;
  for (auto& item : items) {
    item.query = Tokens(rng, vocab, 3);
    for (int c = 0; c < 16; ++c) {
      item.candidates.push_back(Tokens(rng, vocab, 1 + (c * 7) % 30));
      rows += item.candidates.back().size() - 1;
    }
  }
  ASSERT_GT(rows, 2 * kMaxScoredRowsPerPass);  // at least three passes
  auto together = ScoreCandidates(model(), &*context, placement, Bos(model()), items);
  ASSERT_TRUE(together.ok()) << together.status();
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t c = 0; c < items[i].candidates.size(); ++c) {
      QueryWithCandidates one{items[i].query, {items[i].candidates[c]}};
      auto alone = ScoreCandidates(model(), &*context, placement, Bos(model()), {one});
      ASSERT_TRUE(alone.ok()) << alone.status();
      // The identity tolerance per token: a batch's other rows change f32 rounding a little.
      const double tolerance =
          kIdentityTolerance * static_cast<double>(items[i].candidates[c].size());
      EXPECT_NEAR((*together)[i][c].sum_logprob, (*alone)[0][0].sum_logprob, tolerance)
          << "item " << i << " candidate " << c;
      EXPECT_EQ((*together)[i][c].tokens, static_cast<int64_t>(items[i].candidates[c].size()));
    }
  }
}

TEST_P(IdentitiesTest, ParallelIsStructuredWithFactorOneAndFactorMatters) {
  std::mt19937 rng(14);
  const int64_t vocab = model().config().vocab_size;
  std::vector<std::vector<int32_t>> demos;
  for (int i = 0; i < 8; ++i) demos.push_back(Tokens(rng, vocab, 4));
  GroupOptions options;
  options.group_length = 9;
  auto layout = BuildGroups(demos, options);
  ASSERT_TRUE(layout.ok());
  ASSERT_EQ(layout->groups(), 4);
  auto context = EncodeGroups(model(), *layout, Bos(model()));
  ASSERT_TRUE(context.ok());
  QueryWithCandidates item{Tokens(rng, vocab, 3), {Tokens(rng, vocab, 2)}};
  auto f1 = ScoreCandidates(model(), &*context, StructuredPlacement(9, 1.0), Bos(model()), {item});
  auto f4 = ScoreCandidates(model(), &*context, StructuredPlacement(9, 4.0), Bos(model()), {item});
  ASSERT_TRUE(f1.ok() && f4.ok());
  EXPECT_GT(std::abs((*f1)[0][0].sum_logprob - (*f4)[0][0].sum_logprob), 1e-4);
}

TEST_P(IdentitiesTest, ConventionalIsThePlainPromptOverItsWindow) {
  std::mt19937 rng(15);
  const int64_t vocab = model().config().vocab_size;
  std::vector<std::vector<int32_t>> demos = {Tokens(rng, vocab, 5), Tokens(rng, vocab, 6),
                                             Tokens(rng, vocab, 9)};
  ConventionalWindow window = BuildConventionalWindow(demos, 16, 0);
  ASSERT_EQ(window.demonstrations, 2);
  auto context = EncodeWindow(model(), window.tokens, Bos(model()));
  ASSERT_TRUE(context.ok());
  QueryWithCandidates item{Tokens(rng, vocab, 3), {Tokens(rng, vocab, 3)}};
  auto scores = ScoreCandidates(model(), &*context, ConventionalPlacement(context->tokens),
                                Bos(model()), {item});
  ASSERT_TRUE(scores.ok()) << scores.status();
  std::vector<int32_t> prefix = {Bos(model())};
  prefix.insert(prefix.end(), window.tokens.begin(), window.tokens.end());
  prefix.insert(prefix.end(), item.query.begin(), item.query.end());
  auto [sum, mean] = PlainScore(model(), prefix, item.candidates[0]);
  EXPECT_NEAR((*scores)[0][0].sum_logprob, sum, kIdentityTolerance);
}

MANYSHOT_INSTANTIATE_ON_EVERY_BACKEND(IdentitiesTest);

}  // namespace
}  // namespace manyshot::testing

// Running queries against an encoded context: where a query's tokens sit (positions, own bos,
// weights: docs/structured_prompting.md), scoring candidate continuations for a batch of queries
// in shared forward passes, and the next-token distributions generation needs.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/prompting/context_encoder.h"
#include "engine/task/probabilities.h"
#include "engine/task/results.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

// How a query is laid out after the context.
struct QueryPlacement {
  bool own_bos = true;          // structured: [bos, q...]; conventional: [q...]
  int32_t first_position = 0;   // position of q_1
  float own_log_weight = 0.0f;  // ln(factor) on own keys >= 1 (structured)
  int64_t context_from = 1;     // own index from which rows see the context
};

// STRUCTURED / PARALLEL: own bos at 0, q_1 at L, ln(factor) on own non-bos keys.
QueryPlacement StructuredPlacement(int64_t group_length, double factor);
// CONVENTIONAL: no own bos, q_1 right after the window (which holds bos), plain attention.
QueryPlacement ConventionalPlacement(int64_t window_tokens_with_bos);

// The most logits rows (and K/V copies of queries) one continuation pass of ScoreCandidates
// computes: a request with many long labels runs several passes instead of holding a
// vocabulary-sized row for every label token of every input at once.
inline constexpr size_t kMaxScoredRowsPerPass = 256;

// Scores every candidate of every query. One forward pass runs all queries together; then the
// multi-token candidates run, each on a copy of its query's K/V, in passes of at most
// kMaxScoredRowsPerPass continuation tokens.
absl::StatusOr<std::vector<std::vector<CandidateScore>>> ScoreCandidates(
    const Transformer& model, const EncodedContext* context, const QueryPlacement& placement,
    int32_t bos_id, const std::vector<QueryWithCandidates>& items);

// A query (or a partial generation) being extended token by token.
class QueryState {
 public:
  // Runs [bos?, query...]; afterwards next_logprobs() is the distribution after the last token.
  static absl::StatusOr<QueryState> Start(const Transformer& model, const EncodedContext* context,
                                          const QueryPlacement& placement, int32_t bos_id,
                                          const std::vector<int32_t>& query);
  const std::vector<double>& next_logprobs() const { return next_logprobs_; }
  // Appends one token to several states in one forward pass.
  static absl::Status AdvanceAll(std::vector<QueryState*> states,
                                 const std::vector<int32_t>& tokens);
  // A copy with its own K/V (device memory: may fail).
  absl::StatusOr<QueryState> Fork() const;
  int64_t own_tokens() const { return cache_.length(); }

 private:
  const Transformer* model_ = nullptr;
  const EncodedContext* context_ = nullptr;
  QueryPlacement placement_;
  KvCache cache_;
  int32_t next_position_ = 0;
  std::vector<double> next_logprobs_;
};

}  // namespace manyshot

#include "engine/prompting/query_runner.h"

#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

// The per-sequence attention settings of a placement.
void Apply(const QueryPlacement& p, ForwardSequence& seq) {
  seq.own_log_weight = p.own_log_weight;
  seq.weighted_from = p.own_bos ? 1 : 0;
  seq.context_from = p.context_from;
}

const ContextKv* Kv(const EncodedContext* context) { return context ? &context->kv : nullptr; }

}  // namespace

QueryPlacement StructuredPlacement(int64_t group_length, double factor) {
  QueryPlacement p;
  p.own_bos = true;
  p.first_position = static_cast<int32_t>(group_length);
  p.own_log_weight = static_cast<float>(std::log(factor));
  p.context_from = 1;
  return p;
}

QueryPlacement ConventionalPlacement(int64_t window_tokens_with_bos) {
  QueryPlacement p;
  p.own_bos = false;
  p.first_position = static_cast<int32_t>(window_tokens_with_bos);
  p.own_log_weight = 0.0f;
  p.context_from = 0;
  return p;
}

// Log-probability of `token` given a logits row, without materialising the whole distribution.
static double TokenLogProb(const float* logits, int64_t vocab, int32_t token) {
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  return static_cast<double>(logits[token]) - max - std::log(sum);
}

namespace {

// The queries of a ScoreCandidates call as one forward batch: each query's tokens (after its own
// BOS under a structured placement), positions and K/V cache, and the row whose logits score
// every candidate's first token.
struct QueryBatch {
  std::vector<std::vector<int32_t>> tokens, positions;
  std::vector<std::vector<int64_t>> rows;
  std::vector<KvCache> caches;
};

absl::StatusOr<QueryBatch> MakeQueryBatch(const Transformer& model, const QueryPlacement& placement,
                                          int32_t bos_id,
                                          const std::vector<QueryWithCandidates>& items) {
  const size_t n = items.size();
  QueryBatch q;
  q.tokens.resize(n);
  q.positions.resize(n);
  q.rows.resize(n);
  q.caches.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (items[i].query.empty() && !placement.own_bos) {
      return absl::InvalidArgumentError(absl::StrCat("query ", i, " has no tokens"));
    }
    if (placement.own_bos) {
      q.tokens[i].push_back(bos_id);
      q.positions[i].push_back(0);
    }
    for (size_t t = 0; t < items[i].query.size(); ++t) {
      q.tokens[i].push_back(items[i].query[t]);
      q.positions[i].push_back(placement.first_position + static_cast<int32_t>(t));
    }
    q.rows[i] = {static_cast<int64_t>(q.tokens[i].size()) - 1};
    q.caches.push_back(model.NewCache(static_cast<int64_t>(q.tokens[i].size()) + 8));
  }
  return q;
}

absl::Status CheckCandidateTokens(const std::vector<QueryWithCandidates>& items, int64_t vocab) {
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t c = 0; c < items[i].candidates.size(); ++c) {
      const auto& cand = items[i].candidates[c];
      if (cand.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("query ", i, " candidate ", c, " has no tokens"));
      }
      for (int32_t t : cand) {
        if (t < 0 || t >= vocab) {
          return absl::InvalidArgumentError(absl::StrCat("query ", i, " candidate ", c, ": token ",
                                                         t, " outside the vocabulary"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// Adds the log-probabilities of tokens 1.. of the candidates `owners[begin, end)` (item,
// candidate), each run on its own copy of its query's K/V in one forward pass.
absl::Status ScoreCandidateTails(const Transformer& model, const EncodedContext* context,
                                 const QueryPlacement& placement,
                                 const std::vector<QueryWithCandidates>& items,
                                 const QueryBatch& queries,
                                 const std::vector<std::pair<size_t, size_t>>& owners, size_t begin,
                                 size_t end, std::vector<std::vector<CandidateScore>>& scores) {
  const size_t count = end - begin;
  std::vector<KvCache> forks;
  forks.reserve(count);
  std::vector<std::vector<int32_t>> positions(count);
  std::vector<std::vector<int64_t>> rows(count);
  std::vector<ForwardSequence> batch(count);
  for (size_t f = 0; f < count; ++f) {
    const auto [i, c] = owners[begin + f];
    auto fork = queries.caches[i].Clone();
    if (!fork.ok()) return fork.status();
    forks.push_back(*std::move(fork));
    const auto& cand = items[i].candidates[c];
    const int32_t start = queries.positions[i].back() + 1;
    for (size_t t = 0; t + 1 < cand.size(); ++t) {
      positions[f].push_back(start + static_cast<int32_t>(t));
      rows[f].push_back(static_cast<int64_t>(t));
    }
    batch[f] = {absl::Span<const int32_t>(cand).subspan(0, cand.size() - 1), positions[f],
                &forks[f], rows[f]};
    Apply(placement, batch[f]);
  }
  auto logits = model.Forward(batch, Kv(context));
  if (!logits.ok()) return logits.status();
  size_t row = 0;
  for (size_t f = 0; f < count; ++f) {
    const auto [i, c] = owners[begin + f];
    const auto& cand = items[i].candidates[c];
    for (size_t t = 1; t < cand.size(); ++t, ++row) {
      scores[i][c].sum_logprob += TokenLogProb(logits->row(row), logits->vocab_size, cand[t]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::vector<CandidateScore>>> ScoreCandidates(
    const Transformer& model, const EncodedContext* context, const QueryPlacement& placement,
    int32_t bos_id, const std::vector<QueryWithCandidates>& items) {
  auto queries = MakeQueryBatch(model, placement, bos_id, items);
  if (!queries.ok()) return queries.status();
  const size_t n = items.size();
  std::vector<ForwardSequence> batch(n);
  for (size_t i = 0; i < n; ++i) {
    batch[i] = {queries->tokens[i], queries->positions[i], &queries->caches[i], queries->rows[i]};
    Apply(placement, batch[i]);
  }
  auto first = model.Forward(batch, Kv(context));
  if (!first.ok()) return first.status();
  if (auto s = CheckCandidateTokens(items, first->vocab_size); !s.ok()) return s;

  // First tokens from the queries' own rows; the candidates with more tokens continue below.
  std::vector<std::vector<CandidateScore>> scores(n);
  std::vector<std::pair<size_t, size_t>> owners;  // (item, candidate) with more than one token
  for (size_t i = 0; i < n; ++i) {
    scores[i].resize(items[i].candidates.size());
    for (size_t c = 0; c < items[i].candidates.size(); ++c) {
      const auto& cand = items[i].candidates[c];
      scores[i][c].tokens = static_cast<int64_t>(cand.size());
      scores[i][c].sum_logprob = TokenLogProb(first->row(i), first->vocab_size, cand[0]);
      if (cand.size() > 1) owners.push_back({i, c});
    }
  }
  // The continuations in passes of at most kMaxScoredRowsPerPass logits rows (and as many K/V
  // copies), so memory stays bounded however many labels, answer tokens and inputs a request has.
  for (size_t begin = 0; begin < owners.size();) {
    size_t end = begin, rows = 0;
    while (end < owners.size()) {
      const auto [i, c] = owners[end];
      const size_t more = items[i].candidates[c].size() - 1;
      if (end > begin && rows + more > kMaxScoredRowsPerPass) break;
      rows += more;
      ++end;
    }
    if (auto s = ScoreCandidateTails(model, context, placement, items, *queries, owners, begin, end,
                                     scores);
        !s.ok()) {
      return s;
    }
    begin = end;
  }
  for (auto& per_item : scores) {
    for (auto& s : per_item) s.mean_logprob = s.sum_logprob / static_cast<double>(s.tokens);
  }
  return scores;
}

absl::StatusOr<QueryState> QueryState::Start(const Transformer& model,
                                             const EncodedContext* context,
                                             const QueryPlacement& placement, int32_t bos_id,
                                             const std::vector<int32_t>& query) {
  QueryState state;
  state.model_ = &model;
  state.context_ = context;
  state.placement_ = placement;
  std::vector<int32_t> tokens, positions;
  if (placement.own_bos) {
    tokens.push_back(bos_id);
    positions.push_back(0);
  }
  for (size_t t = 0; t < query.size(); ++t) {
    tokens.push_back(query[t]);
    positions.push_back(placement.first_position + static_cast<int32_t>(t));
  }
  if (tokens.empty()) return absl::InvalidArgumentError("the query has no tokens");
  state.next_position_ = positions.back() + 1;
  state.cache_ = model.NewCache(static_cast<int64_t>(tokens.size()) + 32);
  std::vector<int64_t> last = {static_cast<int64_t>(tokens.size()) - 1};
  ForwardSequence seq{tokens, positions, &state.cache_, last};
  Apply(placement, seq);
  auto result = model.Forward({&seq, 1}, Kv(context));
  if (!result.ok()) return result.status();
  state.next_logprobs_ = LogSoftmax(result->row(0), result->vocab_size);
  return state;
}

absl::Status QueryState::AdvanceAll(std::vector<QueryState*> states,
                                    const std::vector<int32_t>& tokens) {
  if (states.empty()) return absl::OkStatus();
  const Transformer& model = *states.front()->model_;
  std::vector<int32_t> positions(states.size());
  std::vector<int64_t> row0 = {0};
  std::vector<ForwardSequence> batch(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    positions[i] = states[i]->next_position_;
    batch[i] = {absl::Span<const int32_t>(&tokens[i], 1),
                absl::Span<const int32_t>(&positions[i], 1), &states[i]->cache_, row0};
    Apply(states[i]->placement_, batch[i]);
  }
  auto result = model.Forward(batch, Kv(states.front()->context_));
  if (!result.ok()) return result.status();
  for (size_t i = 0; i < states.size(); ++i) {
    states[i]->next_logprobs_ = LogSoftmax(result->row(i), result->vocab_size);
    ++states[i]->next_position_;
  }
  return absl::OkStatus();
}

absl::StatusOr<QueryState> QueryState::Fork() const {
  QueryState copy;
  copy.model_ = model_;
  copy.context_ = context_;
  copy.placement_ = placement_;
  auto cache = cache_.Clone();
  if (!cache.ok()) return cache.status();
  copy.cache_ = *std::move(cache);
  copy.next_position_ = next_position_;
  copy.next_logprobs_ = next_logprobs_;
  return copy;
}

}  // namespace manyshot

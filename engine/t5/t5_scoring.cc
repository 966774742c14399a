#include "engine/t5/t5_scoring.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/transformer/forward_input_checks.h"

namespace manyshot {
namespace {

// log softmax(row)[token], in double.
double LogProb(const float* row, int64_t vocab, int32_t token) {
  const float top = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(row[j]) - top);
  return static_cast<double>(row[token]) - top - std::log(sum);
}

}  // namespace

absl::StatusOr<std::vector<T5CandidateScore>> ScoreT5Candidates(
    const T5Model& model, const T5EncoderOutput& encoded, int64_t input,
    absl::Span<const std::vector<int32_t>> candidates) {
  const int64_t inputs[] = {input};
  auto scores = ScoreT5CandidatesForInputs(model, encoded, inputs, candidates);
  if (!scores.ok()) return scores.status();
  return std::move(scores->front());
}

absl::StatusOr<std::vector<std::vector<T5CandidateScore>>> ScoreT5CandidatesForInputs(
    const T5Model& model, const T5EncoderOutput& encoded, absl::Span<const int64_t> inputs,
    absl::Span<const std::vector<int32_t>> candidates) {
  const T5Config& c = model.config();
  std::vector<std::vector<int32_t>> tokens(candidates.size());
  std::vector<std::vector<int64_t>> rows(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    const std::vector<int32_t>& cand = candidates[i];
    if (cand.empty()) return absl::InvalidArgumentError(absl::StrCat("candidate ", i, " is empty"));
    const absl::Status ids_ok = CheckTokenIds(cand, c.vocab_size, absl::StrCat("candidate ", i));
    if (!ids_ok.ok()) return ids_ok;
    tokens[i].push_back(static_cast<int32_t>(c.decoder_start_token_id));
    tokens[i].insert(tokens[i].end(), cand.begin(), cand.end() - 1);
    for (size_t r = 0; r < cand.size(); ++r) rows[i].push_back(static_cast<int64_t>(r));
  }
  // Every (input, candidate) pair is a sequence of a decoder pass, with its own cache; a pass
  // holds at most kMaxT5ScoredRowsPerPass logits rows, so memory stays bounded however many
  // inputs, labels and label tokens a request has.
  std::vector<std::pair<size_t, size_t>> pairs;  // (input index, candidate)
  for (size_t n = 0; n < inputs.size(); ++n) {
    for (size_t i = 0; i < candidates.size(); ++i) pairs.push_back({n, i});
  }
  std::vector<std::vector<T5CandidateScore>> scores(
      inputs.size(), std::vector<T5CandidateScore>(candidates.size()));
  for (size_t begin = 0; begin < pairs.size();) {
    size_t end = begin, rows_in_pass = 0;
    while (end < pairs.size()) {
      const size_t more = candidates[pairs[end].second].size();
      if (end > begin && rows_in_pass + more > kMaxT5ScoredRowsPerPass) break;
      rows_in_pass += more;
      ++end;
    }
    std::vector<KvCache> caches;
    caches.reserve(end - begin);
    std::vector<T5DecoderSequence> batch;
    for (size_t p = begin; p < end; ++p) {
      const auto [n, i] = pairs[p];
      caches.push_back(model.NewDecoderCache(static_cast<int64_t>(candidates[i].size())));
      batch.push_back({tokens[i], &caches.back(), &encoded, inputs[n], rows[i]});
    }
    auto result = model.Decode(batch);
    if (!result.ok()) return result.status();
    size_t row = 0;
    for (size_t p = begin; p < end; ++p) {
      const auto [n, i] = pairs[p];
      for (int32_t token : candidates[i]) {
        scores[n][i].sum_logprob += LogProb(result->row(row++), result->vocab_size, token);
      }
    }
    begin = end;
  }
  for (auto& per_input : scores) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      per_input[i].tokens = static_cast<int64_t>(candidates[i].size());
      per_input[i].mean_logprob =
          per_input[i].sum_logprob / static_cast<double>(per_input[i].tokens);
    }
  }
  return scores;
}

absl::StatusOr<std::vector<T5Generation>> GenerateT5Greedy(const T5Model& model,
                                                           const T5EncoderOutput& encoded,
                                                           int64_t max_new_tokens) {
  if (max_new_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 0, got ", max_new_tokens));
  }
  const T5Config& c = model.config();
  const int64_t n = encoded.inputs();
  std::vector<T5Generation> out(static_cast<size_t>(n));
  std::vector<KvCache> caches;
  std::vector<int32_t> next(static_cast<size_t>(n), static_cast<int32_t>(c.decoder_start_token_id));
  std::vector<bool> done(static_cast<size_t>(n), max_new_tokens == 0);
  for (int64_t i = 0; i < n; ++i) caches.push_back(model.NewDecoderCache(max_new_tokens + 1));
  const std::vector<int64_t> last = {0};
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    std::vector<T5DecoderSequence> batch;
    std::vector<int64_t> which;
    for (int64_t i = 0; i < n; ++i) {
      if (done[i]) continue;
      batch.push_back({absl::Span<const int32_t>(&next[i], 1), &caches[i], &encoded, i, last});
      which.push_back(i);
    }
    if (batch.empty()) break;
    auto result = model.Decode(batch);
    if (!result.ok()) return result.status();
    for (size_t b = 0; b < which.size(); ++b) {
      const float* row = result->row(b);
      const auto token =
          static_cast<int32_t>(std::max_element(row, row + result->vocab_size) - row);
      T5Generation& g = out[which[b]];
      if (token == c.eos_token_id) {
        g.ended_with_eos = true;
        done[which[b]] = true;
        continue;
      }
      g.tokens.push_back(token);
      next[which[b]] = token;
      if (static_cast<int64_t>(g.tokens.size()) == max_new_tokens) done[which[b]] = true;
    }
  }
  return out;
}

}  // namespace manyshot

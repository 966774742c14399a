#include "engine/prompting/generation.h"

#include <algorithm>
#include <cmath>
#include <memory>

namespace manyshot {
namespace {

double Score(double sum, size_t length, double penalty) {
  return sum / std::pow(static_cast<double>(std::max<size_t>(length, 1)), penalty);
}

// The stop string the text now ends with, if any.
std::optional<std::string> EndsWithStop(const GenerationParams& params,
                                        const std::vector<int32_t>& tokens) {
  if (params.stop.empty() || !params.decode) return std::nullopt;
  std::string text = params.decode(tokens);
  for (const auto& s : params.stop) {
    if (!s.empty() && text.size() >= s.size() &&
        text.compare(text.size() - s.size(), s.size(), s) == 0) {
      return s;
    }
  }
  return std::nullopt;
}

absl::Status CheckCancelled(const GenerationParams& params) {
  if (params.cancelled && params.cancelled()) {
    return absl::CancelledError("generation cancelled by the caller");
  }
  return absl::OkStatus();
}

absl::StatusOr<GenerationOutput> Greedy(QueryState state, const GenerationParams& params) {
  GenerationOutput out;
  for (int step = 0; step < params.max_new_tokens; ++step) {
    if (auto s = CheckCancelled(params); !s.ok()) return s;
    const auto& lp = state.next_logprobs();
    const int32_t token = static_cast<int32_t>(std::max_element(lp.begin(), lp.end()) - lp.begin());
    out.sum_logprob += lp[token];
    if (params.eos_id && token == *params.eos_id) {
      out.reason = FinishReason::kEos;
      out.score = Score(out.sum_logprob, out.tokens.size() + 1, params.length_penalty);
      return out;
    }
    out.tokens.push_back(token);
    if (params.on_token) params.on_token(token, lp[token]);
    if (auto stop = EndsWithStop(params, out.tokens)) {
      out.reason = FinishReason::kStopString;
      out.stop_string = *stop;
      break;
    }
    if (step + 1 == params.max_new_tokens) break;
    auto status = QueryState::AdvanceAll({&state}, {token});
    if (!status.ok()) return status;
  }
  out.score = Score(out.sum_logprob, out.tokens.size(), params.length_penalty);
  return out;
}

struct Beam {
  std::vector<int32_t> tokens;
  double sum = 0;
  std::unique_ptr<QueryState> state;
};

absl::StatusOr<GenerationOutput> BeamSearch(QueryState start, const GenerationParams& params) {
  const size_t k = static_cast<size_t>(std::max(1, params.beam_width));
  std::vector<Beam> live;
  live.push_back({{}, 0.0, std::make_unique<QueryState>(std::move(start))});
  std::vector<GenerationOutput> finished;
  for (int step = 0; step < params.max_new_tokens && !live.empty(); ++step) {
    if (auto s = CheckCancelled(params); !s.ok()) return s;
    // The 2k best (beam, token) pairs by sum; ties: lower beam index, then lower token id.
    struct Pair {
      double sum;
      size_t beam;
      int32_t token;
    };
    std::vector<Pair> best;
    const size_t want = 2 * k;
    auto worse = [](const Pair& a, const Pair& b) {  // a ranks after b
      if (a.sum != b.sum) return a.sum < b.sum;
      if (a.beam != b.beam) return a.beam > b.beam;
      return a.token > b.token;
    };
    for (size_t b = 0; b < live.size(); ++b) {
      const auto& lp = live[b].state->next_logprobs();
      for (size_t t = 0; t < lp.size(); ++t) {
        Pair p{live[b].sum + lp[t], b, static_cast<int32_t>(t)};
        if (best.size() < want) {
          best.push_back(p);
          std::push_heap(best.begin(), best.end(),
                         [&](const Pair& x, const Pair& y) { return worse(y, x); });
        } else if (worse(best.front(), p)) {
          std::pop_heap(best.begin(), best.end(),
                        [&](const Pair& x, const Pair& y) { return worse(y, x); });
          best.back() = p;
          std::push_heap(best.begin(), best.end(),
                         [&](const Pair& x, const Pair& y) { return worse(y, x); });
        }
      }
    }
    std::sort(best.begin(), best.end(), [&](const Pair& a, const Pair& b) { return worse(b, a); });

    std::vector<Beam> next;
    std::vector<int32_t> next_tokens;
    for (const Pair& p : best) {
      if (next.size() >= k) break;  // the step ends once k live beams are collected
      std::vector<int32_t> tokens = live[p.beam].tokens;
      if (params.eos_id && p.token == *params.eos_id) {
        GenerationOutput done;
        done.tokens = tokens;
        done.sum_logprob = p.sum;
        done.score = Score(p.sum, tokens.size() + 1, params.length_penalty);
        done.reason = FinishReason::kEos;
        finished.push_back(std::move(done));
        continue;
      }
      tokens.push_back(p.token);
      if (auto stop = EndsWithStop(params, tokens)) {
        GenerationOutput done;
        done.tokens = tokens;
        done.sum_logprob = p.sum;
        done.score = Score(p.sum, tokens.size(), params.length_penalty);
        done.reason = FinishReason::kStopString;
        done.stop_string = *stop;
        finished.push_back(std::move(done));
        continue;
      }
      if (next.size() < k) {
        next.push_back({std::move(tokens), p.sum, nullptr});
        next_tokens.push_back(p.token);
        auto fork = live[p.beam].state->Fork();
        if (!fork.ok()) return fork.status();
        next.back().state = std::make_unique<QueryState>(*std::move(fork));
      }
    }
    live = std::move(next);
    if (finished.size() >= k || live.empty()) break;
    if (step + 1 == params.max_new_tokens) break;
    std::vector<QueryState*> states;
    for (auto& b : live) states.push_back(b.state.get());
    auto status = QueryState::AdvanceAll(states, next_tokens);
    if (!status.ok()) return status;
  }
  // Early stopping: once k hypotheses have finished, the live beams are dropped; otherwise (the
  // token limit) they finish with their scores.
  if (finished.size() >= k) live.clear();
  for (auto& b : live) {
    GenerationOutput done;
    done.tokens = b.tokens;
    done.sum_logprob = b.sum;
    done.score = Score(b.sum, b.tokens.size(), params.length_penalty);
    done.reason = FinishReason::kMaxTokens;
    finished.push_back(std::move(done));
  }
  size_t best_index = 0;
  for (size_t i = 1; i < finished.size(); ++i) {
    if (finished[i].score > finished[best_index].score) best_index = i;
  }
  return finished[best_index];
}

}  // namespace

absl::StatusOr<GenerationOutput> Generate(QueryState start, const GenerationParams& params) {
  if (params.beam_search && params.beam_width > 1) return BeamSearch(std::move(start), params);
  return Greedy(std::move(start), params);
}

}  // namespace manyshot

// The search of docs/structured_prompting.md, "Generation" (greedy decoding and beam search),
// written once over any decoding state, so that the decoder-only models (QueryState,
// engine/prompting/generation.h) and T5's decoder (engine/t5/t5_generation.h) generate with exactly
// the same semantics. Deterministic: ties break toward lower beam index, then lower token id.
//
// A State is a hypothesis being extended token by token:
//   const std::vector<double>& next_logprobs() const;   // natural log, over the vocabulary
//   absl::StatusOr<State> Fork() const;                 // a copy with its own caches
//   static absl::Status AdvanceAll(std::vector<State*> states,
//                                  const std::vector<int32_t>& tokens);  // one token each,
//                                                                        // one forward pass
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/task/generation_params.h"

namespace manyshot {
namespace generation_internal {

// sum / length^penalty, with length at least 1.
double Score(double sum, size_t length, double penalty);
// The stop string the text of `tokens` now ends with, if any.
std::optional<std::string> EndsWithStop(const GenerationParams& params,
                                        const std::vector<int32_t>& tokens);
// CANCELLED when params.cancelled says the caller went away.
absl::Status CheckCancelled(const GenerationParams& params);

template <class State>
absl::StatusOr<GenerationOutput> Greedy(State state, const GenerationParams& params) {
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
    auto status = State::AdvanceAll({&state}, {token});
    if (!status.ok()) return status;
  }
  out.score = Score(out.sum_logprob, out.tokens.size(), params.length_penalty);
  return out;
}

template <class State>
struct Beam {
  std::vector<int32_t> tokens;
  double sum = 0;
  std::unique_ptr<State> state;
};

template <class State>
absl::StatusOr<GenerationOutput> BeamSearch(State start, const GenerationParams& params) {
  const size_t k = static_cast<size_t>(std::max(1, params.beam_width));
  std::vector<Beam<State>> live;
  live.push_back({{}, 0.0, std::make_unique<State>(std::move(start))});
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

    std::vector<Beam<State>> next;
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
        next.back().state = std::make_unique<State>(*std::move(fork));
      }
    }
    live = std::move(next);
    if (finished.size() >= k || live.empty()) break;
    if (step + 1 == params.max_new_tokens) break;
    std::vector<State*> states;
    for (auto& b : live) states.push_back(b.state.get());
    auto status = State::AdvanceAll(states, next_tokens);
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

}  // namespace generation_internal

// Beam search when params.beam_search and beam_width > 1, otherwise greedy decoding, from `start`
// (whose next_logprobs() is the distribution of the first generated token).
template <class State>
absl::StatusOr<GenerationOutput> SearchTokens(State start, const GenerationParams& params) {
  if (params.beam_search && params.beam_width > 1) {
    return generation_internal::BeamSearch(std::move(start), params);
  }
  return generation_internal::Greedy(std::move(start), params);
}

}  // namespace manyshot

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

// One way to extend a live beam: its sum after `token`.
struct BeamExtension {
  double sum;
  size_t beam;
  int32_t token;
};
// The `want` best extensions of the live beams (beam b's sum so far is sums[b], its next-token
// log-probabilities *logprobs[b]), best first; ties: lower beam index, then lower token id.
std::vector<BeamExtension> BestExtensions(const std::vector<double>& sums,
                                          const std::vector<const std::vector<double>*>& logprobs,
                                          size_t want);
// The hypothesis `tokens` (before p.token) finished by p, if p.token is eos or completes a stop
// string; `tokens` then holds the extended hypothesis (as a live beam needs it).
std::optional<GenerationOutput> FinishedBy(const GenerationParams& params,
                                           std::vector<int32_t>& tokens, const BeamExtension& p);
// The highest-scored hypothesis (the first of equals).
GenerationOutput BestScored(std::vector<GenerationOutput> finished);

template <class State>
std::vector<BeamExtension> BestExtensionsOf(const std::vector<Beam<State>>& live, size_t want) {
  std::vector<double> sums;
  std::vector<const std::vector<double>*> logprobs;
  for (const auto& b : live) {
    sums.push_back(b.sum);
    logprobs.push_back(&b.state->next_logprobs());
  }
  return BestExtensions(sums, logprobs, want);
}

// One step: the best extensions in order until k beams live on; those ending in eos or a stop
// string join `finished`, the others fork their beam's state.
template <class State>
absl::StatusOr<std::vector<Beam<State>>> ExtendBeams(const std::vector<Beam<State>>& live, size_t k,
                                                     const GenerationParams& params,
                                                     std::vector<GenerationOutput>& finished) {
  std::vector<Beam<State>> next;
  for (const BeamExtension& p : BestExtensionsOf(live, 2 * k)) {
    if (next.size() >= k) break;  // the step ends once k live beams are collected
    std::vector<int32_t> tokens = live[p.beam].tokens;
    if (auto done = FinishedBy(params, tokens, p)) {
      finished.push_back(*std::move(done));
      continue;
    }
    auto fork = live[p.beam].state->Fork();
    if (!fork.ok()) return fork.status();
    next.push_back({std::move(tokens), p.sum, std::make_unique<State>(*std::move(fork))});
  }
  return next;
}

template <class State>
absl::Status AdvanceBeams(std::vector<Beam<State>>& live) {
  std::vector<State*> states;
  std::vector<int32_t> tokens;
  for (auto& b : live) {
    states.push_back(b.state.get());
    tokens.push_back(b.tokens.back());
  }
  return State::AdvanceAll(states, tokens);
}

template <class State>
absl::StatusOr<GenerationOutput> BeamSearch(State start, const GenerationParams& params) {
  const size_t k = static_cast<size_t>(std::max(1, params.beam_width));
  std::vector<Beam<State>> live;
  live.push_back({{}, 0.0, std::make_unique<State>(std::move(start))});
  std::vector<GenerationOutput> finished;
  for (int step = 0; step < params.max_new_tokens && !live.empty(); ++step) {
    if (auto s = CheckCancelled(params); !s.ok()) return s;
    auto next = ExtendBeams(live, k, params, finished);
    if (!next.ok()) return next.status();
    live = *std::move(next);
    if (finished.size() >= k || live.empty()) break;
    if (step + 1 == params.max_new_tokens) break;
    if (auto s = AdvanceBeams(live); !s.ok()) return s;
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
  return BestScored(std::move(finished));
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

// What serving a T5 model needs on top of T5Model: candidate scoring by the decoder's
// log-probability of each answer given the encoder input (the "direct" method), and greedy
// generation. Both batch their sequences through one decoder pass per step and reuse the encoder
// output's cross-attention K/V; the caller encodes once (T5Model::Encode) and may score and
// generate against the same output.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/t5/t5_model.h"

namespace manyshot {

struct T5CandidateScore {
  double sum_logprob = 0;   // sum over the candidate's tokens of log p(token | input, prefix)
  double mean_logprob = 0;  // sum_logprob / tokens (the classification score)
  int64_t tokens = 0;
};

// The most logits rows (each vocabulary-sized) one scoring pass computes.
inline constexpr size_t kMaxT5ScoredRowsPerPass = 256;

// Scores every candidate (decoder token ids, scored exactly as given: append eos_token_id where
// the label should end there, as T5's tokenizers do for targets) against input `input` of
// `encoded`, in batched decoder passes of at most kMaxT5ScoredRowsPerPass logits rows: the
// decoder reads decoder_start_token_id then the candidate's tokens but its last.
// INVALID_ARGUMENT for an empty candidate or a bad id.
absl::StatusOr<std::vector<T5CandidateScore>> ScoreT5Candidates(
    const T5Model& model, const T5EncoderOutput& encoded, int64_t input,
    absl::Span<const std::vector<int32_t>> candidates);

// The same for several inputs of `encoded` (ENSEMBLE's prompts), every input and candidate batched
// into the same bounded passes: result[j] holds the scores against input inputs[j].
absl::StatusOr<std::vector<std::vector<T5CandidateScore>>> ScoreT5CandidatesForInputs(
    const T5Model& model, const T5EncoderOutput& encoded, absl::Span<const int64_t> inputs,
    absl::Span<const std::vector<int32_t>> candidates);

struct T5Generation {
  std::vector<int32_t> tokens;  // generated ids, without decoder_start_token_id and without eos
  bool ended_with_eos = false;  // false: stopped at max_new_tokens
};

// Greedy decoding for every input of `encoded` at once (one decoder step per generated token for
// all unfinished inputs), up to max_new_tokens each or until eos_token_id.
absl::StatusOr<std::vector<T5Generation>> GenerateT5Greedy(const T5Model& model,
                                                           const T5EncoderOutput& encoded,
                                                           int64_t max_new_tokens);

}  // namespace manyshot

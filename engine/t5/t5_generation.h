// Generation from T5's decoder with the decoder-only models' options and exact semantics
// (GenerationParams; docs/structured_prompting.md, "Generation"): greedy decoding, or beam search
// of width k with a length penalty, eos and stop strings. The search is the decoder-only one
// (engine/task/generation_search.h); only the decoding state is T5's. Every beam of an input
// reads that input's cross-attention K/V from the one encoder output (never copied); each beam owns
// its decoder self-attention cache, copied from its parent's when the beam is extended, so beams
// that share a prefix never write into each other's rows. Each step decodes every live beam in
// one batched decoder pass.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/t5/t5_model.h"
#include "engine/task/generation_params.h"

namespace manyshot {

// The most tokens one T5 generation may produce: a bound on the work of one call (a beam
// search's decoder caches hold up to beam_width * max_new_tokens rows per layer), so that an
// unchecked count is refused rather than run. Servers enforce their own, smaller limits.
inline constexpr int64_t kMaxT5NewTokens = 4096;

// Generates from the decoder for input `input` of `encoded`, starting from
// decoder_start_token_id. T5 ends its targets with eos: callers set params.eos_id to the model's
// eos_token_id (unset: only max_new_tokens and stop strings end the search). The output's tokens
// exclude decoder_start_token_id and eos. INVALID_ARGUMENT for an input outside `encoded`,
// beam search with beam_width < 1, max_new_tokens outside [1, kMaxT5NewTokens], an eos_id outside
// the vocabulary, or stop strings without params.decode; CANCELLED when params.cancelled says so.
absl::StatusOr<GenerationOutput> GenerateT5(const T5Model& model, const T5EncoderOutput& encoded,
                                            int64_t input, const GenerationParams& params);

}  // namespace manyshot

// What a generation request asks for and what it produces, whatever the model under it; the
// search that honours them is generation_search.h.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace manyshot {

class Tokenizer;

enum class FinishReason : uint8_t { kEos = 0, kStopString = 1, kMaxTokens = 2 };

struct GenerationParams {
  bool beam_search = false;
  int beam_width = 3;
  double length_penalty = 0.6;
  int max_new_tokens = 30;
  // max_new_tokens is a default, not the caller's ask: a task lowers it to the room its input
  // leaves for an answer instead of refusing the request.
  bool shorten_to_room = false;
  std::optional<int32_t> eos_id;  // stop at eos when set
  std::vector<std::string> stop;  // stop strings (need `decode`)
  // Token ids -> text, for stop strings and streaming. Required when `stop` is non-empty.
  std::function<std::string(const std::vector<int32_t>&)> decode;
  // Greedy only: called with each token as it is chosen (and its log-prob).
  std::function<void(int32_t, double)> on_token;
  // Checked before every decoding step: true stops the search with CANCELLED (the caller went
  // away), so an abandoned generation stops consuming compute.
  std::function<bool()> cancelled;
};

struct GenerationOutput {
  std::vector<int32_t> tokens;  // without eos; stop strings are cut by the caller from the text
  double sum_logprob = 0;       // includes the eos token's log-prob when it ended the search
  double score = 0;             // sum_logprob / length^length_penalty
  FinishReason reason = FinishReason::kMaxTokens;
  std::string stop_string;             // the stop string that ended it, if any
  int64_t truncated_input_tokens = 0;  // removed from the input to fit max_query_tokens
};

// Sets params.decode, when unset, to `tokenizer`'s Decode (a sequence it cannot decode reads as
// ""): the text stop strings are matched against. `tokenizer` must outlive the search.
void DecodeStopStringsWith(const Tokenizer& tokenizer, GenerationParams& params);

}  // namespace manyshot

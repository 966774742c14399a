#include "engine/t5/t5_generation.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "engine/task/generation_search.h"
#include "engine/task/probabilities.h"

namespace manyshot {
namespace {

// One hypothesis of T5's decoder: its self-attention cache (every token read so far, starting
// with decoder_start_token_id) and the distribution of its next token. The encoder output is
// borrowed: every state of an input reads the same cross-attention K/V.
class T5DecoderState {
 public:
  static absl::StatusOr<T5DecoderState> Start(const T5Model& model, const T5EncoderOutput& encoded,
                                              int64_t input, int64_t capacity) {
    T5DecoderState state;
    state.model_ = &model;
    state.encoded_ = &encoded;
    state.input_ = input;
    state.cache_ = model.NewDecoderCache(capacity);
    const auto start = static_cast<int32_t>(model.config().decoder_start_token_id);
    auto status = AdvanceAll({&state}, {start});
    if (!status.ok()) return status;
    return state;
  }

  const std::vector<double>& next_logprobs() const { return next_logprobs_; }

  absl::StatusOr<T5DecoderState> Fork() const {
    T5DecoderState copy;
    copy.model_ = model_;
    copy.encoded_ = encoded_;
    copy.input_ = input_;
    auto cache = cache_.Clone();
    if (!cache.ok()) return cache.status();
    copy.cache_ = *std::move(cache);
    copy.next_logprobs_ = next_logprobs_;
    return copy;
  }

  // Appends tokens[i] to states[i] (all of one model), in one decoder pass.
  static absl::Status AdvanceAll(std::vector<T5DecoderState*> states,
                                 const std::vector<int32_t>& tokens) {
    static constexpr int64_t kOnlyRow[] = {0};
    std::vector<T5DecoderSequence> batch;
    batch.reserve(states.size());
    for (size_t i = 0; i < states.size(); ++i) {
      T5DecoderState& s = *states[i];
      batch.push_back(
          {absl::Span<const int32_t>(&tokens[i], 1), &s.cache_, s.encoded_, s.input_, kOnlyRow});
    }
    auto result = states.front()->model_->Decode(batch);
    if (!result.ok()) return result.status();
    for (size_t i = 0; i < states.size(); ++i) {
      states[i]->next_logprobs_ = LogSoftmax(result->row(i), result->vocab_size);
    }
    return absl::OkStatus();
  }

 private:
  T5DecoderState() = default;

  const T5Model* model_ = nullptr;
  const T5EncoderOutput* encoded_ = nullptr;
  int64_t input_ = 0;
  KvCache cache_;
  std::vector<double> next_logprobs_;
};

absl::Status CheckParams(const T5Model& model, const T5EncoderOutput& encoded, int64_t input,
                         const GenerationParams& params) {
  if (input < 0 || input >= encoded.inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", input, " is not one of the encoder output's ", encoded.inputs(), " inputs"));
  }
  if (params.beam_search && params.beam_width < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("beam_width must be at least 1, got ", params.beam_width));
  }
  if (params.max_new_tokens < 1 || params.max_new_tokens > kMaxT5NewTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_new_tokens must be between 1 and ", kMaxT5NewTokens, ", got ", params.max_new_tokens));
  }
  const int64_t vocab = model.config().vocab_size;
  if (params.eos_id && (*params.eos_id < 0 || *params.eos_id >= vocab)) {
    return absl::InvalidArgumentError(
        absl::StrCat("eos_id ", *params.eos_id, " is outside the vocabulary [0, ", vocab, ")"));
  }
  if (!params.stop.empty() && !params.decode) {
    return absl::InvalidArgumentError("stop strings need a decode function (token ids -> text)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationOutput> GenerateT5(const T5Model& model, const T5EncoderOutput& encoded,
                                            int64_t input, const GenerationParams& params) {
  if (auto status = CheckParams(model, encoded, input, params); !status.ok()) return status;
  if (auto status = generation_internal::CheckCancelled(params); !status.ok()) return status;
  // Rows a hypothesis can reach: decoder_start_token_id and all generated tokens but the last.
  auto start = T5DecoderState::Start(model, encoded, input, params.max_new_tokens);
  if (!start.ok()) return start.status();
  return SearchTokens(*std::move(start), params);
}

}  // namespace manyshot

// The room a task reserves after its context for a query and its answer, when its options leave
// it at 0: derived from the model's context length, so a long-context model takes long inputs
// without any option, and a short one keeps most of its window for demonstrations.
#pragma once

#include <algorithm>
#include <cstdint>

namespace manyshot {

// A quarter of the context, from 128 to 4096 tokens.
inline int64_t DefaultQueryRoom(int64_t context_length) {
  return std::clamp<int64_t>(context_length / 4, 128, 4096);
}

// A sixteenth of the context, from 32 to 256 tokens.
inline int64_t DefaultAnswerRoom(int64_t context_length) {
  return std::clamp<int64_t>(context_length / 16, 32, 256);
}

// Encoder-decoder models have relative positions and no window: the length their encoder was
// trained on stands in for one.
inline constexpr int64_t kEncoderDecoderNominalContext = 512;

// What Generate produces when a request does not say: at most this many tokens, fewer where
// the input leaves less room.
inline constexpr int kDefaultMaxNewTokens = 30;

}  // namespace manyshot

// Checks of what a caller hands a forward pass (token ids, the rows it wants logits of), shared by
// the decoder-only Transformer and T5Model so that both refuse bad input in the same words.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace manyshot {

// INVALID_ARGUMENT naming the first id outside [0, vocab_size):
// "<what> token <i>: id <id> is outside the vocabulary [0, <vocab_size>)" ("token <i>: ..." when
// `what` is empty); OK when every id is inside.
absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int64_t vocab_size,
                           absl::string_view what);

// INVALID_ARGUMENT naming the first row that is not one of a sequence's `tokens` positions
// [0, tokens): "<what>: logit row <r> is not one of its tokens".
absl::Status CheckLogitRows(absl::Span<const int64_t> rows, int64_t tokens, absl::string_view what);

}  // namespace manyshot

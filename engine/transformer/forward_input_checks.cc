// See forward_input_checks.h.
#include "engine/transformer/forward_input_checks.h"

#include "absl/strings/str_cat.h"

namespace manyshot {

absl::Status CheckTokenIds(absl::Span<const int32_t> ids, int64_t vocab_size,
                           absl::string_view what) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, what.empty() ? "" : " ", "token ", i, ": id ", ids[i],
                       " is outside the vocabulary [0, ", vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLogitRows(absl::Span<const int64_t> rows, int64_t tokens,
                            absl::string_view what) {
  for (int64_t r : rows) {
    if (r < 0 || r >= tokens) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": logit row ", r, " is not one of its tokens"));
    }
  }
  return absl::OkStatus();
}

}  // namespace manyshot

// Fitting a too-long query input into the room its task reserves, when the task or the request
// asks for it: the input's longest value is cut at a UTF-8 character boundary, keeping its start
// or its end, until the rendered input fits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/task/example.h"

namespace manyshot {

enum class InputTruncation : uint8_t {
  kNone = 0,       // a too-long input is INVALID_ARGUMENT
  kKeepStart = 1,  // drop the end of the input's longest value
  kKeepEnd = 2,    // drop the start of the input's longest value
};

// Tokens of the rendered input, or an error no cut can fix (a missing field, say).
using InputTokenCount = std::function<absl::StatusOr<int64_t>(const Example&)>;

struct TruncatedInput {
  Example input;
  int64_t tokens = 0;  // of the rendered input after the cut
  std::string value;   // what was cut: "text" or a field's name
};

// `input` with one value cut so that `count` is at most `max_tokens`: the longest value whose
// removal alone would make it fit, cut as little as a binary search over its character
// boundaries finds. `how` is kKeepStart or kKeepEnd. INVALID_ARGUMENT when no single value's
// removal makes the input fit (the template and the other values alone are too long).
absl::StatusOr<TruncatedInput> TruncateInput(const Example& input, InputTruncation how,
                                             int64_t max_tokens, const InputTokenCount& count);

// A query input rendered and tokenized (as its task feeds it to the model), cut to fit when its
// truncation allows.
struct RenderedQuery {
  std::vector<int32_t> tokens;
  std::string text;
  int64_t truncated_tokens = 0;  // the rendered input's tokens that the cut removed
};
using RenderQueryFn = std::function<absl::StatusOr<RenderedQuery>(const Example&)>;

// `render(input)` when it has at most `max_tokens` tokens; else, under kNone, INVALID_ARGUMENT
// ("the rendered input has N tokens, more than max_query_tokens M"), and otherwise `render` of
// the input that TruncateInput cut.
absl::StatusOr<RenderedQuery> FitQuery(const Example& input, InputTruncation how,
                                       int64_t max_tokens, const RenderQueryFn& render);

// "none", "keep_start", "keep_end".
const char* InputTruncationName(InputTruncation how);

}  // namespace manyshot

#include "engine/task/input_truncation.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

// One value of an input: its text or one of its fields.
struct ValueRef {
  bool is_text;
  std::string field;  // when !is_text
  size_t bytes;
};

std::string& ValueOf(Example& e, const ValueRef& ref) {
  return ref.is_text ? e.text : e.fields[ref.field];
}

// The input's non-empty values, longest first.
std::vector<ValueRef> ValuesLongestFirst(const Example& input) {
  std::vector<ValueRef> values;
  if (!input.text.empty()) values.push_back({true, "", input.text.size()});
  for (const auto& [name, value] : input.fields) {
    if (!value.empty()) values.push_back({false, name, value.size()});
  }
  std::stable_sort(values.begin(), values.end(),
                   [](const ValueRef& a, const ValueRef& b) { return a.bytes > b.bytes; });
  return values;
}

// Byte offsets at which a UTF-8 character starts, then the end: a cut at one of them never
// splits a character.
std::vector<size_t> CharacterBoundaries(const std::string& s) {
  std::vector<size_t> boundaries;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) boundaries.push_back(i);
  }
  boundaries.push_back(s.size());
  return boundaries;
}

// `value` keeping `chars` of its characters from the start or from the end.
std::string Keep(const std::string& value, const std::vector<size_t>& boundaries, size_t chars,
                 InputTruncation how) {
  const size_t total = boundaries.size() - 1;
  if (how == InputTruncation::kKeepStart) return value.substr(0, boundaries[chars]);
  return value.substr(boundaries[total - chars]);
}

// The input with `ref` cut to the most characters that fit; `count` must fit with none of them.
absl::StatusOr<TruncatedInput> CutValue(const Example& input, const ValueRef& ref,
                                        InputTruncation how, int64_t max_tokens,
                                        const InputTokenCount& count, int64_t tokens_when_empty) {
  Example trial = input;
  const std::string value = ValueOf(trial, ref);
  const std::vector<size_t> boundaries = CharacterBoundaries(value);
  // fits(lo) and !fits(hi): the whole input is too long, the input without this value is not.
  size_t lo = 0;
  size_t hi = boundaries.size() - 1;
  int64_t lo_tokens = tokens_when_empty;
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    ValueOf(trial, ref) = Keep(value, boundaries, mid, how);
    auto tokens = count(trial);
    if (!tokens.ok()) return tokens.status();
    if (*tokens <= max_tokens) {
      lo = mid;
      lo_tokens = *tokens;
    } else {
      hi = mid;
    }
  }
  ValueOf(trial, ref) = Keep(value, boundaries, lo, how);
  return TruncatedInput{std::move(trial), lo_tokens, ref.is_text ? "text" : ref.field};
}

}  // namespace

absl::StatusOr<TruncatedInput> TruncateInput(const Example& input, InputTruncation how,
                                             int64_t max_tokens, const InputTokenCount& count) {
  if (how == InputTruncation::kNone) {
    return absl::InvalidArgumentError("TruncateInput needs keep_start or keep_end");
  }
  for (const ValueRef& ref : ValuesLongestFirst(input)) {
    Example without = input;
    ValueOf(without, ref).clear();
    auto tokens = count(without);
    if (!tokens.ok()) return tokens.status();
    if (*tokens <= max_tokens) return CutValue(input, ref, how, max_tokens, count, *tokens);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the rendered input cannot be truncated to max_query_tokens ", max_tokens,
                   ": even with any one of its values empty it has more tokens"));
}

absl::StatusOr<RenderedQuery> FitQuery(const Example& input, InputTruncation how,
                                       int64_t max_tokens, const RenderQueryFn& render) {
  auto query = render(input);
  if (!query.ok()) return query.status();
  const int64_t tokens = static_cast<int64_t>(query->tokens.size());
  if (tokens <= max_tokens) return query;
  if (how == InputTruncation::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the rendered input has ", tokens, " tokens, more than max_query_tokens ", max_tokens));
  }
  const auto count = [&render](const Example& e) -> absl::StatusOr<int64_t> {
    auto q = render(e);
    if (!q.ok()) return q.status();
    return static_cast<int64_t>(q->tokens.size());
  };
  auto cut = TruncateInput(input, how, max_tokens, count);
  if (!cut.ok()) return cut.status();
  query = render(cut->input);
  if (!query.ok()) return query.status();
  query->truncated_tokens = tokens - static_cast<int64_t>(query->tokens.size());
  return query;
}

const char* InputTruncationName(InputTruncation how) {
  switch (how) {
    case InputTruncation::kNone:
      return "none";
    case InputTruncation::kKeepStart:
      return "keep_start";
    case InputTruncation::kKeepEnd:
      return "keep_end";
  }
  return "?";
}

}  // namespace manyshot

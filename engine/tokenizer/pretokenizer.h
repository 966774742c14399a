// The split regexes of byte-level BPE tokenizers, matched by hand.
//
// std::regex is slow and has no \p{L}/\p{N}; each supported pattern is instead a small
// hand-written matcher that follows the regex's leftmost-alternative, greedy, backtracking
// semantics exactly (tests compare it against the JS regex of gpt-3-encoder).
#ifndef MANYSHOT_ENGINE_TOKENIZER_PRETOKENIZER_H_
#define MANYSHOT_ENGINE_TOKENIZER_PRETOKENIZER_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot {

enum class SplitPattern {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3 with \p{N} instead of \p{N}{1,3}.
  kQwen2,
};

// Recognizes the Split pre-tokenizer regexes we implement (as written in tokenizer.json);
// Unimplemented naming the pattern otherwise.
absl::StatusOr<SplitPattern> SplitPatternFromRegex(std::string_view regex);

// A piece of the input, as byte offsets [begin, end).
using Piece = std::pair<uint32_t, uint32_t>;

// Splits valid UTF-8 text into pieces that cover it exactly, in order. Clears pieces first.
void SplitText(SplitPattern pattern, std::string_view text, std::vector<Piece>& pieces);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_PRETOKENIZER_H_

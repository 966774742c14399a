// SentencePiece's text normalization before segmentation (sentencepiece's normalizer.cc,
// Normalizer::Normalize), as Unigram models such as T5's need it: the precompiled rules (longest
// match first; user-defined pieces are exempt and pass through unchanged), then optional removal
// of leading, trailing and repeated spaces, a dummy "▁" prefix, and spaces escaped as "▁".
#ifndef MANYSHOT_ENGINE_TOKENIZER_SENTENCEPIECE_NORMALIZER_H_
#define MANYSHOT_ENGINE_TOKENIZER_SENTENCEPIECE_NORMALIZER_H_

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/precompiled_charsmap.h"

namespace manyshot {

inline constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";  // "▁"

struct SentencePieceNormalizerSpec {
  std::optional<PrecompiledCharsmap> rules;  // none: identity
  bool add_dummy_prefix = true;
  // The dummy prefix only where the text begins the input, not after an added token (Hugging
  // Face's Metaspace prepend_scheme "first").
  bool dummy_prefix_at_start_only = false;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  // Every Unicode White_Space character counts as a space (after the rules). tokenizer.json's
  // WhitespaceSplit pre-tokenizer splits on all of them, where SentencePiece folds only what its
  // rules map to " ".
  bool unicode_whitespace_is_space = false;
  // Pieces the rules must not touch (sentencepiece's user-defined symbols).
  std::vector<std::string> verbatim_pieces;
};

class SentencePieceNormalizer {
 public:
  explicit SentencePieceNormalizer(SentencePieceNormalizerSpec spec);

  // `text` must be valid UTF-8 (Tokenizer::Encode checks it first). `at_start`: the text begins
  // the input (not a stretch after an added token), which matters for dummy_prefix_at_start_only.
  std::string Normalize(std::string_view text, bool at_start = true) const;

  const SentencePieceNormalizerSpec& spec() const { return spec_; }

 private:
  // The normalized form of the longest prefix of (non-empty) text that has one, and its length in
  // text.
  std::pair<std::string_view, size_t> NormalizePrefix(std::string_view text) const;

  SentencePieceNormalizerSpec spec_;
  // Indices into spec_.verbatim_pieces by first byte, longest first: the first that matches is
  // the longest match.
  std::array<std::vector<size_t>, 256> verbatim_by_first_byte_;
};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_SENTENCEPIECE_NORMALIZER_H_

// SentencePiece's precompiled normalization rules (normalizer_spec.precompiled_charsmap, and
// tokenizer.json's "Precompiled" normalizer, which holds the same bytes in base64): a darts-clone
// double-array trie over the UTF-8 of every source string, whose values point into a blob of
// NUL-terminated replacement strings. T5's nmt_nfkc rules (NFKC plus whitespace and control
// character folding) come this way, so they are read and applied as data, not reimplemented.
//
// Blob layout (normalizer.cc, DecodePrecompiledCharsMap): a little-endian uint32 trie size in
// bytes, the trie (32-bit units), then the replacement strings. Every trie access is bounds
// checked, so a corrupt blob can make a rule miss but never read outside the blob.
#ifndef MANYSHOT_ENGINE_TOKENIZER_PRECOMPILED_CHARSMAP_H_
#define MANYSHOT_ENGINE_TOKENIZER_PRECOMPILED_CHARSMAP_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot {

class PrecompiledCharsmap {
 public:
  // The rule's replacement and how many input bytes it consumes.
  struct Match {
    std::string_view replacement;
    size_t consumed;
  };

  // `source` names the file in errors (InvalidArgument).
  static absl::StatusOr<PrecompiledCharsmap> Parse(std::string_view blob, std::string_view source);

  // The longest rule whose source string is a prefix of `text`, as sentencepiece's
  // Normalizer::NormalizePrefix picks it; nullopt when none is.
  std::optional<Match> LongestPrefixMatch(std::string_view text) const;

 private:
  std::vector<uint32_t> units_;
  std::string replacements_;  // NUL-terminated strings; the last byte is a NUL
};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_PRECOMPILED_CHARSMAP_H_

#include "engine/tokenizer/precompiled_charsmap.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/text_util.h"

namespace manyshot {
namespace {

// darts-clone's DoubleArrayUnit: one 32-bit word per node. The child for byte c of the node at
// position p is at p ^ offset(p) ^ c, and belongs to p when its label is c; a node with a leaf
// keeps its value in the unit at p ^ offset(p).
bool HasLeaf(uint32_t unit) { return ((unit >> 8) & 1) != 0; }
uint32_t Value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t Label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t Offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

absl::Status Bad(std::string_view source, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      ToAbsl(source), ": precompiled_charsmap (normalization rules) is corrupt: ", ToAbsl(what)));
}

}  // namespace

absl::StatusOr<PrecompiledCharsmap> PrecompiledCharsmap::Parse(std::string_view blob,
                                                               std::string_view source) {
  if (blob.size() <= 4) return Bad(source, "shorter than its 4-byte header");
  const auto* b = reinterpret_cast<const unsigned char*>(blob.data());
  const uint32_t trie_bytes = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
                              static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
  blob.remove_prefix(4);
  if (trie_bytes >= blob.size()) {
    return Bad(source, absl::StrCat("the trie size ", trie_bytes,
                                    " leaves no replacement strings in ", blob.size(), " bytes"));
  }
  if (trie_bytes == 0 || trie_bytes % 4 != 0) {
    return Bad(source,
               absl::StrCat("the trie size ", trie_bytes, " is not a positive multiple of 4"));
  }
  PrecompiledCharsmap map;
  map.units_.resize(trie_bytes / 4);
  for (size_t i = 0; i < map.units_.size(); ++i) {
    const auto* u = reinterpret_cast<const unsigned char*>(blob.data()) + 4 * i;
    map.units_[i] = static_cast<uint32_t>(u[0]) | static_cast<uint32_t>(u[1]) << 8 |
                    static_cast<uint32_t>(u[2]) << 16 | static_cast<uint32_t>(u[3]) << 24;
  }
  map.replacements_ = std::string(blob.substr(trie_bytes));
  if (map.replacements_.back() != '\0') {
    return Bad(source, "the replacement strings do not end with a NUL");
  }
  return map;
}

std::optional<PrecompiledCharsmap::Match> PrecompiledCharsmap::LongestPrefixMatch(
    std::string_view text) const {
  // darts-clone's commonPrefixSearch from the root, keeping the last (longest) hit.
  std::optional<Match> best;
  size_t pos = Offset(units_[0]);
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    pos ^= c;
    if (pos >= units_.size()) break;
    const uint32_t unit = units_[pos];
    if (Label(unit) != c) break;
    pos ^= Offset(unit);
    if (pos >= units_.size()) break;
    if (HasLeaf(unit)) {
      const uint32_t value = Value(units_[pos]);
      if (value < replacements_.size()) {
        // Parse() guarantees a NUL at the end, so strlen stays inside the blob.
        const char* s = replacements_.data() + value;
        best = Match{std::string_view(s, std::strlen(s)), i + 1};
      }
    }
  }
  return best;
}

}  // namespace manyshot

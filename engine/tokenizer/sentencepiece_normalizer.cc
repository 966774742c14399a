#include "engine/tokenizer/sentencepiece_normalizer.h"

#include <algorithm>

#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

// Unicode's White_Space property (what Rust's char::is_whitespace, and so Hugging Face's
// WhitespaceSplit, tests), as the UTF-8 length of the character at text's start or 0.
size_t UnicodeSpaceLength(std::string_view text) {
  size_t pos = 0;
  const uint32_t cp = DecodeUtf8(text, pos);
  const bool space = (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 ||
                     cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
                     cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
  return space ? pos : 0;
}

}  // namespace

SentencePieceNormalizer::SentencePieceNormalizer(SentencePieceNormalizerSpec spec)
    : spec_(std::move(spec)) {
  const auto& pieces = spec_.verbatim_pieces;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].empty()) continue;
    verbatim_by_first_byte_[static_cast<unsigned char>(pieces[i][0])].push_back(i);
  }
  for (auto& bucket : verbatim_by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](size_t a, size_t b) { return pieces[a].size() > pieces[b].size(); });
  }
}

std::pair<std::string_view, size_t> SentencePieceNormalizer::NormalizePrefix(
    std::string_view text) const {
  // User-defined pieces first, longest match, untouched.
  for (const size_t i : verbatim_by_first_byte_[static_cast<unsigned char>(text[0])]) {
    const std::string& p = spec_.verbatim_pieces[i];
    if (text.starts_with(p)) return {text.substr(0, p.size()), p.size()};
  }
  if (spec_.rules.has_value()) {
    if (auto match = spec_.rules->LongestPrefixMatch(text)) {
      if (spec_.unicode_whitespace_is_space && match->replacement.size() > 0 &&
          UnicodeSpaceLength(match->replacement) == match->replacement.size()) {
        return {" ", match->consumed};
      }
      return {match->replacement, match->consumed};
    }
  }
  size_t length = Utf8SequenceLength(text, 0);
  if (length == 0) length = 1;  // unreachable for validated input; never loop forever
  if (spec_.unicode_whitespace_is_space && UnicodeSpaceLength(text.substr(0, length)) > 0) {
    return {" ", length};
  }
  return {text.substr(0, length), length};
}

std::string SentencePieceNormalizer::Normalize(std::string_view text, bool at_start) const {
  std::string out;
  if (spec_.remove_extra_whitespaces) {
    while (!text.empty()) {
      const auto [normalized, consumed] = NormalizePrefix(text);
      if (normalized != " ") break;
      text.remove_prefix(consumed);
    }
  }
  if (text.empty()) return out;
  out.reserve(text.size() * 3 / 2 + 4);
  const std::string_view space = spec_.escape_whitespaces ? kSentencePieceSpace : " ";
  if (spec_.add_dummy_prefix && (at_start || !spec_.dummy_prefix_at_start_only)) out.append(space);
  bool previous_was_space = spec_.remove_extra_whitespaces;
  while (!text.empty()) {
    auto [normalized, consumed] = NormalizePrefix(text);
    text.remove_prefix(consumed);
    if (previous_was_space) {
      while (normalized.starts_with(' ')) normalized.remove_prefix(1);
    }
    if (!normalized.empty()) {
      for (const char c : normalized) {
        if (c == ' ') {
          out.append(space);
        } else {
          out.push_back(c);
        }
      }
      previous_was_space = normalized.ends_with(' ');
    }
    if (!spec_.remove_extra_whitespaces) previous_was_space = false;
  }
  if (spec_.remove_extra_whitespaces) {
    while (out.ends_with(space)) out.resize(out.size() - space.size());
  }
  return out;
}

}  // namespace manyshot

#include "engine/tokenizer/added_tokens.h"

#include <algorithm>

#include "engine/tokenizer/unicode_tables.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

// Start of the code point that ends just before pos (text is valid UTF-8).
size_t PrevCharStart(std::string_view text, size_t pos) {
  size_t p = pos - 1;
  while (p > 0 && (static_cast<uint8_t>(text[p]) & 0xC0) == 0x80) --p;
  return p;
}

bool IsWordChar(uint32_t cp) { return cp == '_' || IsLetter(cp) || IsNumber(cp); }

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens)
    : tokens_(std::move(tokens)), by_first_byte_(256) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].content.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(tokens_[i].content[0])].push_back(i);
  }
  for (auto& list : by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return tokens_[a].content.size() > tokens_[b].content.size();
    });
  }
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Segment>& out) const {
  out.clear();
  size_t text_begin = 0;  // start of the pending plain-text run
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (size_t idx : candidates) {
      const AddedToken& t = tokens_[idx];
      if (text.compare(pos, t.content.size(), t.content) != 0) continue;
      if (t.single_word) {
        size_t after = pos + t.content.size();
        if (pos > 0) {
          size_t p = PrevCharStart(text, pos);
          if (IsWordChar(DecodeUtf8(text, p))) continue;
        }
        if (after < text.size() && IsWordChar(DecodeUtf8(text, after))) continue;
      }
      hit = &t;
      break;
    }
    if (hit == nullptr) {
      // Advance by one whole character so a match never starts inside a character.
      const size_t len = Utf8SequenceLength(text, pos);
      pos += len == 0 ? 1 : len;
      continue;
    }
    size_t begin = pos;
    size_t end = pos + hit->content.size();
    if (hit->lstrip) {
      while (begin > text_begin) {
        size_t p = PrevCharStart(text, begin);
        size_t q = p;
        if (!IsWhitespace(DecodeUtf8(text, q))) break;
        begin = p;
      }
    }
    if (hit->rstrip) {
      while (end < text.size()) {
        size_t q = end;
        if (!IsWhitespace(DecodeUtf8(text, q))) break;
        end = q;
      }
    }
    if (begin > text_begin) out.push_back({text_begin, begin, -1});
    out.push_back({begin, end, hit->id});
    pos = text_begin = end;
  }
  if (text_begin < text.size()) out.push_back({text_begin, text.size(), -1});
}

}  // namespace manyshot

#include "engine/tokenizer/pretokenizer.h"

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/unicode_tables.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// One decoded character: its code point and byte offset. The matcher works on these so that it
// can look ahead and backtrack by characters.
struct Char {
  uint32_t cp;
  uint32_t offset;
};

class Matcher {
 public:
  Matcher(const std::vector<Char>& chars, SplitPattern pattern)
      : c_(chars), n_(chars.size()), pattern_(pattern) {}

  // Length in characters of the match starting at i (always >= 1 for i < n).
  size_t MatchAt(size_t i) const {
    if (size_t len = Contraction(i)) return len;
    if (pattern_ == SplitPattern::kGpt2) {
      if (size_t len = OptSpaceThen(i, [](uint32_t cp) { return IsLetter(cp); })) return len;
      if (size_t len = OptSpaceThen(i, [](uint32_t cp) { return IsNumber(cp); })) return len;
      if (size_t len = OptSpaceThen(i, IsOther)) return len;
    } else {
      // [^\r\n\p{L}\p{N}]?\p{L}+
      size_t j = i;
      if (!IsLetter(cp(j)) && !IsNewline(cp(j)) && !IsNumber(cp(j)) && j < n_) ++j;
      if (j < n_ && IsLetter(cp(j))) return Run(j, IsLetterFn) - i;
      // \p{N}{1,3} or \p{N}
      if (IsNumber(cp(i))) {
        const size_t max = pattern_ == SplitPattern::kLlama3 ? 3 : 1;
        size_t k = i;
        while (k < n_ && k - i < max && IsNumber(cp(k))) ++k;
        return k - i;
      }
      // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
      if (size_t len = OptSpaceThen(i, IsOther)) {
        return Run(i + len, [](uint32_t c) { return IsNewline(c); }) - i;
      }
      // \s*[\r\n]+ : the whitespace run, backtracked to end just after its last \r or \n.
      const size_t end = Run(i, IsWhitespaceFn);
      for (size_t k = end; k > i; --k) {
        if (IsNewline(cp(k - 1))) return k - i;
      }
    }
    // \s+(?!\S) then \s+ : a whitespace run followed by non-space gives up its last character
    // (which then prefixes the next word), unless that would leave it empty.
    const size_t end = Run(i, IsWhitespaceFn);
    if (end > i) {
      if (end == n_ || end - i == 1) return end - i;
      return end - 1 - i;
    }
    return 1;  // Unreachable for these patterns (every character is \s, L, N or other).
  }

 private:
  static bool IsNewline(uint32_t cp) { return cp == '\r' || cp == '\n'; }
  static bool IsOther(uint32_t cp) { return !IsWhitespace(cp) && !IsLetter(cp) && !IsNumber(cp); }
  static bool IsLetterFn(uint32_t cp) { return IsLetter(cp); }
  static bool IsWhitespaceFn(uint32_t cp) { return IsWhitespace(cp); }

  // Code point at i, or a sentinel that is in no class past the end.
  uint32_t cp(size_t i) const { return i < n_ ? c_[i].cp : 0xFFFFFFFF; }

  template <typename Pred>
  size_t Run(size_t i, Pred pred) const {
    while (i < n_ && pred(c_[i].cp)) ++i;
    return i;
  }

  // ' ?X+' : length of the match at i, 0 if none.
  template <typename Pred>
  size_t OptSpaceThen(size_t i, Pred pred) const {
    size_t j = i;
    if (cp(j) == ' ') ++j;
    if (j >= n_ || !pred(c_[j].cp)) return 0;
    return Run(j, pred) - i;
  }

  // 's|'t|'re|'ve|'m|'ll|'d, case-insensitive for the Llama-3 / Qwen2 patterns.
  size_t Contraction(size_t i) const {
    if (cp(i) != '\'') return 0;
    const bool fold = pattern_ != SplitPattern::kGpt2;
    const auto is = [&](size_t k, char lower) {
      uint32_t c = cp(k);
      if (fold && c < 0x80 && c >= 'A' && c <= 'Z') c += 'a' - 'A';
      // Unicode simple case folding maps U+017F LATIN SMALL LETTER LONG S to 's'.
      if (fold && c == 0x17F) c = 's';
      return c == static_cast<uint32_t>(lower);
    };
    if (is(i + 1, 's') || is(i + 1, 't') || is(i + 1, 'm') || is(i + 1, 'd')) return 2;
    if ((is(i + 1, 'r') || is(i + 1, 'v')) && is(i + 2, 'e')) return 3;
    if (is(i + 1, 'l') && is(i + 2, 'l')) return 3;
    return 0;
  }

  const std::vector<Char>& c_;
  const size_t n_;
  const SplitPattern pattern_;
};

}  // namespace

absl::StatusOr<SplitPattern> SplitPatternFromRegex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  if (regex == kQwen2Regex) return SplitPattern::kQwen2;
  return absl::UnimplementedError(
      absl::StrCat("unsupported Split pre-tokenizer regex: ", ToAbsl(regex),
                   " (supported: the GPT-2, Llama-3 and Qwen2 patterns)"));
}

void SplitText(SplitPattern pattern, std::string_view text, std::vector<Piece>& pieces) {
  pieces.clear();
  // thread_local: reused across calls, so splitting allocates nothing in steady state.
  thread_local std::vector<Char> chars;
  chars.clear();
  size_t pos = 0;
  while (pos < text.size()) {
    const auto offset = static_cast<uint32_t>(pos);
    chars.push_back({DecodeUtf8(text, pos), offset});
  }
  const Matcher matcher(chars, pattern);
  size_t i = 0;
  while (i < chars.size()) {
    const size_t len = matcher.MatchAt(i);
    const size_t next = i + len;
    const uint32_t end =
        next < chars.size() ? chars[next].offset : static_cast<uint32_t>(text.size());
    pieces.emplace_back(chars[i].offset, end);
    i = next;
  }
}

}  // namespace manyshot

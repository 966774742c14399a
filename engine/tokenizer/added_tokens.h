// Added tokens (special tokens such as <|endoftext|>, <s>, and user-added ones): the input is
// split on them before anything else, as Hugging Face's AddedVocabulary does.
#ifndef MANYSHOT_ENGINE_TOKENIZER_ADDED_TOKENS_H_
#define MANYSHOT_ENGINE_TOKENIZER_ADDED_TOKENS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace manyshot {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;       // the match swallows whitespace on its left
  bool rstrip = false;       // ... and on its right
  bool single_word = false;  // matches only when not inside a word
};

// A run of the input: plain text (id < 0) or one added token.
struct Segment {
  size_t begin;
  size_t end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Splits valid UTF-8 text into text and added-token segments (leftmost, then longest match).
  // Matching is on the raw text for all tokens; for the normalizers we support (prepend "▁",
  // replace " " by "▁") that finds the same tokens as matching normalized text would, unless an
  // added token itself contains a space or "▁".
  void Split(std::string_view text, std::vector<Segment>& out) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  // For each first byte, indices into tokens_ sorted by decreasing content length.
  std::vector<std::vector<size_t>> by_first_byte_;
};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_ADDED_TOKENS_H_

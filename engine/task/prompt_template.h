// Prompt templates: text with {name} placeholders ("{{" and "}}" are literal braces).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot {

// `text` in double quotes for an error message, cut at a UTF-8 boundary after at most
// `max_bytes` with its full size noted: messages (and the error details that repeat them) never
// carry unbounded user text.
std::string QuoteForMessage(std::string_view text, size_t max_bytes = 48);

class PromptTemplate {
 public:
  // Parses `text`; an unbalanced brace or an empty/invalid placeholder name is INVALID_ARGUMENT
  // naming the offset. `what` names the template in messages ("input_template").
  static absl::StatusOr<PromptTemplate> Parse(const std::string& text, const std::string& what);

  // Placeholder names in order of first appearance.
  const std::vector<std::string>& placeholders() const { return placeholders_; }

  // Fills the placeholders: `fields[name]`, or `text` when the template has exactly one
  // placeholder and `fields` lacks it. A missing value is INVALID_ARGUMENT naming the placeholder.
  // A result longer than `max_bytes` is INVALID_ARGUMENT, found before anything is built: a
  // template may repeat a placeholder thousands of times, and rendering and tokenizing that for
  // every query is work a request must not be able to cause.
  absl::StatusOr<std::string> Render(const std::string& text,
                                     const std::map<std::string, std::string>& fields,
                                     size_t max_bytes = SIZE_MAX) const;

 private:
  struct Piece {
    bool placeholder;
    std::string value;  // literal text or placeholder name
  };
  // The value of a placeholder piece, or nullptr when there is none (an error for Render).
  const std::string* ValueOf(const Piece& piece, const std::string& text,
                             const std::map<std::string, std::string>& fields) const;
  std::string what_;
  std::vector<Piece> pieces_;
  std::vector<std::string> placeholders_;
};

}  // namespace manyshot

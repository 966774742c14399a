// Prompt templates: text with {name} placeholders ("{{" and "}}" are literal braces).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot {

class PromptTemplate {
 public:
  // Parses `text`; an unbalanced brace or an empty/invalid placeholder name is INVALID_ARGUMENT
  // naming the offset. `what` names the template in messages ("input_template").
  static absl::StatusOr<PromptTemplate> Parse(const std::string& text, const std::string& what);

  // Placeholder names in order of first appearance.
  const std::vector<std::string>& placeholders() const { return placeholders_; }

  // Fills the placeholders: `fields[name]`, or `text` when the template has exactly one
  // placeholder and `fields` lacks it. A missing value is INVALID_ARGUMENT naming the placeholder.
  absl::StatusOr<std::string> Render(const std::string& text,
                                     const std::map<std::string, std::string>& fields) const;

 private:
  struct Piece {
    bool placeholder;
    std::string value;  // literal text or placeholder name
  };
  std::string what_;
  std::vector<Piece> pieces_;
  std::vector<std::string> placeholders_;
};

}  // namespace manyshot

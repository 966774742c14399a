#include "engine/task/prompt_template.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace manyshot {

std::string QuoteForMessage(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::StrCat("\"", std::string(text), "\"");
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat("\"", std::string(text.substr(0, cut)), "...\" (", text.size(), " bytes)");
}

namespace {

bool ValidNameChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
}

}  // namespace

absl::StatusOr<PromptTemplate> PromptTemplate::Parse(const std::string& text,
                                                     const std::string& what) {
  PromptTemplate t;
  t.what_ = what;
  std::string literal;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      literal.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      literal.push_back('}');
      ++i;
    } else if (c == '{') {
      size_t close = text.find('}', i + 1);
      if (close == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": '{' at offset ", i,
                                                       " has no closing '}' (write '{{' for a "
                                                       "literal brace)"));
      }
      std::string name = text.substr(i + 1, close - i - 1);
      if (name.empty() || !std::all_of(name.begin(), name.end(), ValidNameChar)) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": placeholder '{", name, "}' at offset ", i,
            " is not a name (letters, digits, '_', '-', '.'); write '{{' for a literal brace"));
      }
      if (!literal.empty()) t.pieces_.push_back({false, std::move(literal)});
      literal.clear();
      t.pieces_.push_back({true, name});
      if (std::find(t.placeholders_.begin(), t.placeholders_.end(), name) ==
          t.placeholders_.end()) {
        t.placeholders_.push_back(name);
      }
      i = close;
    } else if (c == '}') {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": '}' at offset ", i, " closes nothing (write '}}' for a literal brace)"));
    } else {
      literal.push_back(c);
    }
  }
  if (!literal.empty()) t.pieces_.push_back({false, std::move(literal)});
  return t;
}

const std::string* PromptTemplate::ValueOf(const Piece& piece, const std::string& text,
                                           const std::map<std::string, std::string>& fields) const {
  auto it = fields.find(piece.value);
  if (it != fields.end()) return &it->second;
  return placeholders_.size() == 1 ? &text : nullptr;
}

absl::StatusOr<std::string> PromptTemplate::Render(const std::string& text,
                                                   const std::map<std::string, std::string>& fields,
                                                   size_t max_bytes) const {
  size_t size = 0, substitutions = 0;
  for (const Piece& piece : pieces_) {
    if (!piece.placeholder) {
      size += piece.value.size();
      continue;
    }
    const std::string* value = ValueOf(piece, text, fields);
    if (value == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(what_, " needs a value for placeholder {",
                                                     piece.value, "}: set fields[\"", piece.value,
                                                     "\"]"));
    }
    size += value->size();
    ++substitutions;
  }
  if (size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what_, " filled with this input would have ", size, " bytes (", substitutions,
        " substitutions), more than the limit of ", max_bytes, " bytes (--max_input_bytes)"));
  }
  std::string out;
  out.reserve(size);
  for (const Piece& piece : pieces_)
    out += piece.placeholder ? *ValueOf(piece, text, fields) : piece.value;
  return out;
}

}  // namespace manyshot

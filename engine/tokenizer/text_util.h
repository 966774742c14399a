// Small string helpers. This abseil build has its own absl::string_view class (not an alias of
// std::string_view), so std::string_view arguments to absl::StrCat & co. need ToAbsl().
#ifndef MANYSHOT_ENGINE_TOKENIZER_TEXT_UTIL_H_
#define MANYSHOT_ENGINE_TOKENIZER_TEXT_UTIL_H_

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

namespace manyshot {

inline absl::string_view ToAbsl(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// Replaces every non-overlapping occurrence of `from` (non-empty), left to right.
inline std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos || from.empty()) break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_TEXT_UTIL_H_

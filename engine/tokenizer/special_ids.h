// Resolving bos/eos names to ids, with the conventional names as fallback.
#ifndef MANYSHOT_ENGINE_TOKENIZER_SPECIAL_IDS_H_
#define MANYSHOT_ENGINE_TOKENIZER_SPECIAL_IDS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace manyshot {

using TokenLookup = std::function<std::optional<int32_t>(std::string_view)>;

// The configured name's id when the config names one (nullopt when it says null or the name is
// unknown), else the id of the first default name the vocabulary has.
inline std::optional<int32_t> ResolveSpecialId(
    const std::optional<std::optional<std::string>>& configured, const TokenLookup& lookup,
    std::span<const std::string_view> defaults) {
  if (configured.has_value()) {
    if (!configured->has_value()) return std::nullopt;
    return lookup(**configured);
  }
  for (std::string_view name : defaults) {
    if (auto id = lookup(name)) return id;
  }
  return std::nullopt;
}

inline constexpr std::array<std::string_view, 4> kDefaultBosNames = {"<s>", "<|begin_of_text|>",
                                                                     "<|endoftext|>", "<bos>"};
inline constexpr std::array<std::string_view, 4> kDefaultEosNames = {"</s>", "<|end_of_text|>",
                                                                     "<|endoftext|>", "<eos>"};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_SPECIAL_IDS_H_

// bos/eos names from tokenizer_config.json / special_tokens_map.json.
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/text_util.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

// "bos_token": "<s>" | {"content": "<s>", ...} | null. Absent -> unset optional.
absl::StatusOr<std::optional<std::optional<std::string>>> ReadName(const nlohmann::json& config,
                                                                   const char* key,
                                                                   std::string_view source) {
  const auto it = config.find(key);
  if (it == config.end()) return std::optional<std::optional<std::string>>();
  if (it->is_null()) return std::optional<std::optional<std::string>>(std::optional<std::string>());
  if (it->is_string()) return std::optional<std::optional<std::string>>(it->get<std::string>());
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) {
      return std::optional<std::optional<std::string>>(content->get<std::string>());
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(source), ": ", key, " must be a string, {\"content\": string} or null"));
}

}  // namespace

absl::StatusOr<SpecialTokenNames> ParseSpecialTokenNames(std::string_view json_text,
                                                         std::string_view source) {
  const auto config = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source), ": not a JSON object"));
  }
  SpecialTokenNames names;
  auto bos = ReadName(config, "bos_token", source);
  if (!bos.ok()) return bos.status();
  auto eos = ReadName(config, "eos_token", source);
  if (!eos.ok()) return eos.status();
  names.bos = *bos;
  names.eos = *eos;
  return names;
}

}  // namespace manyshot

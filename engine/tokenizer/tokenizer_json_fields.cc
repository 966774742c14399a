// See tokenizer_json_fields.h.
#include "engine/tokenizer/tokenizer_json_fields.h"

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/text_util.h"

namespace manyshot::tokenizer_json {

absl::Status Bad(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(ToAbsl(kFile), ": ", ToAbsl(what)));
}

absl::Status Unsupported(std::string_view what) {
  return absl::UnimplementedError(absl::StrCat(ToAbsl(kFile), ": unsupported ", ToAbsl(what)));
}

std::string TypeOf(const nlohmann::json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool BoolOr(const nlohmann::json& j, const char* key, bool fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

}  // namespace manyshot::tokenizer_json

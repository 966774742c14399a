// Reading tokenizer.json's objects, shared by its two readers (tokenizer_json.cc for BPE models,
// tokenizer_json_unigram.cc for Unigram models) so that both word their errors alike.
#ifndef MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_JSON_FIELDS_H_
#define MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_JSON_FIELDS_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace manyshot::tokenizer_json {

inline constexpr std::string_view kFile = "tokenizer.json";

// INVALID_ARGUMENT "tokenizer.json: <what>": the file is malformed.
absl::Status Bad(std::string_view what);

// UNIMPLEMENTED "tokenizer.json: unsupported <what>": a well-formed piece we do not implement.
absl::Status Unsupported(std::string_view what);

// The "type" string of a step or model object; "" when it has none (or `j` is not an object).
std::string TypeOf(const nlohmann::json& j);

// j[key] when it is a boolean; `fallback` when it is absent or not a boolean.
bool BoolOr(const nlohmann::json& j, const char* key, bool fallback);

}  // namespace manyshot::tokenizer_json

#endif  // MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_JSON_FIELDS_H_

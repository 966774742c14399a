// The per-format loaders behind LoadTokenizer. Each takes file contents already read, so tests
// can feed them arbitrary bytes; `source` names the file in error messages.
#ifndef MANYSHOT_ENGINE_TOKENIZER_LOADERS_H_
#define MANYSHOT_ENGINE_TOKENIZER_LOADERS_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot {

// bos/eos as named by tokenizer_config.json / special_tokens_map.json. A set optional holding
// nullopt means the config names no such token explicitly (e.g. "bos_token": null).
struct SpecialTokenNames {
  std::optional<std::optional<std::string>> bos;
  std::optional<std::optional<std::string>> eos;
};

// Reads bos_token / eos_token from the JSON text of tokenizer_config.json or
// special_tokens_map.json (string or {"content": ...}); malformed files are an error.
absl::StatusOr<SpecialTokenNames> ParseSpecialTokenNames(std::string_view json_text,
                                                         std::string_view source);

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(std::string_view json_text,
                                                             const SpecialTokenNames& names,
                                                             std::string fingerprint);

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2VocabMerges(std::string_view vocab_json,
                                                               std::string_view merges_txt,
                                                               const SpecialTokenNames& names,
                                                               std::string fingerprint);

// `source`: the file's name in errors (T5 ships the same format as spiece.model).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceModel(
    std::string_view model_proto, const SpecialTokenNames& names, std::string fingerprint,
    std::string_view source = "tokenizer.model");

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_LOADERS_H_

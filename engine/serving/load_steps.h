// The steps every architecture's loader shares: errors that name the directory, the tokenizer,
// and the warning when the tokenizer has more ids than the model's vocabulary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot {

// `status` with "loading the model in DIR: " in front.
absl::Status ModelLoadError(const std::filesystem::path& dir, const absl::Status& status);

// The tokenizer in `dir`; errors say "loading the tokenizer in DIR: ...".
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerIn(const std::filesystem::path& dir);

// Empty when every tokenizer id is inside the model's vocabulary; otherwise what goes wrong.
std::string VocabularyWarning(const Tokenizer& tokenizer, int64_t model_vocab_size);

}  // namespace manyshot

#include "engine/serving/load_steps.h"

#include "absl/strings/str_cat.h"

namespace manyshot {

absl::Status ModelLoadError(const std::filesystem::path& dir, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("loading the model in ", dir.string(), ": ", status.message()));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerIn(const std::filesystem::path& dir) {
  auto tokenizer = LoadTokenizer(dir);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("loading the tokenizer in ", dir.string(), ": ",
                                     tokenizer.status().message()));
  }
  return tokenizer;
}

std::string VocabularyWarning(const Tokenizer& tokenizer, int64_t model_vocab_size) {
  if (tokenizer.vocab_size() <= model_vocab_size) return "";
  return absl::StrCat("the tokenizer has ", tokenizer.vocab_size(),
                      " ids but the model's vocabulary is ", model_vocab_size,
                      ": ids past it will be rejected");
}

}  // namespace manyshot

// tokenizer.json with a Unigram model (as Hugging Face writes T5's) -> UnigramTokenizer; called
// by LoadTokenizerJson for "model": {"type": "Unigram"}.
#ifndef MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_JSON_UNIGRAM_H_
#define MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_JSON_UNIGRAM_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace manyshot {

// May throw nlohmann::json::exception on shapes it does not check; LoadTokenizerJson turns those
// into InvalidArgument.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadUnigramTokenizerJson(const nlohmann::json& root,
                                                                    const SpecialTokenNames& names,
                                                                    std::string fingerprint);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_TOKENIZER_JSON_UNIGRAM_H_

// What every tokenizer fuzz target does with a tokenizer its loader accepted: a garbage file that
// loads must still give a tokenizer whose methods keep their contracts (tokenizer.h) on any text.
#pragma once

#include <string_view>

#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot::fuzz {

// Encodes a few fixed texts and `text`, decodes the ids, looks tokens up; Fail()s on a broken
// contract (an id out of range, a decode that fails or is not valid UTF-8, ...).
void ExerciseTokenizer(const Tokenizer& tokenizer, std::string_view text);

// Parses `config` (tokenizer_config.json text) for bos/eos names when it is valid, else none.
SpecialTokenNames NamesFrom(std::string_view config);

}  // namespace manyshot::fuzz

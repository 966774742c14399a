// Fuzzes tokenizer.json loading. Input: tokenizer.json, then optionally a NUL byte and text to
// encode, then optionally another NUL byte and tokenizer_config.json (bos/eos names).
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace manyshot;
  auto [json, rest] = fuzz::SplitAtNul({reinterpret_cast<const char*>(data), size});
  auto [text, config] = fuzz::SplitAtNul(rest);
  auto tokenizer = LoadTokenizerJson(json, fuzz::NamesFrom(config), "fuzz");
  fuzz::Report(tokenizer.status());
  if (tokenizer.ok()) fuzz::ExerciseTokenizer(**tokenizer, text);
  return 0;
}

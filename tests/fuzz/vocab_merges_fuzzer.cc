// Fuzzes GPT-2 style vocab.json + merges.txt loading. Input: vocab.json, a NUL byte, merges.txt,
// then optionally another NUL byte and text to encode.
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace manyshot;
  auto [vocab, rest] = fuzz::SplitAtNul({reinterpret_cast<const char*>(data), size});
  auto [merges, text] = fuzz::SplitAtNul(rest);
  auto tokenizer = LoadGpt2VocabMerges(vocab, merges, {}, "fuzz");
  fuzz::Report(tokenizer.status());
  if (tokenizer.ok()) fuzz::ExerciseTokenizer(**tokenizer, text);
  return 0;
}

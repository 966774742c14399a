// Fuzzes SentencePiece tokenizer.model loading (our own protobuf reader). The input is the whole
// model proto (binary, so no separator); the text encoded is the last 32 bytes of the input, which
// mutations reach as easily as the rest.
#include <algorithm>
#include <string>

#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/tokenizer_exercise.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace manyshot;
  std::string_view proto(reinterpret_cast<const char*>(data), size);
  auto tokenizer = LoadSentencePieceModel(proto, {}, "fuzz");
  fuzz::Report(tokenizer.status());
  if (tokenizer.ok()) {
    fuzz::ExerciseTokenizer(**tokenizer, proto.substr(size - std::min<size_t>(size, 32)));
  }
  return 0;
}

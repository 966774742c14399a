// Fuzz-style robustness of the tokenizer.model reader (also run under ASan + UBSan in
// fuzz_asan_tests): truncated, bit-flipped, spliced and random inputs give a model or an
// InvalidArgument naming the file, never a crash or an out-of-bounds read.
#include <random>
#include <string>

#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

bool StartsWith(const absl::Status& s, std::string_view prefix) {
  return std::string(s.message()).starts_with(prefix);
}

void CheckRead(std::string_view bytes, int& ok, int& errors) {
  auto proto = ReadSentencePieceModel(bytes, "tokenizer.model");
  if (proto.ok()) {
    ++ok;
    return;
  }
  ++errors;
  ASSERT_EQ(proto.status().code(), absl::StatusCode::kInvalidArgument) << proto.status();
  ASSERT_TRUE(StartsWith(proto.status(), "tokenizer.model: ")) << proto.status();
}

TEST(SentencePieceModelFuzzTest, MutatedModelsNeverCrashTheReader) {
  const std::string original = ReadFileOrDie(LlamaModelPath());
  ASSERT_FALSE(original.empty());
  std::mt19937 rng(7);
  int ok = 0, errors = 0;
  for (int i = 0; i < 600; ++i) {
    std::string m = original;
    switch (i % 3) {
      case 0:  // truncate, often near the start where the nesting is
        m.resize(rng() % (i % 2 ? m.size() : 4096));
        break;
      case 1:  // flip bytes
        for (int k = 0; k < 1 + i % 8; ++k) m[rng() % m.size()] = static_cast<char>(rng());
        break;
      case 2: {  // splice in random bytes
        const size_t at = rng() % m.size();
        std::string junk(1 + rng() % 32, '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        m.replace(at, std::min(junk.size(), m.size() - at), junk);
        break;
      }
    }
    CheckRead(m, ok, errors);
  }
  std::printf("[fuzz tokenizer.model reader] %d read, %d rejected\n", ok, errors);
  EXPECT_GT(errors, 0);
}

TEST(SentencePieceModelFuzzTest, RandomBytesNeverCrashTheReaderOrTheLoader) {
  std::mt19937 rng(8);
  int ok = 0, errors = 0;
  // Plausible-looking wire format: tags of the fields the reader knows, with random payloads.
  const uint8_t tags[] = {0x0A, 0x12, 0x1A, 0x2A, 0x08, 0x15, 0x18, 0x09, 0x0B, 0xA8, 0x02};
  for (int i = 0; i < 5000; ++i) {
    std::string s(rng() % 48, '\0');
    for (size_t k = 0; k < s.size(); ++k) {
      s[k] = static_cast<char>(rng() % 3 == 0 ? tags[rng() % sizeof(tags)]
                                              : rng() % (i % 2 ? 16 : 256));
    }
    CheckRead(s, ok, errors);
    auto tok = LoadSentencePieceModel(s, {}, "0");
    if (tok.ok()) (void)(*tok)->Encode("hello world");
  }
  std::printf("[fuzz tokenizer.model random] %d read, %d rejected\n", ok, errors);
}

}  // namespace
}  // namespace manyshot::tokenizer_test

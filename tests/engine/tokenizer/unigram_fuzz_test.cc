// Fuzz-style robustness of the Unigram path (also run under ASan + UBSan in fuzz_asan_tests):
// spiece.model files whose precompiled normalization rules (a double-array trie with offsets into
// a string table) or pieces are corrupted load as a tokenizer or fail with InvalidArgument, and a
// tokenizer that loads encodes and decodes any text without crashing or reading out of bounds.
#include <random>
#include <string>

#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

const char* const kTexts[] = {"Hello world",
                              "\xEF\xAC\x81ne \xEF\xBC\xA1 \xE2\x91\xA0\tx",
                              "  a  b  ",
                              "http://x",
                              "\xF0\x9F\x98\x80\xE4\xBD\xA0\xE5\xA5\xBD",
                              "</s><unk>",
                              ""};

void Exercise(const Tokenizer& tok) {
  for (const char* text : kTexts) {
    auto ids = tok.Encode(text);
    ASSERT_TRUE(ids.ok()) << ids.status();
    for (const int32_t id : *ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << id;
    auto back = tok.Decode(*ids);
    ASSERT_TRUE(back.ok()) << back.status();
  }
}

TEST(UnigramFuzzTest, CorruptedModelsNeverCrash) {
  auto model =
      TrainT5StyleUnigramModel(SharedDir(), fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work",
                               /*byte_fallback=*/true);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::string original = ReadFileOrDie(*model);
  auto proto = ReadSentencePieceModel(original, "spiece.model");
  ASSERT_TRUE(proto.ok()) << proto.status();
  // Where the rules lie in the file: bytes changed there keep every protobuf length valid, so
  // the corruption reaches the rules' reader instead of stopping at the wire format.
  const std::string& rules = proto->normalizer.precompiled_charsmap;
  ASSERT_GT(rules.size(), 1000u);
  const size_t rules_at = original.find(rules);
  ASSERT_NE(rules_at, std::string::npos);
  std::mt19937 rng(11);
  int loaded = 0, rejected = 0;
  for (int i = 0; i < 120; ++i) {
    std::string m = original;
    switch (i % 4) {
      case 0:  // the rules' header, trie units (offsets, labels, values) and string table
        for (int k = 0; k < 1 + i % 16; ++k) {
          m[rules_at + rng() % rules.size()] = static_cast<char>(rng());
        }
        break;
      case 1:  // the trie units only, many of them
        for (int k = 0; k < 1 + i % 64; ++k) {
          m[rules_at + 4 + rng() % (rules.size() / 2)] = static_cast<char>(rng());
        }
        break;
      case 2:  // the first 4 bytes: the trie's size
        m[rules_at + rng() % 4] = static_cast<char>(rng());
        break;
      case 3:  // anywhere in the file (pieces, scores, types, specs)
        for (int k = 0; k < 1 + i % 8; ++k) m[rng() % m.size()] = static_cast<char>(rng());
        break;
    }
    auto tok = LoadSentencePieceModel(m, {}, "0");
    if (!tok.ok()) {
      ++rejected;
      ASSERT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << tok.status();
      continue;
    }
    ++loaded;
    Exercise(**tok);
  }
  std::printf("[fuzz unigram spiece.model] %d loaded, %d rejected\n", loaded, rejected);
  EXPECT_GT(loaded, 0);
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace manyshot::tokenizer_test

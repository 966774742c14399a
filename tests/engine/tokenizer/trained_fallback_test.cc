// The fallback Llama-style model (used when ../shared is absent) works and is deterministic,
// and our tokenizer.json conversion of it matches libsentencepiece: tested here even when the
// real Llama-2 model is present, so a fresh machine runs nothing untested.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/tokenizer/sp_processor.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

TEST(TrainedFallbackTest, TrainsDeterministicallyAndMatchesLibsentencepiece) {
  const fs::path no_shared = ScratchDir() / "no_shared";
  auto a = FindOrTrainLlamaTokenizerModel(no_shared, ScratchDir() / "train_a");
  auto b = FindOrTrainLlamaTokenizerModel(no_shared, ScratchDir() / "train_b");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(ReadFileOrDie(*a), ReadFileOrDie(*b));
  // A second call reuses the trained model.
  auto again = FindOrTrainLlamaTokenizerModel(no_shared, ScratchDir() / "train_a");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);

  const fs::path json_dir = ScratchDir() / "trained_json";
  const std::string cmd = "/usr/bin/python3 " +
                          Quote(ToolsDir() / "sp_model_to_tokenizer_json.py") + " " + Quote(*a) +
                          " " + Quote(json_dir) + " --merges-as-strings";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  auto tok = LoadTokenizer(json_dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "bpe-sentencepiece");
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_TRUE((*tok)->space_id().has_value());

  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromFile(a->string()), "");
  int compared = 0, mismatches = 0;
  std::vector<int> want;
  for (const std::string& line : ReadLines(SentencesFile())) {
    if (line.find("<s>") != std::string::npos) continue;
    ASSERT_EQ(sp.Encode(line, want), "");
    auto got = (*tok)->Encode(line);
    ASSERT_TRUE(got.ok());
    ++compared;
    if (*got != std::vector<int32_t>(want.begin(), want.end()) && ++mismatches <= 5) {
      ADD_FAILURE() << line;
    }
    ASSERT_EQ(*(*tok)->Decode(*got), line);
  }
  std::printf("[trained fallback parity] %d lines compared, %d mismatches\n", compared, mismatches);
  EXPECT_EQ(mismatches, 0);
}

}  // namespace
}  // namespace manyshot::tokenizer_test

// Gemma's tokenizer layout: a directory holding a tokenizer.model with Gemma's trainer settings
// (no dummy prefix, byte fallback, its special ids and turn markers) loads through manyshot's own
// reader (no libsentencepiece in the server) and encodes as libsentencepiece does.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/tokenizer/sp_processor.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

TEST(GemmaLayoutTest, TokenizerModelMatchesLibsentencepiece) {
  auto model = TrainGemmaStyleBpeModel(ScratchDir(), SentencesFile());
  ASSERT_TRUE(model.ok()) << model.status();
  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromFile(model->string()), "");
  const Tokenizer& tok = Cached(model->parent_path());
  EXPECT_EQ(tok.kind(), "sentencepiece-model");
  int compared = 0, mismatches = 0;
  std::vector<int> want;
  std::vector<std::string> lines = ReadLines(SentencesFile());
  // No dummy prefix: a leading space is a piece of its own, and runs of spaces are kept.
  lines.push_back(" leading space");
  lines.push_back("two  spaces   and three");
  lines.push_back("<start_of_turn>user\nhello<end_of_turn>");
  for (const std::string& line : lines) {
    // Control pieces spelled out in text are tokens to manyshot, text to libsentencepiece.
    bool special = false;
    for (const char* piece : {"<pad>", "<eos>", "<bos>", "<unk>"}) {
      special = special || line.find(piece) != std::string::npos;
    }
    if (special) continue;
    auto got = tok.Encode(line);
    ASSERT_TRUE(got.ok()) << line;
    ASSERT_EQ(sp.Encode(line, want), "");
    ++compared;
    if (std::vector<int32_t>(want.begin(), want.end()) != *got && ++mismatches <= 5) {
      ADD_FAILURE() << "line: " << line;
    }
  }
  std::printf("[gemma layout] %d lines compared, %d mismatches\n", compared, mismatches);
  EXPECT_EQ(mismatches, 0);
  // Gemma's ids: the turn marker is one piece.
  auto marker = tok.Encode("<start_of_turn>");
  ASSERT_TRUE(marker.ok());
  ASSERT_EQ(marker->size(), 1u);
}

}  // namespace
}  // namespace manyshot::tokenizer_test

// Gemma's tokenizer layouts: a directory holding a tokenizer.model with Gemma's trainer settings
// (no dummy prefix, byte fallback, its special ids and turn markers) loads through manyshot's own
// reader (no libsentencepiece in the server) and encodes as libsentencepiece does; and so does the
// same model as Hugging Face's tokenizer.json in Gemma's layout (normalizer Replace(" " -> "▁"),
// no pre-tokenizer, BPE with byte_fallback, <start_of_turn> style added tokens).
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/tokenizer/sp_processor.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

// Sample lines: the parity sentences, whitespace runs and a leading space (no dummy prefix),
// the turn markers, bytes outside the vocabulary (byte fallback), digits. Lines that spell out a
// control piece are left out: a token to manyshot, text to libsentencepiece.
std::vector<std::string> SampleLines() {
  std::vector<std::string> lines = ReadLines(SentencesFile());
  lines.push_back(" leading space");
  lines.push_back("two  spaces   and three");
  lines.push_back("<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n");
  lines.push_back("emoji \xF0\x9F\x98\x80 and \xE2\x82\xAC 12345 tabs\tand\nnewlines");
  std::vector<std::string> kept;
  for (const std::string& line : lines) {
    bool control = false;
    for (const char* piece : {"<pad>", "<eos>", "<bos>", "<unk>"}) {
      control = control || line.find(piece) != std::string::npos;
    }
    if (!control) kept.push_back(line);
  }
  return kept;
}

// How many of `lines` `tok` encodes otherwise than libsentencepiece (the first 5 reported).
int Mismatches(const Tokenizer& tok, const SpProcessor& sp, const std::vector<std::string>& lines) {
  int mismatches = 0;
  std::vector<int> want;
  for (const std::string& line : lines) {
    auto got = tok.Encode(line);
    EXPECT_TRUE(got.ok()) << line;
    EXPECT_EQ(sp.Encode(line, want), "");
    if (!got.ok() || std::vector<int32_t>(want.begin(), want.end()) != *got) {
      if (++mismatches <= 5) ADD_FAILURE() << "line: " << line;
    }
  }
  return mismatches;
}

TEST(GemmaLayoutTest, TokenizerModelMatchesLibsentencepiece) {
  auto model = TrainGemmaStyleBpeModel(ScratchDir(), SentencesFile());
  ASSERT_TRUE(model.ok()) << model.status();
  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromFile(model->string()), "");
  const Tokenizer& tok = Cached(model->parent_path());
  EXPECT_EQ(tok.kind(), "sentencepiece-model");
  const std::vector<std::string> lines = SampleLines();
  const int mismatches = Mismatches(tok, sp, lines);
  std::printf("[gemma layout] %zu lines compared, %d mismatches\n", lines.size(), mismatches);
  EXPECT_EQ(mismatches, 0);
  // Gemma's ids: the turn marker is one piece.
  auto marker = tok.Encode("<start_of_turn>");
  ASSERT_TRUE(marker.ok());
  ASSERT_EQ(marker->size(), 1u);
}

TEST(GemmaLayoutTest, TokenizerJsonInGemmasLayoutMatchesLibsentencepiece) {
  auto model = TrainGemmaStyleBpeModel(ScratchDir(), SentencesFile());
  ASSERT_TRUE(model.ok()) << model.status();
  const fs::path dir = ScratchDir() / "gemma_json";
  const std::string cmd = "/usr/bin/python3 " +
                          Quote(ToolsDir() / "sp_model_to_tokenizer_json.py") + " " +
                          Quote(*model) + " " + Quote(dir) + " --gemma";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  // The file is in Gemma's layout, not the Llama one the converter writes by default.
  const nlohmann::json file = nlohmann::json::parse(std::ifstream(dir / "tokenizer.json"));
  EXPECT_EQ(file["normalizer"]["type"], "Replace");
  EXPECT_EQ(file["normalizer"]["content"], "\xE2\x96\x81");
  EXPECT_TRUE(file["pre_tokenizer"].is_null());
  EXPECT_EQ(file["model"]["type"], "BPE");
  EXPECT_EQ(file["model"]["byte_fallback"], true);
  EXPECT_EQ(file["post_processor"]["type"], "TemplateProcessing");
  bool turn_marker_added = false;
  for (const auto& t : file["added_tokens"]) turn_marker_added |= t["content"] == "<start_of_turn>";
  EXPECT_TRUE(turn_marker_added);

  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromFile(model->string()), "");
  const Tokenizer& tok = Cached(dir);
  EXPECT_EQ(tok.kind(), "bpe-sentencepiece");
  const std::vector<std::string> lines = SampleLines();
  const int mismatches = Mismatches(tok, sp, lines);
  std::printf("[gemma tokenizer.json] %zu lines compared, %d mismatches\n", lines.size(),
              mismatches);
  EXPECT_EQ(mismatches, 0);
  // The turn markers are one token each, with the model's ids; <bos> comes from the engine, not
  // from Encode (the post-processor's template is not applied to plain text).
  auto chat = tok.Encode("<start_of_turn>user");
  ASSERT_TRUE(chat.ok());
  ASSERT_FALSE(chat->empty());
  EXPECT_EQ((*chat)[0], sp.PieceToId("<start_of_turn>"));
  EXPECT_NE((*chat)[0], sp.bos_id());
  // Decoding gives the text back, bytes included.
  for (const std::string& line : {std::string("two  spaces   and three"),
                                  std::string("emoji \xF0\x9F\x98\x80 and \xE2\x82\xAC")}) {
    auto ids = tok.Encode(line);
    ASSERT_TRUE(ids.ok());
    auto text = tok.Decode(*ids);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, line);
  }
}

}  // namespace
}  // namespace manyshot::tokenizer_test

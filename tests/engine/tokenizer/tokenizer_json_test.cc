// tokenizer.json variants beyond the converted files: Llama-3/Qwen2 Split regexes, the legacy
// Metaspace form, NFC, merges as pairs, and clear errors for what is not supported.
#include <string>
#include <vector>

#include "engine/tokenizer/nfc.h"
#include "engine/tokenizer/pretokenizer.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

using nlohmann::json;

std::vector<std::string> Split(SplitPattern p, std::string_view text) {
  std::vector<Piece> pieces;
  SplitText(p, text, pieces);
  std::vector<std::string> out;
  for (const auto& [b, e] : pieces) out.emplace_back(text.substr(b, e - b));
  return out;
}

TEST(PreTokenizerTest, Gpt2Pattern) {
  EXPECT_EQ(Split(SplitPattern::kGpt2, "Hello world  it's 123\n"),
            (std::vector<std::string>{"Hello", " world", " ", " it", "'s", " 123", "\n"}));
  EXPECT_EQ(Split(SplitPattern::kGpt2, "IT'S a\t\tb   "),
            (std::vector<std::string>{"IT", "'", "S", " a", "\t", "\t", "b", "   "}));
}

TEST(PreTokenizerTest, Llama3Pattern) {
  EXPECT_EQ(
      Split(SplitPattern::kLlama3, "Hello world123456 IT'S\n\n  x"),
      (std::vector<std::string>{"Hello", " world", "123", "456", " IT", "'S", "\n\n", " ", " x"}));
  EXPECT_EQ(Split(SplitPattern::kQwen2, "ab 12 (x)!!\r\n"),
            (std::vector<std::string>{"ab", " ", "1", "2", " (", "x", ")!!\r\n"}));
}

TEST(PreTokenizerTest, PatternsFromRegex) {
  auto llama3 = SplitPatternFromRegex(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
  ASSERT_TRUE(llama3.ok());
  EXPECT_EQ(*llama3, SplitPattern::kLlama3);
  auto unknown = SplitPatternFromRegex(R"(\w+|\d)");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(unknown.status().message()).find(R"(\w+|\d)"), std::string::npos);
}

TEST(NfcTest, ComposesAndReorders) {
  EXPECT_EQ(NormalizeNfc("cafe\xCC\x81"), "caf\xC3\xA9");               // e + U+0301 -> é
  EXPECT_EQ(NormalizeNfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // jamo -> 가
  EXPECT_EQ(NormalizeNfc("\xE2\x84\xAB"), "\xC3\x85");                  // Å sign -> Å
  // a + dot below (ccc 220) after acute (230) reorders, then composes with the dot below first.
  EXPECT_EQ(NormalizeNfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");
  EXPECT_EQ(NormalizeNfc("plain ASCII"), "plain ASCII");
  EXPECT_EQ(NormalizeNfc("\xE4\xBD\xA0\xE5\xA5\xBD"), "\xE4\xBD\xA0\xE5\xA5\xBD");
}

json LoadJson(const fs::path& p) { return json::parse(ReadFileOrDie(p)); }

fs::path WriteTokenizerJson(const std::string& name, const json& j) {
  const fs::path dir = ScratchDir() / name;
  fs::create_directories(dir);
  WriteFile(dir / "tokenizer.json", j.dump());
  return dir;
}

TEST(TokenizerJsonTest, Gpt2WithLlama3SplitAndPairMerges) {
  // GPT-2's vocabulary behind a Llama-3 style pre-tokenizer, merges as [a, b] pairs: a stand-in
  // for Llama-3 / Qwen2 files, which are too large to ship.
  json j = LoadJson(Gpt2TokenizerJsonDir() / "tokenizer.json");
  json pairs = json::array();
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    pairs.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  j["model"]["merges"] = pairs;
  j["model"]["ignore_merges"] = true;
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"},
         {"add_prefix_space", false},
         {"trim_offsets", true},
         {"use_regex", false}}}}};
  auto tok = LoadTokenizer(WriteTokenizerJson("llama3_like", j));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& gpt2 = Cached(Gpt2Dir());
  // Numbers split in groups of three: "12345" -> "123", "45".
  EXPECT_EQ(*(*tok)->Encode("12345"),
            (std::vector<int32_t>{*gpt2.TokenToId("123"), *gpt2.TokenToId("45")}));
  // NFC runs first: a decomposed é encodes like the composed one.
  EXPECT_EQ(*(*tok)->Encode("cafe\xCC\x81"), *(*tok)->Encode("caf\xC3\xA9"));
  for (const std::string& line : ReadLines(SentencesFile())) {
    auto ids = (*tok)->Encode(line);
    ASSERT_TRUE(ids.ok());
    ASSERT_EQ(*(*tok)->Decode(*ids), NormalizeNfc(line));
  }
}

// GPT-NeoX / Pythia's tokenizer.json layout: NFC, then a plain ByteLevel pre-tokenizer (no
// use_regex key: the GPT-2 regex), ByteLevel post-processor and decoder, and non-special added
// tokens for runs of spaces. GPT-2's vocabulary stands in for GPT-NeoX's (not shipped here).
TEST(TokenizerJsonTest, GptNeoxLayout) {
  json j = LoadJson(Gpt2TokenizerJsonDir() / "tokenizer.json");
  const json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}};
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = byte_level;
  j["post_processor"] = byte_level;
  j["decoder"] = byte_level;
  const int32_t spaces_id = static_cast<int32_t>(j["model"]["vocab"].size());
  j["added_tokens"].push_back({{"id", spaces_id},
                               {"content", "    "},
                               {"single_word", false},
                               {"lstrip", false},
                               {"rstrip", false},
                               {"normalized", true},
                               {"special", false}});
  auto tok = LoadTokenizer(WriteTokenizerJson("gpt_neox_like", j));
  ASSERT_TRUE(tok.ok()) << tok.status();
  const Tokenizer& gpt2 = Cached(Gpt2Dir());
  // The run of four spaces is one added token; the text around it is GPT-2's.
  auto ids = (*tok)->Encode("if x:\n    return");
  ASSERT_TRUE(ids.ok()) << ids.status();
  const auto before = gpt2.Encode("if x:\n");
  const auto after = gpt2.Encode("return");
  ASSERT_TRUE(before.ok() && after.ok());
  std::vector<int32_t> expected = *before;
  expected.push_back(spaces_id);
  expected.insert(expected.end(), after->begin(), after->end());
  EXPECT_EQ(*ids, expected);
  EXPECT_EQ(*(*tok)->Decode(*ids), "if x:\n    return");
  for (const std::string& line : ReadLines(SentencesFile())) {
    auto line_ids = (*tok)->Encode(line);
    ASSERT_TRUE(line_ids.ok());
    ASSERT_EQ(*(*tok)->Decode(*line_ids), NormalizeNfc(line));
  }
}

TEST(TokenizerJsonTest, LegacyMetaspaceFormMatchesNormalizerForm) {
  json j = LoadJson(LlamaTokenizerJsonDir() / "tokenizer.json");
  const json metaspace = {{"type", "Metaspace"},
                          {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", "first"},
                          {"split", false}};
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = metaspace;
  j["decoder"] = metaspace;
  auto legacy = LoadTokenizer(WriteTokenizerJson("llama_metaspace", j));
  ASSERT_TRUE(legacy.ok()) << legacy.status();
  const Tokenizer& modern = Cached(LlamaTokenizerJsonDir());
  int compared = 0;
  for (const std::string& line : ReadLines(SentencesFile())) {
    // Two real differences between the forms, as in Hugging Face: "first" does not prepend
    // after <s>, and Metaspace does not prepend to text that already starts with a space.
    if (line.find("<s>") != std::string::npos || line.starts_with(" ")) continue;
    ASSERT_EQ(*(*legacy)->Encode(line), *modern.Encode(line)) << line;
    ASSERT_EQ(*(*legacy)->Decode(*modern.Encode(line)), line);
    ++compared;
  }
  EXPECT_GT(compared, 10000);
}

TEST(TokenizerJsonTest, ClearErrors) {
  json j = LoadJson(LlamaTokenizerJsonDir() / "tokenizer.json");
  json wordpiece = j;
  wordpiece["model"]["type"] = "WordPiece";
  auto r = LoadTokenizer(WriteTokenizerJson("wordpiece", wordpiece));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(r.status().message()).find("WordPiece"), std::string::npos);

  json bad_merge = j;
  bad_merge["model"]["merges"].push_back({"no-such-token", "x"});
  r = LoadTokenizer(WriteTokenizerJson("bad_merge", bad_merge));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("no-such-token"), std::string::npos);

  json no_merges = j;
  no_merges["model"]["merges"] = 7;
  r = LoadTokenizer(WriteTokenizerJson("no_merges", no_merges));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("merges"), std::string::npos);

  const fs::path dir = ScratchDir() / "not_json";
  fs::create_directories(dir);
  WriteFile(dir / "tokenizer.json", "{\"model\": ");
  r = LoadTokenizer(dir);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("tokenizer.json: invalid JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace manyshot::tokenizer_test

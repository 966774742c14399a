// Special tokens, ids of bos/eos/space, vocabulary lookups and fingerprints for every kind.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

TEST(SpecialTokensTest, Gpt2EndOfTextInsideText) {
  for (const fs::path& dir : {Gpt2Dir(), Gpt2TokenizerJsonDir()}) {
    const Tokenizer& tok = Cached(dir);
    auto ids = tok.Encode("Hello<|endoftext|> world");
    ASSERT_TRUE(ids.ok());
    // As Hugging Face: "Hello", <|endoftext|>, " world".
    EXPECT_EQ(*ids, (std::vector<int32_t>{15496, 50256, 995})) << dir;
    EXPECT_EQ(*tok.Decode(*ids), "Hello<|endoftext|> world");
    auto alone = tok.Encode("<|endoftext|>");
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(*alone, std::vector<int32_t>{50256});
  }
}

TEST(SpecialTokensTest, Gpt2Ids) {
  for (const fs::path& dir : {Gpt2Dir(), Gpt2TokenizerJsonDir()}) {
    const Tokenizer& tok = Cached(dir);
    EXPECT_EQ(tok.kind(), "bpe-bytelevel");
    EXPECT_EQ(tok.bos_id(), 50256);
    EXPECT_EQ(tok.eos_id(), 50256);
    EXPECT_EQ(tok.space_id(), 220);
    EXPECT_EQ(tok.vocab_size(), 50257);
    EXPECT_EQ(tok.TokenToId("\xC4\xA0the"), 262);  // "Ġthe"
    EXPECT_EQ(tok.IdToToken(262), "\xC4\xA0the");
    EXPECT_EQ(tok.IdToToken(50257), "");
    EXPECT_EQ(tok.IdToToken(-1), "");
    EXPECT_EQ(tok.TokenToId("definitely not a token"), std::nullopt);
    EXPECT_EQ(*tok.Encode(""), std::vector<int32_t>{});
    EXPECT_EQ(*tok.Decode({}), "");
  }
}

TEST(SpecialTokensTest, DecodeRejectsOutOfRangeIds) {
  for (const fs::path& dir :
       {Gpt2Dir(), Gpt2TokenizerJsonDir(), LlamaModelDir(), LlamaTokenizerJsonDir()}) {
    const Tokenizer& tok = Cached(dir);
    for (int32_t bad : {-1, static_cast<int32_t>(tok.vocab_size()), 1 << 30}) {
      auto r = tok.Decode(std::vector<int32_t>{0, bad});
      ASSERT_FALSE(r.ok()) << dir << " " << bad;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST(SpecialTokensTest, PartialUtf8DecodesToReplacementCharacter) {
  const Tokenizer& tok = Cached(Gpt2Dir());
  auto ids = tok.Encode("\xF0\x9F\x98\x80");  // 😀: several byte tokens
  ASSERT_TRUE(ids.ok());
  ASSERT_GT(ids->size(), 1u);
  auto head = tok.Decode(absl::MakeConstSpan(*ids).subspan(0, 1));
  ASSERT_TRUE(head.ok());
  EXPECT_EQ(*head, "\xEF\xBF\xBD");
}

TEST(SpecialTokensTest, FingerprintsAreStableAndDistinct) {
  const std::string gpt2 = Cached(Gpt2Dir()).fingerprint();
  EXPECT_EQ(gpt2.size(), 16u);
  // The same files always give the same fingerprint (it is part of cache keys).
  auto again = LoadTokenizer(Gpt2Dir());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->fingerprint(), gpt2);
  EXPECT_NE(Cached(Gpt2TokenizerJsonDir()).fingerprint(), gpt2);
  EXPECT_NE(Cached(LlamaModelDir()).fingerprint(), Cached(LlamaTokenizerJsonDir()).fingerprint());
  // Changing a config file changes it.
  const fs::path dir = ScratchDir() / "gpt2_with_config";
  fs::create_directories(dir);
  fs::copy_file(Gpt2Dir() / "vocab.json", dir / "vocab.json", fs::copy_options::overwrite_existing);
  fs::copy_file(Gpt2Dir() / "merges.txt", dir / "merges.txt", fs::copy_options::overwrite_existing);
  WriteFile(dir / "tokenizer_config.json", R"({"bos_token": null, "eos_token": "<|endoftext|>"})");
  auto with_config = LoadTokenizer(dir);
  ASSERT_TRUE(with_config.ok()) << with_config.status();
  EXPECT_NE((*with_config)->fingerprint(), gpt2);
  EXPECT_EQ((*with_config)->bos_id(), std::nullopt);  // explicitly null in the config
  EXPECT_EQ((*with_config)->eos_id(), 50256);
}

TEST(SpecialTokensTest, MissingAndHalfDirectories) {
  const fs::path empty = ScratchDir() / "empty";
  fs::create_directories(empty);
  auto r = LoadTokenizer(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  const fs::path half = ScratchDir() / "half";
  fs::create_directories(half);
  fs::copy_file(Gpt2Dir() / "vocab.json", half / "vocab.json",
                fs::copy_options::overwrite_existing);
  r = LoadTokenizer(half);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("merges.txt"), std::string::npos);
}

TEST(SpecialTokensTest, InvalidUtf8IsRejectedWithOffset) {
  const std::vector<std::pair<std::string, size_t>> cases = {
      {"ab\x80", 2},                     // lone continuation byte
      {"abc\xE2\x82", 3},                // truncated 3-byte sequence
      {"\xC0\xAF", 0},                   // overlong '/'
      {"x\xE0\x80\xAF", 1},              // overlong 3-byte
      {"ok \xED\xA0\x80 surrogate", 3},  // UTF-16 surrogate U+D800
      {"\xF4\x90\x80\x80", 0},           // above U+10FFFF
      {"\xFF", 0},
      {"valid \xC3\xA9 then \xC3", 14},
  };
  for (const fs::path& dir :
       {Gpt2Dir(), Gpt2TokenizerJsonDir(), LlamaModelDir(), LlamaTokenizerJsonDir()}) {
    const Tokenizer& tok = Cached(dir);
    for (const auto& [text, offset] : cases) {
      auto r = tok.Encode(text);
      ASSERT_FALSE(r.ok()) << dir;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(std::string(r.status().message()).find("byte offset " + std::to_string(offset)),
                std::string::npos)
          << r.status();
    }
  }
}

}  // namespace
}  // namespace manyshot::tokenizer_test

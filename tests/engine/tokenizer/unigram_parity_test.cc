// SentencePiece Unigram (T5's tokenizer): manyshot's own spiece.model reader and its tokenizer.json
// form (converted by tools/tokenizer_parity/sp_unigram_to_tokenizer_json.py) against
// libsentencepiece itself, ids and decoded text, on every parity sentence, for T5-style models
// (nmt_nfkc rules) trained here with and without byte fallback. ../shared has no T5 model; when
// it has one (tokenizers/t5/spiece.model) it is compared as well.
#include <algorithm>
#include <string>
#include <vector>

#include "engine/tokenizer/text_util.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/sp_processor.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

// The model trained once per test binary (cached in the build tree across runs).
const fs::path& TrainedModel(bool byte_fallback) {
  static const fs::path paths[2] = {
      [] {
        auto p = TrainT5StyleUnigramModel(SharedDir(),
                                          fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work",
                                          /*byte_fallback=*/false);
        EXPECT_TRUE(p.ok()) << p.status();
        return p.ok() ? *p : fs::path();
      }(),
      [] {
        auto p = TrainT5StyleUnigramModel(SharedDir(),
                                          fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work",
                                          /*byte_fallback=*/true);
        EXPECT_TRUE(p.ok()) << p.status();
        return p.ok() ? *p : fs::path();
      }()};
  return paths[byte_fallback ? 1 : 0];
}

// A model directory holding just the spiece.model.
fs::path ModelDir(const fs::path& model, const std::string& name) {
  const fs::path d = ScratchDir() / ("unigram_model_" + name);
  fs::create_directories(d);
  fs::copy_file(model, d / "spiece.model", fs::copy_options::overwrite_existing);
  return d;
}

// tokenizer.json + tokenizer_config.json converted from the model by our script, in the layout of
// the T5 files on the Hub, or with `current_layout` in the one transformers writes today.
fs::path JsonDir(const fs::path& model, const std::string& name, bool current_layout = false) {
  const fs::path d = ScratchDir() / ("unigram_json_" + name + (current_layout ? "_current" : ""));
  const std::string cmd =
      "/usr/bin/python3 " + Quote(ToolsDir() / "sp_unigram_to_tokenizer_json.py") + " " +
      Quote(model) + " " + Quote(d) + (current_layout ? " --current-layout" : "");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return d;
}

// The texts of the pieces the tokenizer splits out before anything else (control and unknown
// pieces): a line holding one is encoded differently from plain libsentencepiece on purpose.
std::vector<std::string> SpecialPieces(const SpProcessor& sp) {
  std::vector<std::string> out;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (sp.IsControl(id) || sp.IsUnknown(id)) out.push_back(sp.IdToPiece(id));
  }
  return out;
}

// libsentencepiece's decoding with the Tokenizer contract's one difference: <unk> is decoded
// verbatim, where libsentencepiece writes " ⁇ ".
std::string ExpectedDecode(const SpProcessor& sp, const std::vector<int32_t>& ids) {
  return ReplaceAll(sp.DecodeIds(std::vector<int>(ids.begin(), ids.end())), " \xE2\x81\x87 ",
                    "<unk>");
}

struct ParityCounts {
  int compared = 0, skipped = 0, id_mismatches = 0, decode_mismatches = 0, with_unknown = 0;
};

ParityCounts CompareWithLibsentencepiece(const fs::path& model, const Tokenizer& tok) {
  SpProcessor sp;
  EXPECT_EQ(sp.LoadFromFile(model.string()), "");
  const std::vector<std::string> specials = SpecialPieces(sp);
  const auto lines = ReadLines(SentencesFile());
  EXPECT_GE(lines.size(), 10000u);
  ParityCounts c;
  std::vector<int> want;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    auto got = tok.Encode(line);
    EXPECT_TRUE(got.ok()) << got.status();
    if (!got.ok()) continue;
    bool special = false;
    for (const std::string& s : specials) special = special || line.find(s) != std::string::npos;
    if (special) {
      ++c.skipped;
      continue;
    }
    ++c.compared;
    EXPECT_EQ(sp.Encode(line, want), "");
    if (*got != std::vector<int32_t>(want.begin(), want.end()) && ++c.id_mismatches <= 5) {
      ADD_FAILURE() << "ids differ on line " << i + 1 << ": " << line;
    }
    for (const int id : want) {
      if (sp.IsUnknown(id)) {
        ++c.with_unknown;
        break;
      }
    }
    auto text = tok.Decode(*got);
    EXPECT_TRUE(text.ok()) << text.status();
    if (text.ok() && *text != ExpectedDecode(sp, *got) && ++c.decode_mismatches <= 5) {
      ADD_FAILURE() << "decode differs on line " << i + 1 << ": " << line << "\n  ours: " << *text
                    << "\n  libsentencepiece: " << ExpectedDecode(sp, *got);
    }
  }
  return c;
}

void ExpectParity(const fs::path& model, const fs::path& dir, const std::string& kind) {
  ASSERT_FALSE(model.empty());
  const Tokenizer& tok = Cached(dir);
  EXPECT_EQ(tok.kind(), kind);
  const ParityCounts c = CompareWithLibsentencepiece(model, tok);
  std::printf(
      "[unigram parity, %s, %s] %d lines compared (%d with unknown characters), %d left out for "
      "special-piece text, %d id mismatches, %d decode mismatches\n",
      model.string().c_str(), kind.c_str(), c.compared, c.with_unknown, c.skipped, c.id_mismatches,
      c.decode_mismatches);
  EXPECT_GE(c.compared, 10000);
  EXPECT_EQ(c.id_mismatches, 0);
  EXPECT_EQ(c.decode_mismatches, 0);
}

TEST(UnigramParityTest, SpieceModelMatchesLibsentencepiece) {
  const fs::path& model = TrainedModel(false);
  ExpectParity(model, ModelDir(model, "plain"), "sentencepiece-unigram");
}

TEST(UnigramParityTest, SpieceModelWithByteFallbackMatchesLibsentencepiece) {
  const fs::path& model = TrainedModel(true);
  ExpectParity(model, ModelDir(model, "bytes"), "sentencepiece-unigram");
}

TEST(UnigramParityTest, TokenizerJsonMatchesLibsentencepiece) {
  const fs::path& model = TrainedModel(false);
  ExpectParity(model, JsonDir(model, "plain"), "unigram");
}

TEST(UnigramParityTest, TokenizerJsonWithByteFallbackMatchesLibsentencepiece) {
  const fs::path& model = TrainedModel(true);
  ExpectParity(model, JsonDir(model, "bytes"), "unigram");
}

TEST(UnigramParityTest, TokenizerJsonInTodaysLayoutMatchesLibsentencepiece) {
  const fs::path& model = TrainedModel(true);
  ExpectParity(model, JsonDir(model, "bytes", /*current_layout=*/true), "unigram");
}

// Without ../shared the models are trained on the parity sentences instead: that path works, is
// deterministic, and matches too, so a fresh machine runs nothing untested.
TEST(UnigramParityTest, TrainsWithoutSharedDeterministicallyAndMatches) {
  const fs::path no_shared = ScratchDir() / "no_shared";
  auto a = TrainT5StyleUnigramModel(no_shared, ScratchDir() / "unigram_train_a", true);
  auto b = TrainT5StyleUnigramModel(no_shared, ScratchDir() / "unigram_train_b", true);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->string().find("parity"), std::string::npos) << *a;
  EXPECT_EQ(ReadFileOrDie(*a), ReadFileOrDie(*b));
  auto again = TrainT5StyleUnigramModel(no_shared, ScratchDir() / "unigram_train_a", true);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *a);  // reused, not trained again
  ExpectParity(*a, ModelDir(*a, "no_shared"), "sentencepiece-unigram");
}

TEST(UnigramParityTest, RealT5ModelWhenShared) {
  const fs::path real = SharedDir() / "tokenizers" / "t5" / "spiece.model";
  if (!fs::is_regular_file(real)) {
    GTEST_SKIP() << "no " << real << " (the trained models above are compared instead)";
  }
  ExpectParity(real, ModelDir(real, "real"), "sentencepiece-unigram");
  ExpectParity(real, JsonDir(real, "real"), "unigram");
}

// Whitespace and line structure, which the parity sentences have little of.
TEST(UnigramParityTest, WhitespaceAndEdgeCases) {
  for (const bool byte_fallback : {false, true}) {
    const fs::path& model = TrainedModel(byte_fallback);
    SpProcessor sp;
    ASSERT_EQ(sp.LoadFromFile(model.string()), "");
    const std::string name = byte_fallback ? "bytes" : "plain";
    for (const fs::path& dir :
         {ModelDir(model, name), JsonDir(model, name), JsonDir(model, name, true)}) {
      const Tokenizer& tok = Cached(dir);
      for (const std::string t :
           {"Sentence: great movie\nLabel: positive\n\n", "a\n\n\nb", "line one\r\nline two\r\n",
            "  indented\n\tcode();\n", "\n", "", " ", "   leading and trailing   ",
            "full\xE3\x80\x80width\xEF\xBC\xA1\xEF\xBC\xA2", "\xEF\xAC\x81nance \xE2\x84\x96 5",
            "emoji \xF0\x9F\x98\x80\xF0\x9F\x98\x80 and \xE4\xBD\xA0\xE5\xA5\xBD",
            "zero\xE2\x80\x8Bwidth", "http://example.com/http", "xhttpy", "\x7F\x01 control"}) {
        std::vector<int> want;
        ASSERT_EQ(sp.Encode(t, want), "");
        auto got = tok.Encode(t);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(*got, std::vector<int32_t>(want.begin(), want.end())) << dir << ": " << t;
        auto back = tok.Decode(*got);
        ASSERT_TRUE(back.ok());
        EXPECT_EQ(*back, ExpectedDecode(sp, *got)) << dir << ": " << t;
      }
    }
  }
}

TEST(UnigramParityTest, SpecialIdsAndPieces) {
  const fs::path& model = TrainedModel(true);
  for (const fs::path& dir : {ModelDir(model, "bytes"), JsonDir(model, "bytes")}) {
    const Tokenizer& tok = Cached(dir);
    // T5's layout: <pad>=0 </s>=1 <unk>=2, no <s>.
    EXPECT_EQ(tok.bos_id(), std::nullopt) << dir;
    EXPECT_EQ(tok.eos_id(), 1) << dir;
    EXPECT_EQ(tok.IdToToken(0), "<pad>");
    EXPECT_EQ(tok.TokenToId("<unk>"), 2);
    EXPECT_EQ(tok.vocab_size(), 4000);
    ASSERT_TRUE(tok.space_id().has_value());
    EXPECT_EQ(tok.IdToToken(*tok.space_id()), "\xE2\x96\x81");
    // Control pieces in the text are split out first, and decode verbatim.
    auto ids = tok.Encode("hello</s><extra_id_0> world");
    ASSERT_TRUE(ids.ok());
    const auto extra = tok.TokenToId("<extra_id_0>");
    ASSERT_TRUE(extra.has_value());
    const auto eos = std::find(ids->begin(), ids->end(), 1);
    ASSERT_NE(eos, ids->end()) << dir;
    ASSERT_NE(eos + 1, ids->end());
    EXPECT_EQ(*(eos + 1), *extra) << dir;
    EXPECT_EQ(*tok.Decode(*ids), "hello</s><extra_id_0> world");
    EXPECT_EQ(tok.Decode({4000}).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(tok.Encode("bad \xFF byte").status().code(), absl::StatusCode::kInvalidArgument);
  }
  // Without byte fallback, characters outside the vocabulary are <unk>, a run of them one <unk>.
  const Tokenizer& plain = Cached(ModelDir(TrainedModel(false), "plain"));
  auto ids = plain.Encode("\xF0\x9F\x98\x80\xF0\x9F\x98\x80");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(std::count(ids->begin(), ids->end(), 2), 1);
}

}  // namespace
}  // namespace manyshot::tokenizer_test

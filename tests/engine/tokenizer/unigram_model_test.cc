// SentencePiece Unigram models built by hand (so each case is small and says what it tests),
// compared with libsentencepiece loading the same bytes; the precompiled normalization rules of a
// real nmt_nfkc model; and malformed Unigram models and tokenizer.json files, which are clear
// errors, never crashes.
#include <string>
#include <vector>

#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/precompiled_charsmap.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/tokenizer/sentencepiece_proto_builder.h"
#include "tests/engine/tokenizer/sp_processor.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

const std::string kSp = "\xE2\x96\x81";  // "▁"
constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

// A small Unigram model: <unk> </s>, a few scored pieces (with exact ties between "aa"+"a" and
// "a"+"aa"), an unused piece, a user-defined one; identity normalization unless `normalizer`
// says otherwise. With byte_fallback, the 256 byte pieces too.
std::string HandMadeUnigram(bool byte_fallback, const std::string& normalizer = "") {
  std::string m = PieceMsg("<unk>", 0, kUnknown) + PieceMsg("</s>", 0, kControl);
  const struct {
    const char* piece;
    float score;
    int type;
  } pieces[] = {
      {"\xE2\x96\x81", -1, kNormal},
      {"a", -1, kNormal},
      {"aa", -2, kNormal},
      {"b", -2, kNormal},
      {"c", -3, kNormal},
      {"ab", -2.5f, kNormal},
      {"\xE2\x96\x81"
       "ab",
       -3.5f, kNormal},
      {"bc", -2.5f, kNormal},
      {"\xE2\x96\x81"
       "a",
       -1.5f, kNormal},
      {"abc", -1, kUnused},
      {"xy", 0, kUserDefined},
      {"xyz", 0, kUserDefined},  // the longer user-defined piece wins where both match
  };
  for (const auto& p : pieces) m += PieceMsg(p.piece, p.score, p.type);
  if (byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      m += PieceMsg(name, 0, kByte);
    }
  }
  m += LenField(2, VarintField(3, 1) + VarintField(35, byte_fallback ? 1 : 0) + VarintField(40, 0) +
                       VarintField(41, -1) + VarintField(42, 1));
  m += LenField(3, normalizer.empty() ? LenField(1, "identity") : normalizer);
  return m;
}

void ExpectSameAsLibsentencepiece(const std::string& model, const std::vector<std::string>& texts) {
  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromSerializedProto(model), "");
  auto tok = LoadSentencePieceModel(model, {}, "0");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "sentencepiece-unigram");
  for (const std::string& t : texts) {
    std::vector<int> want;
    ASSERT_EQ(sp.Encode(t, want), "");
    auto got = (*tok)->Encode(t);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, std::vector<int32_t>(want.begin(), want.end())) << t;
  }
}

const std::vector<std::string> kTexts = {"a",
                                         "aa",
                                         "aaa",
                                         "aaaa",
                                         "ab",
                                         "abc",
                                         "abcab",
                                         "a b  c",
                                         " ab ",
                                         "zzz",
                                         "azzzb",
                                         "z z",
                                         "xy",
                                         "axyb",
                                         "xyxy",
                                         "axyzb",
                                         "xyxyzxy",
                                         "abc abc",
                                         "\xE2\x96\x81",
                                         "a\xE2\x96\x81"
                                         "b",
                                         "\xC3\xA9t\xC3\xA9",
                                         "\xF0\x9F\x98\x80 a",
                                         ""};

TEST(UnigramModelTest, HandMadeModelMatchesLibsentencepiece) {
  ExpectSameAsLibsentencepiece(HandMadeUnigram(false), kTexts);
}

TEST(UnigramModelTest, HandMadeModelWithByteFallbackMatchesLibsentencepiece) {
  ExpectSameAsLibsentencepiece(HandMadeUnigram(true), kTexts);
}

TEST(UnigramModelTest, WhitespaceSettingsMatchLibsentencepiece) {
  // Every combination of add_dummy_prefix (3), remove_extra_whitespaces (4), escape_whitespaces
  // (5).
  for (int bits = 0; bits < 8; ++bits) {
    const std::string normalizer = LenField(1, "identity") + VarintField(3, bits & 1) +
                                   VarintField(4, (bits >> 1) & 1) +
                                   VarintField(5, (bits >> 2) & 1);
    SCOPED_TRACE(bits);
    ExpectSameAsLibsentencepiece(HandMadeUnigram(true, normalizer), kTexts);
  }
}

TEST(UnigramModelTest, HandComputedSegmentations) {
  auto tok = LoadSentencePieceModel(HandMadeUnigram(false), {}, "0");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto pieces = [&](std::string_view text) {
    std::vector<std::string> out;
    auto ids = (*tok)->Encode(text);
    EXPECT_TRUE(ids.ok()) << ids.status();
    if (!ids.ok()) return out;
    for (const int32_t id : *ids) out.push_back((*tok)->IdToToken(id));
    return out;
  };
  // "▁ab" (-3.5), "▁a" + "b" (-1.5 - 2) and "▁" + "ab" (-1 - 2.5) tie exactly: the path
  // recorded first, the piece that starts leftmost, stays (a later candidate must be better).
  EXPECT_EQ(pieces("ab"), (std::vector<std::string>{kSp + "ab"}));
  // The unused piece "abc" is never used; the user-defined "xy" always is.
  EXPECT_EQ(pieces("abc"), (std::vector<std::string>{kSp + "a", "bc"}));
  EXPECT_EQ(pieces("axyb"), (std::vector<std::string>{kSp + "a", "xy", "b"}));
  // A run of unknown characters is one <unk>.
  EXPECT_EQ(pieces("azzzb"), (std::vector<std::string>{kSp + "a", "<unk>", "b"}));
  EXPECT_EQ(*(*tok)->Decode(*(*tok)->Encode("azzzb")), "a<unk>b");
  // With byte fallback, each byte of an unknown character is its own piece, and decodes back.
  auto bytes = LoadSentencePieceModel(HandMadeUnigram(true), {}, "0");
  ASSERT_TRUE(bytes.ok());
  auto ids = (*bytes)->Encode("a\xC3\xA9");
  ASSERT_TRUE(ids.ok());
  ASSERT_EQ(ids->size(), 3u);
  EXPECT_EQ((*bytes)->IdToToken((*ids)[1]), "<0xC3>");
  EXPECT_EQ((*bytes)->IdToToken((*ids)[2]), "<0xA9>");
  EXPECT_EQ(*(*bytes)->Decode(*ids), "a\xC3\xA9");
  // A lone continuation byte decodes to U+FFFD, as libsentencepiece does; the text is then no
  // longer empty, so the next piece keeps its space.
  EXPECT_EQ(*(*bytes)->Decode({(*ids)[2], (*ids)[0]}), "\xEF\xBF\xBD a");
}

// The rules of a real nmt_nfkc model, read and applied as data.
TEST(UnigramModelTest, PrecompiledRulesOfARealModel) {
  auto model =
      TrainT5StyleUnigramModel(SharedDir(), fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work",
                               /*byte_fallback=*/false);
  ASSERT_TRUE(model.ok()) << model.status();
  auto proto = ReadSentencePieceModel(ReadFileOrDie(*model), "spiece.model");
  ASSERT_TRUE(proto.ok());
  EXPECT_EQ(proto->normalizer.name, "nmt_nfkc");
  auto rules = PrecompiledCharsmap::Parse(proto->normalizer.precompiled_charsmap, "spiece.model");
  ASSERT_TRUE(rules.ok()) << rules.status();
  const auto apply = [&](std::string_view s) -> std::string {
    auto m = rules->LongestPrefixMatch(s);
    return m.has_value() ? std::string(m->replacement) + "|" + std::to_string(m->consumed) : "-";
  };
  EXPECT_EQ(apply("\xEF\xAC\x81x"), "fi|3");  // the ligature ﬁ -> "fi"
  EXPECT_EQ(apply("\xEF\xBC\xA1"), "A|3");    // fullwidth Ａ -> "A"
  EXPECT_EQ(apply("\xE2\x91\xA0"), "1|3");    // circled ① -> "1"
  EXPECT_EQ(apply("\t"), " |1");              // whitespace folds to a space
  EXPECT_EQ(apply("plain"), "-");             // ASCII letters have no rule
  EXPECT_EQ(apply(""), "-");
  // libsentencepiece agrees on what these normalize to.
  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromFile(model->string()), "");
  EXPECT_EQ(sp.EncodeAsPieces("\xEF\xAC\x81"), sp.EncodeAsPieces("fi"));
}

// Every character of some blocks where NFKC and nmt_nfkc change text (Latin-1, general
// punctuation, letterlike symbols, number forms, enclosed alphanumerics, CJK symbols, halfwidth
// and fullwidth forms, mathematical alphanumerics), alone and between letters.
TEST(UnigramModelTest, CompatibilityCharactersMatchLibsentencepiece) {
  for (const bool byte_fallback : {false, true}) {
    auto model = TrainT5StyleUnigramModel(
        SharedDir(), fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work", byte_fallback);
    ASSERT_TRUE(model.ok()) << model.status();
    SpProcessor sp;
    ASSERT_EQ(sp.LoadFromFile(model->string()), "");
    auto tok = LoadSentencePieceModel(ReadFileOrDie(*model), {}, "0");
    ASSERT_TRUE(tok.ok()) << tok.status();
    int compared = 0, mismatches = 0;
    const std::pair<uint32_t, uint32_t> blocks[] = {
        {0x00, 0x24F},    {0x2000, 0x215F}, {0x2460, 0x24FF},  {0x3000, 0x30FF},
        {0xFB00, 0xFB4F}, {0xFE30, 0xFFEF}, {0x1D400, 0x1D7FF}};
    std::vector<int> want;
    for (const auto& [lo, hi] : blocks) {
      for (uint32_t cp = lo; cp <= hi; ++cp) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        std::string c;
        if (cp < 0x80) {
          c.push_back(static_cast<char>(cp));
        } else if (cp < 0x800) {
          c = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
        } else if (cp < 0x10000) {
          c = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
               static_cast<char>(0x80 | (cp & 0x3F))};
        } else {
          c = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
               static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
        }
        if (cp == 0) continue;  // libsentencepiece stops at NUL in places
        for (const std::string& t : {c, "a" + c + "b " + c + c + " x"}) {
          ASSERT_EQ(sp.Encode(t, want), "");
          auto got = (*tok)->Encode(t);
          ASSERT_TRUE(got.ok()) << got.status();
          ++compared;
          if (*got != std::vector<int32_t>(want.begin(), want.end()) && ++mismatches <= 5) {
            ADD_FAILURE() << "U+" << std::hex << cp << std::dec << " in \"" << t << "\"";
          }
        }
      }
    }
    std::printf("[unigram compatibility characters, byte_fallback=%d] %d texts, %d mismatches\n",
                byte_fallback, compared, mismatches);
    EXPECT_EQ(mismatches, 0);
  }
}

// User-defined pieces are exempt from the rules, the longest one first: with nmt_nfkc, "Ａ" and
// "ＡＢ" (fullwidth) as user-defined pieces stay fullwidth where they match, and "Ｃ" becomes "C".
TEST(UnigramModelTest, UserDefinedPiecesEscapeTheRules) {
  auto model =
      TrainT5StyleUnigramModel(SharedDir(), fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work",
                               /*byte_fallback=*/false);
  ASSERT_TRUE(model.ok()) << model.status();
  auto real = ReadSentencePieceModel(ReadFileOrDie(*model), "spiece.model");
  ASSERT_TRUE(real.ok());
  const std::string rules = real->normalizer.precompiled_charsmap;
  const std::string normalizer = LenField(1, "nmt_nfkc") + LenField(2, rules);
  const std::string m = HandMadeUnigram(false, normalizer) +
                        PieceMsg("\xEF\xBC\xA1", 0, kUserDefined) +
                        PieceMsg("\xEF\xBC\xA1\xEF\xBC\xA2", 0, kUserDefined) +
                        PieceMsg("C", -1, kNormal) + PieceMsg("B", -1, kNormal);
  ExpectSameAsLibsentencepiece(
      m, {"\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3", "\xEF\xBC\xA1\xEF\xBC\xA3\xEF\xBC\xA2",
          "a \xEF\xBC\xA1\xEF\xBC\xA2 \xEF\xBC\xA2 \xEF\xAC\x81"});
  auto tok = LoadSentencePieceModel(m, {}, "0");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("\xEF\xBC\xA1\xEF\xBC\xA2\xEF\xBC\xA3");
  ASSERT_TRUE(ids.ok());
  std::vector<std::string> pieces;
  for (const int32_t id : *ids) pieces.push_back((*tok)->IdToToken(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{kSp, "\xEF\xBC\xA1\xEF\xBC\xA2", "C"}));
}

// --- Malformed models --------------------------------------------------------------------------

absl::Status LoadStatus(const std::string& bytes) {
  auto tok = LoadSentencePieceModel(bytes, {}, "0");
  return tok.ok() ? absl::OkStatus() : tok.status();
}

std::string Charsmap(uint32_t trie_bytes, std::string_view rest) {
  std::string blob(4, '\0');
  for (int i = 0; i < 4; ++i)
    blob[static_cast<size_t>(i)] = static_cast<char>(trie_bytes >> (8 * i));
  return blob + std::string(rest);
}

TEST(UnigramModelTest, MalformedModelsAreInvalidArgumentNamingWhat) {
  const std::string unigram = LenField(2, VarintField(3, 1));
  const std::string unk = PieceMsg("<unk>", 0, kUnknown);
  const std::string a = PieceMsg("a", -1, kNormal);
  const auto rules = [](const std::string& blob) {
    return LenField(3, LenField(1, "nmt_nfkc") + LenField(2, blob));
  };
  const struct {
    std::string bytes;
    const char* want;
    bool sentencepiece_refuses;
  } cases[] = {
      {unigram, "no pieces", true},
      {unigram + a, "no unknown piece", true},
      {unigram + unk + PieceMsg("<unk>", 0, kUnknown), "defined twice", true},
      {unigram + unk + PieceMsg("x", 0, kUnknown), "more than one unknown piece", true},
      {unigram + unk + PieceMsg("", 0, kNormal), "piece 1 is empty", true},
      {unigram + unk + PieceMsg("<0x41>", 0, kByte), "without byte_fallback", true},
      {LenField(2, VarintField(3, 1) + VarintField(35, 1)) + unk + PieceMsg("<0x41>", 0, kByte),
       "byte piece <0x00> is missing", false},
      {unigram + unk + a + rules("abc"), "shorter than its 4-byte header", true},
      {unigram + unk + a + rules(Charsmap(64, "12345678")), "leaves no replacement", true},
      {unigram + unk + a + rules(Charsmap(6, std::string_view("123456\0", 7))),
       "not a positive multiple of 4", false},
      {unigram + unk + a + rules(Charsmap(4, "1234ab")), "do not end with a NUL", false},
  };
  for (const auto& c : cases) {
    const absl::Status s = LoadStatus(c.bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want << ": " << s;
    EXPECT_NE(s.message().find(c.want), std::string_view::npos) << c.want << ": " << s;
    EXPECT_TRUE(std::string(s.message()).starts_with("tokenizer.model: ")) << s;
    if (c.sentencepiece_refuses) {
      SpProcessor sp;
      EXPECT_NE(sp.LoadFromSerializedProto(c.bytes), "") << c.want;
    }
  }
  // What the Unigram path does not implement is Unimplemented, naming the setting.
  const absl::Status suffix =
      LoadStatus(LenField(2, VarintField(3, 1) + VarintField(24, 1)) + unk + a);
  EXPECT_EQ(suffix.code(), absl::StatusCode::kUnimplemented) << suffix;
  EXPECT_NE(suffix.message().find("treat_whitespace_as_suffix"), std::string_view::npos);
}

TEST(UnigramModelTest, SpieceModelLoadsFromADirectory) {
  const fs::path dir = ScratchDir() / "unigram_spiece_dir";
  fs::create_directories(dir);
  WriteFile(dir / "spiece.model", HandMadeUnigram(false));
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "sentencepiece-unigram");
  EXPECT_EQ((*tok)->eos_id(), 1);
  EXPECT_EQ((*tok)->bos_id(), std::nullopt);
  EXPECT_EQ((*tok)->fingerprint().size(), 16u);
  // Errors name the file it was read from.
  WriteFile(dir / "spiece.model", HandMadeUnigram(false) + PieceMsg("", 0, kNormal));
  auto bad = LoadTokenizer(dir);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(dir.string() + ": spiece.model: "), std::string::npos)
      << bad.status();
}

// --- tokenizer.json with a Unigram model --------------------------------------------------------

nlohmann::json UnigramJson() {
  return nlohmann::json::parse(R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                     {"id": 1, "content": "</s>", "special": true}],
    "normalizer": {"type": "Precompiled", "precompiled_charsmap": null},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"},
        {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": true}]},
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": true},
    "model": {"type": "Unigram", "unk_id": 0, "byte_fallback": false,
              "vocab": [["<unk>", 0.0], ["</s>", 0.0], ["\u2581", -1.0], ["a", -1.0],
                        ["\u2581a", -1.5], ["b", -2.0]]}
  })");
}

absl::Status JsonStatus(const nlohmann::json& j) {
  auto tok = LoadTokenizerJson(j.dump(), {}, "0");
  return tok.ok() ? absl::OkStatus() : tok.status();
}

TEST(UnigramModelTest, TokenizerJsonLoadsAndEncodes) {
  auto tok = LoadTokenizerJson(UnigramJson().dump(), {}, "0");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "unigram");
  EXPECT_EQ((*tok)->eos_id(), 1);
  // Every Unicode space separates words, as Hugging Face's WhitespaceSplit does.
  EXPECT_EQ(*(*tok)->Encode(" a\xE2\x80\x83 b</s>"), (std::vector<int32_t>{4, 2, 5, 1}));
  EXPECT_EQ(*(*tok)->Decode({4, 2, 5, 1}), "a b</s>");
}

// prepend_scheme "first" (transformers' non-legacy tokenizers): "▁" only where the input begins,
// not after an added token; "always" after each.
TEST(UnigramModelTest, TokenizerJsonPrependSchemes) {
  for (const char* scheme : {"always", "first"}) {
    nlohmann::json j = UnigramJson();
    j["pre_tokenizer"] = {
        {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}};
    j["decoder"] = j["pre_tokenizer"];
    auto tok = LoadTokenizerJson(j.dump(), {}, "0");
    ASSERT_TRUE(tok.ok()) << tok.status();
    const bool first = std::string_view(scheme) == "first";
    EXPECT_EQ(*(*tok)->Encode("a</s>a"), (std::vector<int32_t>{4, 1, first ? 3 : 4})) << scheme;
    EXPECT_EQ(*(*tok)->Encode("</s>a"), (std::vector<int32_t>{1, first ? 3 : 4})) << scheme;
  }
}

TEST(UnigramModelTest, MalformedTokenizerJsonIsAnErrorNamingWhat) {
  const struct {
    const char* pointer;
    nlohmann::json value;
    absl::StatusCode code;
    const char* want;
  } cases[] = {
      {"/model/vocab", 7, absl::StatusCode::kInvalidArgument, "model.vocab is not a list"},
      {"/model/vocab/3", nlohmann::json::array({"a"}), absl::StatusCode::kInvalidArgument,
       "model.vocab[3] is not a [piece, score] pair"},
      {"/model/vocab/3", nlohmann::json::array({1, 2}), absl::StatusCode::kInvalidArgument,
       "model.vocab[3]"},
      {"/model/unk_id", 99, absl::StatusCode::kInvalidArgument, "model.unk_id"},
      {"/model/unk_id", nullptr, absl::StatusCode::kInvalidArgument, "model.unk_id"},
      {"/model/vocab/5/0", "a", absl::StatusCode::kInvalidArgument, "defined twice"},
      {"/normalizer/precompiled_charsmap", "!!", absl::StatusCode::kInvalidArgument, "not base64"},
      {"/normalizer/precompiled_charsmap", "AAAA", absl::StatusCode::kInvalidArgument,
       "precompiled_charsmap"},
      {"/normalizer/type", "NFKC", absl::StatusCode::kUnimplemented, "normalizer \"NFKC\""},
      {"/pre_tokenizer", nullptr, absl::StatusCode::kUnimplemented, "pre_tokenizer"},
      {"/pre_tokenizer/pretokenizers/1/replacement", "_", absl::StatusCode::kUnimplemented,
       "Metaspace replacement"},
      {"/decoder/type", "ByteLevel", absl::StatusCode::kUnimplemented, "decoder \"ByteLevel\""},
      {"/decoder/add_prefix_space", false, absl::StatusCode::kUnimplemented,
       "prefix setting differs"},
      {"/normalizer", nlohmann::json::parse(R"({"type": "Strip", "left": false, "right": true})"),
       absl::StatusCode::kUnimplemented, "Strip without the Replace"},
      {"/normalizer", nlohmann::json::parse(R"({"type": "Strip", "left": true, "right": true})"),
       absl::StatusCode::kUnimplemented, "Strip (only right=true"},
      {"/normalizer",
       nlohmann::json::parse(R"({"type": "Replace", "pattern": {"Regex": " +"}, "content": " "})"),
       absl::StatusCode::kUnimplemented, "normalizer Replace"},
      {"/pre_tokenizer/pretokenizers/1/prepend_scheme", "sometimes",
       absl::StatusCode::kUnimplemented, "prepend_scheme"},
      {"/added_tokens/1/content", "<eos>", absl::StatusCode::kUnimplemented, "added token"},
      {"/model/byte_fallback", true, absl::StatusCode::kInvalidArgument, "<0x00> is missing"},
  };
  ASSERT_TRUE(JsonStatus(UnigramJson()).ok()) << JsonStatus(UnigramJson());
  for (const auto& c : cases) {
    nlohmann::json j = UnigramJson();
    j[nlohmann::json::json_pointer(c.pointer)] = c.value;
    const absl::Status s = JsonStatus(j);
    EXPECT_EQ(s.code(), c.code) << c.pointer << ": " << s;
    EXPECT_NE(s.message().find(c.want), std::string_view::npos) << c.pointer << ": " << s;
    EXPECT_TRUE(std::string(s.message()).starts_with("tokenizer.json: ")) << s;
  }
}

}  // namespace
}  // namespace manyshot::tokenizer_test

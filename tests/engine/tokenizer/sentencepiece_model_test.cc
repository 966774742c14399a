// tokenizer.model without libsentencepiece: the wire-format reader, the conversion to BPE, and
// parity of the ids with libsentencepiece itself (the reference, linked into the tests only) on
// every parity sentence, for the real Llama-2 model (when ../shared has it) and for the model
// trained here (always).
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "gtest/gtest.h"
#include "tests/engine/tokenizer/sentencepiece_proto_builder.h"
#include "tests/engine/tokenizer/sp_processor.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

bool StartsWith(const absl::Status& s, std::string_view prefix) {
  return std::string(s.message()).starts_with(prefix);
}

using Proto = SentencePieceModelProto;

// A small Llama-style BPE model: <unk> <s> </s>, 256 byte pieces, then a few merged pieces.
std::string HandMadeModel() {
  std::string m = PieceMsg("<unk>", 0, 2) + PieceMsg("<s>", 0, 3) + PieceMsg("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    m += PieceMsg(name, 0, 6);
  }
  float score = 0;
  for (const char* piece : {"\xE2\x96\x81t", "he", "\xE2\x96\x81the", "in",
                            "\xE2\x96\x81"
                            "a",
                            "er", "\xE2\x96\x81", "t", "h", "e", "a", "i", "n", "r", "o"}) {
    m += PieceMsg(piece, score, 1);
    score -= 1;
  }
  m += LenField(2, VarintField(3, 2) + VarintField(35, 1) + VarintField(40, 0) +
                       VarintField(41, 1) + VarintField(42, 2) + VarintField(43, -1));
  m += LenField(3, LenField(1, "identity") + VarintField(3, 1) + VarintField(4, 0));
  return m;
}

// --- libsentencepiece as the reference -----------------------------------------------------------

// What manyshot's tokenizer.model path promises: the text is split on the control and unknown
// pieces (leftmost, then longest), each piece becomes its id, and each stretch between them is
// encoded by libsentencepiece on its own.
std::vector<int32_t> ReferenceEncode(const SpProcessor& sp, std::string_view text) {
  std::vector<std::pair<std::string, int>> specials;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    if (sp.IsControl(id) || sp.IsUnknown(id)) specials.emplace_back(sp.IdToPiece(id), id);
  }
  std::vector<int32_t> out;
  std::vector<int> part;
  const auto encode = [&](std::string_view s) {
    if (s.empty()) return;
    EXPECT_EQ(sp.Encode(s, part), "");
    out.insert(out.end(), part.begin(), part.end());
  };
  size_t start = 0, pos = 0;
  while (pos < text.size()) {
    const std::pair<std::string, int>* best = nullptr;
    for (const auto& s : specials) {
      if (!s.first.empty() && text.substr(pos).starts_with(s.first) &&
          (best == nullptr || s.first.size() > best->first.size())) {
        best = &s;
      }
    }
    if (best == nullptr) {
      ++pos;
      continue;
    }
    encode(text.substr(start, pos - start));
    out.push_back(best->second);
    pos = start = pos + best->first.size();
  }
  encode(text.substr(start));
  return out;
}

bool HasSpecialPiece(const std::string& line) {
  for (const char* s : {"<s>", "</s>", "<unk>"}) {
    if (line.find(s) != std::string::npos) return true;
  }
  return false;
}

fs::path TrainedModelPath() {
  auto p = FindOrTrainLlamaTokenizerModel(ScratchDir() / "no_shared",
                                          fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : fs::path();
}

// Every parity sentence: ids equal to libsentencepiece's, and decode(encode(x)) == x (and equal
// to libsentencepiece's DecodeIds) for text without special pieces.
void CheckParity(const fs::path& model_path, const char* label) {
  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromFile(model_path.string()), "") << model_path;
  const fs::path dir = ScratchDir() / (std::string("sp_parity_") + label);
  fs::create_directories(dir);
  fs::copy_file(model_path, dir / "tokenizer.model", fs::copy_options::overwrite_existing);
  const auto t0 = std::chrono::steady_clock::now();
  auto tok = LoadTokenizer(dir);
  const auto load_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->kind(), "sentencepiece-model");
  EXPECT_EQ((*tok)->vocab_size(), sp.GetPieceSize());
  EXPECT_EQ((*tok)->bos_id(), sp.bos_id());
  EXPECT_EQ((*tok)->eos_id(), sp.eos_id());
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    ASSERT_EQ((*tok)->IdToToken(id), sp.IdToPiece(id)) << id;
    ASSERT_EQ((*tok)->TokenToId(sp.IdToPiece(id)), id) << id;
  }

  const auto lines = ReadLines(SentencesFile());
  ASSERT_GE(lines.size(), 10000u);
  int compared = 0, mismatches = 0, round_trips = 0, with_specials = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto got = (*tok)->Encode(lines[i]);
    ASSERT_TRUE(got.ok()) << lines[i];
    ++compared;
    if (*got != ReferenceEncode(sp, lines[i]) && ++mismatches <= 5) {
      ADD_FAILURE() << label << " line " << i + 1 << ": " << lines[i];
    }
    auto text = (*tok)->Decode(*got);
    ASSERT_TRUE(text.ok());
    if (HasSpecialPiece(lines[i])) {
      ++with_specials;
      continue;
    }
    ++round_trips;
    EXPECT_EQ(*text, lines[i]) << label << " line " << i + 1;
    EXPECT_EQ(*text, sp.DecodeIds(std::vector<int>(got->begin(), got->end())));
  }
  std::printf(
      "[tokenizer.model parity, %s: %s] loaded in %lld ms; %d lines compared with "
      "libsentencepiece (%d with special pieces), %d mismatches; %d exact round trips\n",
      label, model_path.string().c_str(), static_cast<long long>(load_ms), compared, with_specials,
      mismatches, round_trips);
  EXPECT_EQ(mismatches, 0);
}

// --- Parity
// ----------------------------------------------------------------------------------------

TEST(SentencePieceModelTest, LlamaModelMatchesLibsentencepiece) {
  CheckParity(LlamaModelPath(), "llama");
}

TEST(SentencePieceModelTest, TrainedModelMatchesLibsentencepiece) {
  CheckParity(TrainedModelPath(), "trained");
}

TEST(SentencePieceModelTest, HandMadeModelMatchesLibsentencepiece) {
  const std::string bytes = HandMadeModel();
  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromSerializedProto(bytes), "");
  auto tok = LoadSentencePieceModel(bytes, {}, "0");
  ASSERT_TRUE(tok.ok()) << tok.status();
  for (const std::string text : {"the theater", "in the rain", "  a  ",
                                 "tea\xC3\xA9 \xF0\x9F\x98\x80", "x<s>the</s>", "", " "}) {
    auto got = (*tok)->Encode(text);
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, ReferenceEncode(sp, text)) << text;
  }
  EXPECT_EQ((*tok)->bos_id(), 1);
  EXPECT_EQ((*tok)->eos_id(), 2);
  EXPECT_EQ((*tok)->vocab_size(), sp.GetPieceSize());
}

TEST(SentencePieceModelTest, SpecialTokenNamesFromConfigOverrideTheModel) {
  const fs::path dir = ScratchDir() / "sp_with_config";
  fs::create_directories(dir);
  fs::copy_file(TrainedModelPath(), dir / "tokenizer.model", fs::copy_options::overwrite_existing);
  WriteFile(dir / "tokenizer_config.json", R"({"bos_token": null, "eos_token": "<s>"})");
  auto tok = LoadTokenizer(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), std::nullopt);
  EXPECT_EQ((*tok)->eos_id(), 1);
}

// --- The reader
// --------------------------------------------------------------------------------------

TEST(SentencePieceModelReaderTest, ReadsTheLlamaModel) {
  SpProcessor sp;
  ASSERT_EQ(sp.LoadFromFile(LlamaModelPath().string()), "");
  auto proto = ReadSentencePieceModel(ReadFileOrDie(LlamaModelPath()), "tokenizer.model");
  ASSERT_TRUE(proto.ok()) << proto.status();
  EXPECT_EQ(proto->model_type, Proto::ModelType::kBpe);
  EXPECT_TRUE(proto->byte_fallback);
  EXPECT_EQ(proto->normalizer.name, "identity");
  EXPECT_TRUE(proto->normalizer.precompiled_charsmap.empty());
  EXPECT_TRUE(proto->normalizer.add_dummy_prefix);
  EXPECT_FALSE(proto->normalizer.remove_extra_whitespaces);
  EXPECT_TRUE(proto->normalizer.escape_whitespaces);
  EXPECT_EQ(proto->unk_id, 0);
  EXPECT_EQ(proto->bos_id, 1);
  EXPECT_EQ(proto->eos_id, 2);
  EXPECT_EQ(proto->pad_id, -1);
  EXPECT_EQ(proto->bos_piece, "<s>");
  EXPECT_EQ(proto->eos_piece, "</s>");
  ASSERT_EQ(static_cast<int>(proto->pieces.size()), sp.GetPieceSize());
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    const Proto::Piece& p = proto->pieces[static_cast<size_t>(id)];
    ASSERT_EQ(p.piece, sp.IdToPiece(id));
    ASSERT_EQ(p.type == Proto::PieceType::kControl, sp.IsControl(id)) << id;
    ASSERT_EQ(p.type == Proto::PieceType::kUnknown, sp.IsUnknown(id)) << id;
    ASSERT_EQ(p.type == Proto::PieceType::kByte, sp.IsByte(id)) << id;
  }
}

TEST(SentencePieceModelReaderTest, DefaultsForAbsentFields) {
  auto proto = ReadSentencePieceModel(LenField(1, LenField(1, "a")), "tokenizer.model");
  ASSERT_TRUE(proto.ok()) << proto.status();
  ASSERT_EQ(proto->pieces.size(), 1u);
  EXPECT_EQ(proto->pieces[0].piece, "a");
  EXPECT_EQ(proto->pieces[0].score, 0.0f);
  EXPECT_EQ(proto->pieces[0].type, Proto::PieceType::kNormal);
  EXPECT_EQ(proto->model_type, Proto::ModelType::kUnigram);
  EXPECT_FALSE(proto->byte_fallback);
  EXPECT_TRUE(proto->normalizer.add_dummy_prefix);
  EXPECT_TRUE(proto->normalizer.remove_extra_whitespaces);
  EXPECT_TRUE(proto->normalizer.escape_whitespaces);
  EXPECT_EQ(proto->unk_piece, "<unk>");
  EXPECT_FALSE(proto->has_denormalizer);
}

TEST(SentencePieceModelReaderTest, SkipsUnknownFieldsAndMergesRepeatedMessages) {
  const std::string unknown = VarintField(99, 7) + Tag(98, 1) + std::string(8, 'x') +
                              LenField(97, "junk") + FloatField(96, 1.5f);
  const std::string bytes =
      unknown +
      LenField(1, LenField(1, "ab") + unknown + FloatField(2, -2.5f) + VarintField(3, 6)) +
      LenField(2, VarintField(3, 2) + unknown + VarintField(43, -1)) + LenField(4, "self test") +
      LenField(2, VarintField(35, 1)) + LenField(3, unknown + VarintField(3, 0)) +
      LenField(5, LenField(1, "denorm")) + unknown;
  auto proto = ReadSentencePieceModel(bytes, "tokenizer.model");
  ASSERT_TRUE(proto.ok()) << proto.status();
  ASSERT_EQ(proto->pieces.size(), 1u);
  EXPECT_EQ(proto->pieces[0].piece, "ab");
  EXPECT_EQ(proto->pieces[0].score, -2.5f);
  EXPECT_EQ(proto->pieces[0].type, Proto::PieceType::kByte);
  EXPECT_EQ(proto->model_type, Proto::ModelType::kBpe);  // kept from the first trainer_spec
  EXPECT_TRUE(proto->byte_fallback);                     // from the second
  EXPECT_EQ(proto->pad_id, -1);                          // a 10-byte negative varint
  EXPECT_FALSE(proto->normalizer.add_dummy_prefix);
  EXPECT_TRUE(proto->has_denormalizer);
  EXPECT_EQ(proto->denormalizer.name, "denorm");
}

TEST(SentencePieceModelReaderTest, MalformedInputIsAnErrorNamingTheFile) {
  const std::string piece = LenField(1, "a");
  const struct {
    std::string bytes;
    const char* want;
  } cases[] = {
      {"", "empty"},
      {"\x0A", "truncated varint"},
      {"\x0A\x05"
       "ab",
       "runs past the end"},
      {"\x0A\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\x7F", "overflows 64 bits"},
      {"\x0A\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", "varint"},
      {"\x0E", "invalid wire type 6"},
      {"\x0F", "invalid wire type 7"},
      {"\x0B", "field pieces has wire type 3, expected 2"},
      {Tag(99, 4), "unexpected group"},
      {std::string("\x00\x01", 2), "invalid field tag"},
      {"\x08\x01", "field pieces has wire type 0, expected 2"},
      {LenField(1, piece + VarintField(3, 9)), "pieces[0]: field type has unknown value 9"},
      {LenField(1, piece + VarintField(3, 0)), "unknown value 0"},
      {LenField(1, piece + Tag(2, 5) + "ab"), "truncated fixed32"},
      {LenField(1, piece + VarintField(2, 1)), "field score has wire type 0, expected 5"},
      {LenField(2, VarintField(3, 7)), "trainer_spec: field model_type has unknown value 7"},
      {LenField(2, LenField(35, "x")), "field byte_fallback has wire type 2"},
      {LenField(3, VarintField(1, 1)), "normalizer_spec: field name has wire type 0"},
      {LenField(3, Tag(9, 1) + "1234"), "truncated fixed64"},
      {LenField(1, piece) + LenField(1, LenField(1, "b") + "\x0A"), "pieces[1]: truncated varint"},
      {LenField(1, piece + Tag(99, 3)), "pieces[0]: unexpected group"},
  };
  for (const auto& c : cases) {
    auto proto = ReadSentencePieceModel(c.bytes, "tokenizer.model");
    ASSERT_FALSE(proto.ok()) << c.want;
    EXPECT_EQ(proto.status().code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_TRUE(StartsWith(proto.status(), "tokenizer.model: ")) << proto.status();
    EXPECT_NE(proto.status().message().find(c.want), std::string_view::npos)
        << c.want << ": " << proto.status();
  }
}

TEST(SentencePieceModelReaderTest, EveryPrefixIsHandled) {
  const std::string bytes = HandMadeModel();
  int ok = 0;
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto proto = ReadSentencePieceModel(std::string_view(bytes).substr(0, n), "tokenizer.model");
    if (proto.ok()) {
      ++ok;  // a prefix that ends between top-level fields is a valid, smaller message
      (void)LoadSentencePieceModel(bytes.substr(0, n), {}, "0");
    }
  }
  EXPECT_GT(ok, 0);
}

// --- Conversion errors -------------------------------------------------------------------------

absl::Status LoadStatus(const std::string& bytes) {
  auto tok = LoadSentencePieceModel(bytes, {}, "0");
  return tok.ok() ? absl::OkStatus() : tok.status();
}

TEST(SentencePieceModelTest, UnsupportedModelsAreUnimplementedNamingWhat) {
  const std::string base = HandMadeModel();
  ASSERT_TRUE(LoadStatus(base).ok()) << LoadStatus(base);
  // Appended fields override the earlier ones (protobuf merges repeated messages).
  const struct {
    std::string append;
    const char* want;
  } cases[] = {
      {LenField(2, VarintField(3, 3)), "SentencePiece model type WORD"},
      {LenField(2, VarintField(3, 4)), "SentencePiece model type CHAR"},
      {LenField(3, LenField(1, "nmt_nfkc") + LenField(2, "rules")),
       "normalization rule \"nmt_nfkc\""},
      {LenField(3, VarintField(4, 1)), "remove_extra_whitespaces"},
      {LenField(3, VarintField(5, 0)), "escape_whitespaces"},
      {LenField(5, LenField(2, "rules")), "denormalization rule"},
      {LenField(2, VarintField(24, 1)), "treat_whitespace_as_suffix"},
      {PieceMsg("\xE2\x96\x81<mask>", 0, 4), "user-defined piece with"},
  };
  for (const auto& c : cases) {
    const absl::Status s = LoadStatus(base + c.append);
    EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << c.want << ": " << s;
    EXPECT_NE(s.message().find(c.want), std::string_view::npos) << s;
    EXPECT_NE(s.message().find("tokenizer.json"), std::string_view::npos) << s;
    EXPECT_TRUE(StartsWith(s, "tokenizer.model: ")) << s;
  }
}

TEST(SentencePieceModelTest, InvalidModelsAreRejectedLikeLibsentencepiece) {
  const std::string bpe = LenField(2, VarintField(3, 2)) + LenField(3, VarintField(4, 0));
  const std::string unk = PieceMsg("<unk>", 0, 2);
  const struct {
    std::string bytes;
    const char* want;
    bool sentencepiece_refuses = true;
  } cases[] = {
      {bpe, "no pieces"},
      {bpe + PieceMsg("a", 0, 1), "no unknown piece"},
      {bpe + unk + PieceMsg("<unk>", 0, 2), "defined twice"},
      {bpe + unk + PieceMsg("<unk2>", 0, 2), "more than one unknown piece"},
      {bpe + unk + PieceMsg("", 0, 1), "piece 1 is empty"},
      {bpe + unk + PieceMsg("\xFF", 0, 1), "piece 1 is not UTF-8", false},  // stricter
      {bpe + unk + PieceMsg("<0x4>", 0, 6), "not of the form <0xNN>"},
  };
  for (const auto& c : cases) {
    const absl::Status s = LoadStatus(c.bytes);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.want << ": " << s;
    EXPECT_NE(s.message().find(c.want), std::string_view::npos) << s;
    // libsentencepiece refuses them too.
    SpProcessor sp;
    if (c.sentencepiece_refuses) {
      EXPECT_NE(sp.LoadFromSerializedProto(c.bytes), "") << c.want;
    }
  }
}

TEST(SentencePieceModelTest, LoadTokenizerErrorsNameTheDirectoryAndFile) {
  const fs::path dir = ScratchDir() / "sp_garbage";
  fs::create_directories(dir);
  WriteFile(dir / "tokenizer.model", "\x0A\x7F garbage");
  auto tok = LoadTokenizer(dir);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find(dir.string() + ": tokenizer.model: "), std::string::npos)
      << tok.status();
}

}  // namespace
}  // namespace manyshot::tokenizer_test

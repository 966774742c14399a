// tokenizer.model through libsentencepiece.
//
// Encode splits the text on the model's control and unknown pieces (<s>, </s>, <unk>) first and
// encodes each stretch between them on its own, as Hugging Face's LlamaTokenizer (legacy mode)
// and the tokenizer.json our converter writes both do. Decode mirrors the tokenizer.json
// decoder (metaspace -> space, byte pieces reassembled, one leading space stripped, control
// pieces verbatim) rather than DecodeIds, which drops control pieces and renders <unk> as " ⁇ ".
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sp_processor.h"
#include "engine/tokenizer/special_ids.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<SpProcessor> sp, const SpecialTokenNames& names,
                         std::string fingerprint)
      : sp_(std::move(sp)), added_(SpecialPieces(*sp_)), fingerprint_(std::move(fingerprint)) {
    const auto lookup = [this](std::string_view name) { return TokenToId(name); };
    bos_ = names.bos.has_value() ? ResolveSpecialId(names.bos, lookup, {}) : Id(sp_->bos_id());
    eos_ = names.eos.has_value() ? ResolveSpecialId(names.eos, lookup, {}) : Id(sp_->eos_id());
    space_ = TokenToId(kMetaspace);
    // Whether the model prepends a space: its encoding of "a" then starts with the metaspace.
    const auto pieces = sp_->EncodeAsPieces("a");
    dummy_prefix_ = !pieces.empty() && pieces[0].starts_with(kMetaspace);
  }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text) const override {
    if (absl::Status s = ValidateUtf8(text); !s.ok()) return s;
    std::vector<int32_t> ids;
    std::vector<Segment> segments;
    added_.Split(text, segments);
    std::vector<int> part;
    for (const Segment& seg : segments) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      const std::string error = sp_->Encode(text.substr(seg.begin, seg.end - seg.begin), part);
      if (!error.empty()) return absl::InternalError(absl::StrCat("sentencepiece: ", error));
      ids.insert(ids.end(), part.begin(), part.end());
    }
    return ids;
  }

  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::string bytes;
    std::string pending;  // byte pieces not yet flushed
    const auto flush = [&] {
      if (ValidateUtf8(pending).ok()) {
        bytes += pending;
      } else {
        for (size_t i = 0; i < pending.size(); ++i) bytes += "\xEF\xBF\xBD";
      }
      pending.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("token id ", id, " is out of range [0, ", vocab_size(), ")"));
      }
      const std::string piece = sp_->IdToPiece(id);
      if (sp_->IsByte(id)) {
        if (const auto b = ParseByteToken(piece)) {
          pending.push_back(static_cast<char>(*b));
          continue;
        }
      }
      flush();
      if (sp_->IsControl(id) || sp_->IsUnknown(id)) {
        bytes += piece;
      } else {
        bytes += ReplaceAll(piece, kMetaspace, " ");
      }
    }
    flush();
    if (dummy_prefix_ && !bytes.empty() && bytes[0] == ' ') bytes.erase(0, 1);
    return Utf8Lossy(bytes);
  }

  int64_t vocab_size() const override { return sp_->GetPieceSize(); }

  std::optional<int32_t> TokenToId(std::string_view token) const override {
    const int id = sp_->PieceToId(token);
    // PieceToId answers the unk id for unknown pieces; only "<unk>" itself maps to it.
    if (id < 0 || (sp_->IsUnknown(id) && sp_->IdToPiece(id) != token)) return std::nullopt;
    return id;
  }

  std::string IdToToken(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return "";
    return sp_->IdToPiece(id);
  }

  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  std::optional<int32_t> space_id() const override { return space_; }
  std::string fingerprint() const override { return fingerprint_; }
  std::string kind() const override { return "sentencepiece-model"; }

 private:
  static std::optional<int32_t> Id(int id) {
    return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
  }

  // Control and unknown pieces, matched in raw text like Hugging Face's special tokens.
  static std::vector<AddedToken> SpecialPieces(const SpProcessor& sp) {
    std::vector<AddedToken> out;
    for (int id = 0; id < sp.GetPieceSize(); ++id) {
      if (!sp.IsControl(id) && !sp.IsUnknown(id)) continue;
      AddedToken t;
      t.id = id;
      t.content = sp.IdToPiece(id);
      t.special = true;
      if (!t.content.empty()) out.push_back(std::move(t));
    }
    return out;
  }

  std::unique_ptr<SpProcessor> sp_;
  AddedTokenMatcher added_;
  std::string fingerprint_;
  std::optional<int32_t> bos_, eos_, space_;
  bool dummy_prefix_ = true;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceModel(std::string_view model_proto,
                                                                  const SpecialTokenNames& names,
                                                                  std::string fingerprint) {
  auto sp = std::make_unique<SpProcessor>();
  const std::string error = sp->LoadFromSerializedProto(model_proto);
  if (!error.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer.model: not a valid SentencePiece model: ", error));
  }
  if (sp->GetPieceSize() <= 0) return absl::InvalidArgumentError("tokenizer.model: no pieces");
  return std::make_unique<SentencePieceTokenizer>(std::move(sp), names, std::move(fingerprint));
}

}  // namespace manyshot

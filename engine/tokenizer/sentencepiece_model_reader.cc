#include "engine/tokenizer/sentencepiece_model_reader.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/text_util.h"

namespace manyshot {
namespace {

using Proto = SentencePieceModelProto;

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kStartGroup = 3;
constexpr uint32_t kEndGroup = 4;
constexpr uint32_t kFixed32 = 5;

// Real models have 32k-256k pieces; this only bounds memory on garbage that parses.
constexpr size_t kMaxPieces = size_t{1} << 24;

// A cursor over one message's bytes. Every read checks the bounds; errors name the source, the
// message being read and the absolute byte offset in the file.
class WireReader {
 public:
  WireReader(std::string_view data, size_t base, std::string_view source, std::string where)
      : data_(data), base_(base), source_(source), where_(std::move(where)) {}

  bool AtEnd() const { return pos_ >= data_.size(); }
  size_t offset() const { return base_ + pos_; }
  std::string_view source() const { return source_; }

  absl::Status Error(std::string_view what, size_t at) const {
    return absl::InvalidArgumentError(absl::StrCat(ToAbsl(source_), ": not a valid SentencePiece ",
                                                   "model: ", where_, ": ", ToAbsl(what),
                                                   " at byte ", at));
  }

  absl::Status Varint(uint64_t& value) {
    const size_t start = offset();
    value = 0;
    for (int i = 0; i < 10; ++i) {
      if (pos_ >= data_.size()) return Error("truncated varint", start);
      const auto byte = static_cast<uint8_t>(data_[pos_++]);
      if (i == 9 && byte > 1) return Error("varint overflows 64 bits", start);
      value |= static_cast<uint64_t>(byte & 0x7F) << (7 * i);
      if ((byte & 0x80) == 0) return absl::OkStatus();
    }
    return Error("varint longer than 10 bytes", start);
  }

  // field >= 1; wire is one of the six wire types.
  absl::Status Tag(uint32_t& field, uint32_t& wire) {
    const size_t start = offset();
    uint64_t tag = 0;
    if (absl::Status s = Varint(tag); !s.ok()) return s;
    if (tag > 0xFFFFFFFFu || (tag >> 3) == 0) return Error("invalid field tag", start);
    field = static_cast<uint32_t>(tag >> 3);
    wire = static_cast<uint32_t>(tag & 7);
    if (wire > kFixed32) return Error(absl::StrCat("invalid wire type ", wire), start);
    return absl::OkStatus();
  }

  absl::Status Fixed32(uint32_t& value) {
    if (data_.size() - pos_ < 4) return Error("truncated fixed32", offset());
    unsigned char b[4];
    std::memcpy(b, data_.data() + pos_, 4);
    value = static_cast<uint32_t>(b[0]) | static_cast<uint32_t>(b[1]) << 8 |
            static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
    pos_ += 4;
    return absl::OkStatus();
  }

  // A length-delimited field's bytes; *base is their absolute offset.
  absl::Status Bytes(std::string_view& bytes, size_t* base) {
    const size_t start = offset();
    uint64_t length = 0;
    if (absl::Status s = Varint(length); !s.ok()) return s;
    if (length > data_.size() - pos_) {
      return Error(absl::StrCat("length ", length, " runs past the end of the message"), start);
    }
    if (base != nullptr) *base = offset();
    bytes = data_.substr(pos_, static_cast<size_t>(length));
    pos_ += static_cast<size_t>(length);
    return absl::OkStatus();
  }

  absl::Status Skip(uint32_t wire) {
    switch (wire) {
      case kVarint: {
        uint64_t ignored;
        return Varint(ignored);
      }
      case kFixed64:
        if (data_.size() - pos_ < 8) return Error("truncated fixed64", offset());
        pos_ += 8;
        return absl::OkStatus();
      case kLengthDelimited: {
        std::string_view ignored;
        return Bytes(ignored, nullptr);
      }
      case kFixed32: {
        uint32_t ignored;
        return Fixed32(ignored);
      }
      default:  // SentencePiece's proto has no groups.
        return Error("unexpected group", offset());
    }
  }

  // The wire type a known field must have.
  absl::Status Expect(uint32_t wire, uint32_t want, std::string_view field, size_t at) const {
    if (wire == want) return absl::OkStatus();
    return Error(
        absl::StrCat("field ", ToAbsl(field), " has wire type ", wire, ", expected ", want), at);
  }

  absl::Status Int32(uint32_t wire, std::string_view field, int32_t& out) {
    const size_t at = offset();
    if (absl::Status s = Expect(wire, kVarint, field, at); !s.ok()) return s;
    uint64_t v = 0;
    if (absl::Status s = Varint(v); !s.ok()) return s;
    out = static_cast<int32_t>(static_cast<uint32_t>(v));  // protobuf's int32 truncation
    return absl::OkStatus();
  }

  absl::Status Bool(uint32_t wire, std::string_view field, bool& out) {
    const size_t at = offset();
    if (absl::Status s = Expect(wire, kVarint, field, at); !s.ok()) return s;
    uint64_t v = 0;
    if (absl::Status s = Varint(v); !s.ok()) return s;
    out = v != 0;
    return absl::OkStatus();
  }

  absl::Status Float(uint32_t wire, std::string_view field, float& out) {
    const size_t at = offset();
    if (absl::Status s = Expect(wire, kFixed32, field, at); !s.ok()) return s;
    uint32_t bits = 0;
    if (absl::Status s = Fixed32(bits); !s.ok()) return s;
    std::memcpy(&out, &bits, sizeof(out));
    return absl::OkStatus();
  }

  absl::Status String(uint32_t wire, std::string_view field, std::string_view& out,
                      size_t* base = nullptr) {
    const size_t at = offset();
    if (absl::Status s = Expect(wire, kLengthDelimited, field, at); !s.ok()) return s;
    return Bytes(out, base);
  }

  // An enum in [lo, hi]; anything else is an error (not silently the default).
  absl::Status Enum(uint32_t wire, std::string_view field, int32_t lo, int32_t hi, int32_t& out) {
    const size_t at = offset();
    int32_t v = 0;
    if (absl::Status s = Int32(wire, field, v); !s.ok()) return s;
    if (v < lo || v > hi) {
      return Error(absl::StrCat("field ", ToAbsl(field), " has unknown value ", v), at);
    }
    out = v;
    return absl::OkStatus();
  }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  size_t base_;
  std::string_view source_;
  std::string where_;
};

absl::Status ReadPiece(WireReader& r, Proto::Piece& piece) {
  while (!r.AtEnd()) {
    uint32_t field = 0, wire = 0;
    if (absl::Status s = r.Tag(field, wire); !s.ok()) return s;
    absl::Status s;
    switch (field) {
      case 1: {
        std::string_view text;
        s = r.String(wire, "piece", text);
        piece.piece = std::string(text);
        break;
      }
      case 2:
        s = r.Float(wire, "score", piece.score);
        break;
      case 3: {
        int32_t type = 0;
        s = r.Enum(wire, "type", 1, 6, type);
        if (s.ok()) piece.type = static_cast<Proto::PieceType>(type);
        break;
      }
      default:
        s = r.Skip(wire);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadTrainerSpec(WireReader& r, Proto& proto) {
  while (!r.AtEnd()) {
    uint32_t field = 0, wire = 0;
    if (absl::Status s = r.Tag(field, wire); !s.ok()) return s;
    absl::Status s;
    std::string_view text;
    const auto string_field = [&](std::string_view name, std::string& out) {
      absl::Status st = r.String(wire, name, text);
      if (st.ok()) out = std::string(text);
      return st;
    };
    switch (field) {
      case 3: {
        int32_t type = 0;
        s = r.Enum(wire, "model_type", 1, 4, type);
        if (s.ok()) proto.model_type = static_cast<Proto::ModelType>(type);
        break;
      }
      case 24:
        s = r.Bool(wire, "treat_whitespace_as_suffix", proto.treat_whitespace_as_suffix);
        break;
      case 35:
        s = r.Bool(wire, "byte_fallback", proto.byte_fallback);
        break;
      case 40:
        s = r.Int32(wire, "unk_id", proto.unk_id);
        break;
      case 41:
        s = r.Int32(wire, "bos_id", proto.bos_id);
        break;
      case 42:
        s = r.Int32(wire, "eos_id", proto.eos_id);
        break;
      case 43:
        s = r.Int32(wire, "pad_id", proto.pad_id);
        break;
      case 45:
        s = string_field("unk_piece", proto.unk_piece);
        break;
      case 46:
        s = string_field("bos_piece", proto.bos_piece);
        break;
      case 47:
        s = string_field("eos_piece", proto.eos_piece);
        break;
      case 48:
        s = string_field("pad_piece", proto.pad_piece);
        break;
      default:
        s = r.Skip(wire);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadNormalizerSpec(WireReader& r, Proto::Normalizer& n) {
  while (!r.AtEnd()) {
    uint32_t field = 0, wire = 0;
    if (absl::Status s = r.Tag(field, wire); !s.ok()) return s;
    absl::Status s;
    std::string_view text;
    switch (field) {
      case 1:
        s = r.String(wire, "name", text);
        if (s.ok()) n.name = std::string(text);
        break;
      case 2:
        s = r.String(wire, "precompiled_charsmap", text);
        if (s.ok()) n.precompiled_charsmap = std::string(text);
        break;
      case 3:
        s = r.Bool(wire, "add_dummy_prefix", n.add_dummy_prefix);
        break;
      case 4:
        s = r.Bool(wire, "remove_extra_whitespaces", n.remove_extra_whitespaces);
        break;
      case 5:
        s = r.Bool(wire, "escape_whitespaces", n.escape_whitespaces);
        break;
      default:
        s = r.Skip(wire);
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view ModelTypeName(SentencePieceModelProto::ModelType type) {
  switch (type) {
    case Proto::ModelType::kUnigram:
      return "UNIGRAM";
    case Proto::ModelType::kBpe:
      return "BPE";
    case Proto::ModelType::kWord:
      return "WORD";
    case Proto::ModelType::kChar:
      return "CHAR";
  }
  return "UNKNOWN";
}

std::optional<int32_t> ControlPieceId(const SentencePieceModelProto& proto, std::string_view name) {
  for (size_t i = 0; i < proto.pieces.size(); ++i) {
    if (proto.pieces[i].piece != name) continue;
    if (proto.pieces[i].type != Proto::PieceType::kControl) return std::nullopt;
    return static_cast<int32_t>(i);
  }
  return std::nullopt;
}

absl::StatusOr<SentencePieceModelProto> ReadSentencePieceModel(std::string_view bytes,
                                                               std::string_view source) {
  Proto proto;
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(source), ": not a valid SentencePiece model: the file is empty"));
  }
  WireReader r(bytes, 0, source, "ModelProto");
  while (!r.AtEnd()) {
    uint32_t field = 0, wire = 0;
    const size_t at = r.offset();
    if (absl::Status s = r.Tag(field, wire); !s.ok()) return s;
    if (field < 1 || field > 5 || field == 4) {  // 4: self_test_data
      if (absl::Status s = r.Skip(wire); !s.ok()) return s;
      continue;
    }
    static constexpr std::string_view kNames[] = {
        "", "pieces", "trainer_spec", "normalizer_spec", "", "denormalizer_spec"};
    std::string_view body;
    size_t base = 0;
    if (absl::Status s = r.String(wire, kNames[field], body, &base); !s.ok()) return s;
    absl::Status s;
    switch (field) {
      case 1: {
        if (proto.pieces.size() >= kMaxPieces) return r.Error("too many pieces", at);
        WireReader sub(body, base, source, absl::StrCat("pieces[", proto.pieces.size(), "]"));
        s = ReadPiece(sub, proto.pieces.emplace_back());
        break;
      }
      case 2: {
        WireReader sub(body, base, source, "trainer_spec");
        s = ReadTrainerSpec(sub, proto);
        break;
      }
      case 3: {
        WireReader sub(body, base, source, "normalizer_spec");
        s = ReadNormalizerSpec(sub, proto.normalizer);
        break;
      }
      case 5: {
        WireReader sub(body, base, source, "denormalizer_spec");
        proto.has_denormalizer = true;
        s = ReadNormalizerSpec(sub, proto.denormalizer);
        break;
      }
    }
    if (!s.ok()) return s;
  }
  return proto;
}

}  // namespace manyshot

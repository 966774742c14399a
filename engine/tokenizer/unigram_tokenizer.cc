#include "engine/tokenizer/unigram_tokenizer.h"

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/special_ids.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

using Proto = SentencePieceModelProto;
using PieceType = Proto::PieceType;

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

std::vector<AddedToken> SpecialPieces(const std::vector<Proto::Piece>& pieces) {
  std::vector<AddedToken> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].type != PieceType::kUnknown && pieces[i].type != PieceType::kControl) continue;
    AddedToken t;
    t.id = static_cast<int32_t>(i);
    t.content = pieces[i].piece;
    t.special = true;
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

UnigramTokenizer::UnigramTokenizer(UnigramTokenizerSpec spec)
    : spec_(std::move(spec)), normalizer_(spec_.normalizer), added_(spec_.added_tokens) {
  is_added_.assign(spec_.model->pieces().size(), false);
  for (const AddedToken& t : added_.tokens()) is_added_[static_cast<size_t>(t.id)] = true;
  space_id_ = TokenToId(kSentencePieceSpace);
}

absl::StatusOr<std::vector<int32_t>> UnigramTokenizer::Encode(std::string_view text) const {
  if (absl::Status s = ValidateUtf8(text); !s.ok()) return s;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  thread_local std::vector<Segment> segments;
  added_.Split(text, segments);
  for (const Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      spec_.model->Encode(
          normalizer_.Normalize(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0), ids);
    }
  }
  return ids;
}

absl::StatusOr<std::string> UnigramTokenizer::Decode(absl::Span<const int32_t> ids) const {
  const auto& pieces = spec_.model->pieces();
  const SentencePieceNormalizerSpec& norm = normalizer_.spec();
  // libsentencepiece drops the "▁" that starts the text only for these models.
  const bool strip_first_space = norm.add_dummy_prefix || norm.remove_extra_whitespaces;
  std::string text;
  std::string bytes;  // byte pieces not yet written
  const auto flush_bytes = [&] {
    // Each well-formed character as is, each other byte as U+FFFD (sentencepiece's
    // ProcessBytePieces).
    for (size_t pos = 0; pos < bytes.size();) {
      const size_t len = Utf8SequenceLength(bytes, pos);
      if (len == 0) {
        text.append(kReplacementCharacter);
        ++pos;
      } else {
        text.append(bytes, pos, len);
        pos += len;
      }
    }
    bytes.clear();
  };
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= pieces.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is out of range [0, ", pieces.size(), ")"));
    }
    const Proto::Piece& piece = pieces[static_cast<size_t>(id)];
    if (piece.type == PieceType::kByte) {
      bytes.push_back(static_cast<char>(*ParseByteToken(piece.piece)));
      continue;
    }
    flush_bytes();
    if (is_added_[static_cast<size_t>(id)]) {
      text.append(piece.piece);
      continue;
    }
    std::string_view surface = piece.piece;
    if (strip_first_space && text.empty() && surface.starts_with(kSentencePieceSpace)) {
      surface.remove_prefix(kSentencePieceSpace.size());
    }
    text.append(ReplaceAll(surface, kSentencePieceSpace, " "));
  }
  flush_bytes();
  return text;
}

std::optional<int32_t> UnigramTokenizer::TokenToId(std::string_view token) const {
  const auto& vocab = spec_.model->vocab();
  const auto it = vocab.find(token);
  if (it == vocab.end()) return std::nullopt;
  return it->second;
}

std::string UnigramTokenizer::IdToToken(int32_t id) const {
  const auto& pieces = spec_.model->pieces();
  if (id < 0 || static_cast<size_t>(id) >= pieces.size()) return "";
  return pieces[static_cast<size_t>(id)].piece;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BuildUnigramTokenizer(SentencePieceModelProto proto,
                                                                 UnigramBuildOptions options) {
  const std::string_view source = options.source;
  const auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat(ToAbsl(source), ": not a valid SentencePiece model: ", ToAbsl(what)));
  };
  const auto unsupported = [&](std::string_view what) {
    return absl::UnimplementedError(
        absl::StrCat(ToAbsl(source), ": ", ToAbsl(what), " is not supported for Unigram models"));
  };
  if (proto.model_type != Proto::ModelType::kUnigram) {
    return bad(absl::StrCat("model type ", ToAbsl(ModelTypeName(proto.model_type)),
                            " where a Unigram model was expected"));
  }
  if (proto.treat_whitespace_as_suffix) {
    return unsupported("trainer_spec.treat_whitespace_as_suffix");
  }
  if (proto.has_denormalizer && !proto.denormalizer.precompiled_charsmap.empty()) {
    return unsupported(absl::StrCat("denormalization rule \"", proto.denormalizer.name, "\""));
  }

  SentencePieceNormalizerSpec normalizer;
  if (!proto.normalizer.precompiled_charsmap.empty()) {
    auto rules = PrecompiledCharsmap::Parse(proto.normalizer.precompiled_charsmap, source);
    if (!rules.ok()) return rules.status();
    normalizer.rules = std::move(*rules);
  }
  normalizer.add_dummy_prefix = proto.normalizer.add_dummy_prefix;
  normalizer.remove_extra_whitespaces = proto.normalizer.remove_extra_whitespaces;
  normalizer.escape_whitespaces = proto.normalizer.escape_whitespaces;
  normalizer.unicode_whitespace_is_space = options.unicode_whitespace_is_space;
  normalizer.dummy_prefix_at_start_only = options.dummy_prefix_at_start_only;
  for (const auto& p : proto.pieces) {
    if (p.type == PieceType::kUserDefined) normalizer.verbatim_pieces.push_back(p.piece);
  }

  UnigramTokenizerSpec spec;
  spec.added_tokens = SpecialPieces(proto.pieces);
  // bos/eos: the configured names when tokenizer_config.json or special_tokens_map.json give
  // them, else what libsentencepiece answers (T5: no bos, </s> as eos).
  const auto lookup = [&](std::string_view name) -> std::optional<int32_t> {
    for (size_t i = 0; i < proto.pieces.size(); ++i) {
      if (proto.pieces[i].piece == name) return static_cast<int32_t>(i);
    }
    return std::nullopt;
  };
  spec.bos_id = options.names.bos.has_value() ? ResolveSpecialId(options.names.bos, lookup, {})
                                              : ControlPieceId(proto, proto.bos_piece);
  spec.eos_id = options.names.eos.has_value() ? ResolveSpecialId(options.names.eos, lookup, {})
                                              : ControlPieceId(proto, proto.eos_piece);
  auto model = UnigramModel::Create(std::move(proto.pieces), proto.byte_fallback);
  if (!model.ok()) return bad(std::string(model.status().message()));
  spec.model = std::move(*model);
  spec.normalizer = std::move(normalizer);

  spec.kind = std::move(options.kind);
  spec.fingerprint = std::move(options.fingerprint);
  return std::make_unique<UnigramTokenizer>(std::move(spec));
}

}  // namespace manyshot

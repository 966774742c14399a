// tokenizer.model (SentencePiece) -> BpeTokenizer, without libsentencepiece. Unigram models
// (T5's spiece.model) go to BuildUnigramTokenizer (unigram_tokenizer.h) instead.
//
// The model is read by sentencepiece_model_reader and converted at load time the way Hugging
// Face's LlamaConverter (and tools/tokenizer_parity/sp_model_to_tokenizer_json.py) converts it to
// a tokenizer.json: the vocabulary is the pieces in id order; merges are derived from the
// vocabulary as SentencePieceExtractor does (every split of a piece into two pieces that are both
// in the vocabulary, ordered by the piece's score, best first; control and unknown pieces score
// 0); BPE with fuse_unk and the model's byte_fallback; the normalizer prepends "▁" (when the model
// adds a dummy prefix) and replaces " " by "▁"; the decoder undoes that and reassembles byte
// pieces. Control and unknown pieces (<s>, </s>, <unk>) are special added tokens: the text is
// split on them first and each stretch between them is encoded on its own, as Hugging Face's
// LlamaTokenizer (legacy mode) does. Parity with libsentencepiece is tested in
// tests/engine/tokenizer/llama_parity_test.cc.
//
// Only what that conversion reproduces exactly is accepted: BPE models with identity
// normalization and whitespace escaping, as Llama-2 and Mistral ship. Anything else is an
// Unimplemented error naming the setting, never a silent approximation.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "engine/tokenizer/special_ids.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/unigram_tokenizer.h"
#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

using Proto = SentencePieceModelProto;
using PieceType = Proto::PieceType;

constexpr std::string_view kMetaspace = "\xE2\x96\x81";

// `source` names the file ("tokenizer.model", "spiece.model") at the start of every error.
absl::Status Bad(std::string_view source, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(ToAbsl(source), ": not a valid SentencePiece model: ", ToAbsl(what)));
}

absl::Status Unsupported(std::string_view source, std::string_view what) {
  return absl::UnimplementedError(
      absl::StrCat(ToAbsl(source), ": ", ToAbsl(what),
                   " is not supported (only Unigram models, and BPE models with identity "
                   "normalization as Llama-2 and Mistral ship); put the model's tokenizer.json in "
                   "the directory instead "
                   "(it is preferred to tokenizer.model when present)"));
}

// The settings the conversion cannot reproduce.
absl::Status CheckSupported(const Proto& proto, std::string_view source) {
  if (proto.model_type != Proto::ModelType::kBpe) {
    return Unsupported(
        source, absl::StrCat("SentencePiece model type ", ToAbsl(ModelTypeName(proto.model_type))));
  }
  if (!proto.normalizer.precompiled_charsmap.empty()) {
    return Unsupported(source, absl::StrCat("normalization rule \"", proto.normalizer.name, "\""));
  }
  if (proto.normalizer.remove_extra_whitespaces) {
    return Unsupported(source, "normalizer_spec.remove_extra_whitespaces");
  }
  if (!proto.normalizer.escape_whitespaces) {
    return Unsupported(source, "normalizer_spec.escape_whitespaces = false");
  }
  if (proto.has_denormalizer && !proto.denormalizer.precompiled_charsmap.empty()) {
    return Unsupported(source,
                       absl::StrCat("denormalization rule \"", proto.denormalizer.name, "\""));
  }
  if (proto.treat_whitespace_as_suffix) {
    return Unsupported(source, "trainer_spec.treat_whitespace_as_suffix");
  }
  for (const auto& p : proto.pieces) {
    // A user-defined piece is matched whole in the raw text (an added token below); one holding
    // the whitespace symbol would have to match after normalization instead.
    if (p.type == PieceType::kUserDefined && p.piece.find(kMetaspace) != std::string::npos) {
      return Unsupported(source,
                         absl::StrCat("a user-defined piece with \"\u2581\" (\"", p.piece, "\")"));
    }
  }
  return absl::OkStatus();
}

// SentencePieceExtractor.extract: for each piece in id order, its splits into two vocabulary
// pieces (at character boundaries) ordered by the parts' ids; then all of them stably sorted by
// the piece's score, best first.
std::vector<std::pair<std::string, std::string>> ExtractMerges(const Proto& proto,
                                                               const StringMap<int32_t>& vocab) {
  struct Merge {
    int32_t left, right;
    float score;
  };
  std::vector<Merge> merges;
  std::vector<Merge> local;
  for (const auto& p : proto.pieces) {
    const std::string_view piece = p.piece;
    const bool special = p.type == PieceType::kUnknown || p.type == PieceType::kControl;
    const float score = special ? 0.0f : p.score;
    local.clear();
    size_t cut = Utf8SequenceLength(piece, 0);
    while (cut > 0 && cut < piece.size()) {
      const auto l = vocab.find(piece.substr(0, cut));
      const auto r = vocab.find(piece.substr(cut));
      if (l != vocab.end() && r != vocab.end()) local.push_back({l->second, r->second, score});
      const size_t len = Utf8SequenceLength(piece, cut);
      cut = len == 0 ? 0 : cut + len;
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return std::pair(a.left, a.right) < std::pair(b.left, b.right);
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(merges.size());
  for (const Merge& m : merges) {
    out.emplace_back(proto.pieces[static_cast<size_t>(m.left)].piece,
                     proto.pieces[static_cast<size_t>(m.right)].piece);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Build(const Proto& proto, const SpecialTokenNames& names,
                                                 std::string fingerprint, std::string_view source) {
  if (proto.pieces.empty()) return Bad(source, "no pieces");
  if (absl::Status s = CheckSupported(proto, source); !s.ok()) return s;

  // The checks libsentencepiece makes when it loads a model.
  StringMap<int32_t> vocab;
  vocab.reserve(proto.pieces.size());
  std::optional<int32_t> unk;
  bool have_byte_pieces = false;
  for (size_t i = 0; i < proto.pieces.size(); ++i) {
    const Proto::Piece& p = proto.pieces[i];
    const auto id = static_cast<int32_t>(i);
    if (p.piece.empty()) return Bad(source, absl::StrCat("piece ", id, " is empty"));
    if (!ValidateUtf8(p.piece).ok())
      return Bad(source, absl::StrCat("piece ", id, " is not UTF-8"));
    if (!vocab.emplace(p.piece, id).second) {
      return Bad(source, absl::StrCat("piece \"", p.piece, "\" is defined twice"));
    }
    if (p.type == PieceType::kUnknown) {
      if (unk.has_value()) return Bad(source, "more than one unknown piece");
      unk = id;
    }
    if (p.type == PieceType::kByte) {
      if (!ParseByteToken(p.piece).has_value()) {
        return Bad(source, absl::StrCat("byte piece \"", p.piece, "\" is not of the form <0xNN>"));
      }
      have_byte_pieces = true;
    }
  }
  if (!unk.has_value()) return Bad(source, "no unknown piece (<unk>)");

  BpeTokenizerSpec spec;
  BpePipeline& p = spec.pipeline;
  if (proto.normalizer.add_dummy_prefix) p.prepend = std::string(kMetaspace);
  p.replacements.emplace_back(" ", std::string(kMetaspace));
  p.pre_tokenizer = BpePipeline::PreTokenizer::kNone;
  p.metaspace = std::string(kMetaspace);
  p.decoder = BpePipeline::Decoder::kMetaspace;
  p.decode_byte_fallback = have_byte_pieces;
  p.strip_leading_spaces = proto.normalizer.add_dummy_prefix ? 1 : 0;

  for (size_t i = 0; i < proto.pieces.size(); ++i) {
    const Proto::Piece& piece = proto.pieces[i];
    const bool user_defined = piece.type == PieceType::kUserDefined;  // Gemma's turn markers
    if (piece.type != PieceType::kUnknown && piece.type != PieceType::kControl && !user_defined) {
      continue;
    }
    AddedToken t;
    t.id = static_cast<int32_t>(i);
    t.content = piece.piece;
    t.special = !user_defined;
    spec.added_tokens.push_back(std::move(t));
  }

  const auto merges = ExtractMerges(proto, vocab);
  BpeOptions options;
  options.byte_level = false;
  options.byte_fallback = proto.byte_fallback;
  options.fuse_unk = true;  // libsentencepiece merges runs of unknown pieces into one
  options.unk_token = proto.pieces[static_cast<size_t>(*unk)].piece;
  auto bpe = BpeModel::Create(std::move(vocab), merges, std::move(options));
  if (!bpe.ok()) return Bad(source, std::string(bpe.status().message()));
  spec.model = std::move(*bpe);

  // bos/eos: the configured names when tokenizer_config.json or special_tokens_map.json give
  // them, else what libsentencepiece answers: the id of trainer_spec.bos_piece / eos_piece when
  // that is a control piece.
  const auto lookup = [&](std::string_view name) -> std::optional<int32_t> {
    const auto it = spec.model->vocab().find(name);
    if (it == spec.model->vocab().end()) return std::nullopt;
    return it->second;
  };
  spec.bos_id = names.bos.has_value() ? ResolveSpecialId(names.bos, lookup, {})
                                      : ControlPieceId(proto, proto.bos_piece);
  spec.eos_id = names.eos.has_value() ? ResolveSpecialId(names.eos, lookup, {})
                                      : ControlPieceId(proto, proto.eos_piece);
  spec.kind = "sentencepiece-model";
  spec.fingerprint = std::move(fingerprint);
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceModel(std::string_view model_proto,
                                                                  const SpecialTokenNames& names,
                                                                  std::string fingerprint,
                                                                  std::string_view source) {
  auto proto = ReadSentencePieceModel(model_proto, source);
  if (!proto.ok()) return proto.status();
  if (proto->model_type == Proto::ModelType::kUnigram) {
    UnigramBuildOptions options;
    options.names = names;
    options.fingerprint = std::move(fingerprint);
    options.source = std::string(source);
    options.kind = "sentencepiece-unigram";
    return BuildUnigramTokenizer(std::move(*proto), std::move(options));
  }
  return Build(*proto, names, std::move(fingerprint), source);
}

}  // namespace manyshot

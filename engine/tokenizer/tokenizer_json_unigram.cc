// The file is read into the same SentencePieceModelProto a spiece.model gives, and built by
// BuildUnigramTokenizer, so both forms of a model encode alike:
//   model.vocab [[piece, score], ...] in id order, model.unk_id, model.byte_fallback ("<0xNN>"
//     pieces are then byte pieces);
//   added_tokens: each must be the vocabulary's piece of that id; special ones are split out of
//     the text first and decoded verbatim (SentencePiece's control pieces), the others are
//     SentencePiece's user-defined pieces (never normalized, and preferred wherever they match
//     inside the text, where Hugging Face splits them out first);
//   normalizer: null, or "Precompiled" (SentencePiece's rules, base64), alone or in a Sequence,
//     optionally followed by Strip(right) and Replace(Regex " {2,}" -> "▁") as transformers'
//     SpmConverter now writes them;
//   pre_tokenizer: "Metaspace" ("▁", add_prefix_space or prepend_scheme always/first/never), after
//     a "WhitespaceSplit" (as the T5 files on the Hub have it) or alone; WhitespaceSplit, or the
//     Strip + Replace pair, drops leading, trailing and repeated whitespace as SentencePiece's
//     remove_extra_whitespaces does (with WhitespaceSplit every Unicode space counts);
//   decoder: null or "Metaspace".
// The rules are applied as SentencePiece applies them (longest match over the bytes, see
// sentencepiece_normalizer.h), which is what the file was converted from; Hugging Face's own
// Precompiled normalizer matches per grapheme cluster, which can differ on rare combining
// sequences. Anything else is Unimplemented, naming the piece.
#include "engine/tokenizer/tokenizer_json_unigram.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/sentencepiece_model_reader.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/tokenizer_json_fields.h"
#include "engine/tokenizer/unigram_tokenizer.h"

namespace manyshot {
namespace {

using nlohmann::json;
using Proto = SentencePieceModelProto;

using tokenizer_json::Bad;
using tokenizer_json::BoolOr;
using tokenizer_json::kFile;
using tokenizer_json::TypeOf;

absl::Status Unsupported(std::string_view what) {
  return tokenizer_json::Unsupported(absl::StrCat(ToAbsl(what), " with a Unigram model"));
}

// The whitespace handling the file describes, gathered from its steps.
struct Whitespace {
  bool strip_right = false;        // normalizer Strip(left=false, right=true)
  bool collapse_spaces = false;    // normalizer Replace(Regex " {2,}" -> "▁")
  bool whitespace_split = false;   // pre_tokenizer WhitespaceSplit
  bool prefix = true;              // Metaspace prepends "▁"
  bool prefix_first_only = false;  // ... only where the input begins
};

absl::Status ReadNormalizer(const json& n, Proto& proto, Whitespace& ws) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(n);
  if (type == "Sequence") {
    const auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array()) return Bad("normalizer Sequence without a list");
    for (const json& step : *it) {
      if (absl::Status s = ReadNormalizer(step, proto, ws); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "Strip") {
    if (n.value("left", true) || !n.value("right", true)) {
      return Unsupported("normalizer Strip (only right=true, left=false)");
    }
    ws.strip_right = true;
    return absl::OkStatus();
  }
  if (type == "Replace") {
    const auto pattern = n.find("pattern");
    if (pattern == n.end() || !pattern->is_object() || pattern->value("Regex", "") != " {2,}" ||
        n.value("content", "") != "\xE2\x96\x81") {
      return Unsupported("normalizer Replace (only Regex \" {2,}\" -> \"\xE2\x96\x81\")");
    }
    ws.collapse_spaces = true;
    return absl::OkStatus();
  }
  if (type != "Precompiled") return Unsupported(absl::StrCat("normalizer \"", type, "\""));
  if (!proto.normalizer.precompiled_charsmap.empty()) return Unsupported("two Precompiled steps");
  const auto it = n.find("precompiled_charsmap");
  if (it == n.end() || it->is_null()) return absl::OkStatus();  // identity
  if (!it->is_string()) return Bad("Precompiled.precompiled_charsmap is not a string");
  if (!absl::Base64Unescape(it->get<std::string>(), &proto.normalizer.precompiled_charsmap)) {
    return Bad("Precompiled.precompiled_charsmap is not base64");
  }
  return absl::OkStatus();
}

absl::Status ReadMetaspace(const json& m, bool& prefix, bool& first_only) {
  const auto replacement = m.find("replacement");
  if (replacement != m.end() && *replacement != "\xE2\x96\x81") {
    return Unsupported("Metaspace replacement (only \"\xE2\x96\x81\")");
  }
  first_only = false;
  const auto scheme = m.find("prepend_scheme");
  if (scheme != m.end() && scheme->is_string()) {
    if (*scheme == "always" || *scheme == "first") {
      prefix = true;
      first_only = *scheme == "first";
    } else if (*scheme == "never") {
      prefix = false;
    } else {
      return Unsupported(absl::StrCat("Metaspace prepend_scheme ", scheme->dump()));
    }
    return absl::OkStatus();
  }
  const auto add_prefix = m.find("add_prefix_space");
  prefix = add_prefix == m.end() || !add_prefix->is_boolean() || add_prefix->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadPreTokenizer(const json& t, Whitespace& ws) {
  std::vector<json> steps;
  if (TypeOf(t) == "Sequence") {
    const auto it = t.find("pretokenizers");
    if (it == t.end() || !it->is_array()) return Bad("pre_tokenizer Sequence without a list");
    steps.assign(it->begin(), it->end());
  } else if (!t.is_null()) {
    steps.push_back(t);
  }
  ws.whitespace_split = !steps.empty() && TypeOf(steps[0]) == "WhitespaceSplit";
  if (steps.size() != (ws.whitespace_split ? 2u : 1u) || TypeOf(steps.back()) != "Metaspace") {
    return Unsupported("pre_tokenizer (only Metaspace, alone or after WhitespaceSplit)");
  }
  return ReadMetaspace(steps.back(), ws.prefix, ws.prefix_first_only);
}

absl::Status ReadDecoder(const json& d, const Whitespace& ws) {
  if (d.is_null()) return absl::OkStatus();
  if (TypeOf(d) != "Metaspace") return Unsupported(absl::StrCat("decoder \"", TypeOf(d), "\""));
  bool prefix = true, first_only = false;
  if (absl::Status s = ReadMetaspace(d, prefix, first_only); !s.ok()) return s;
  if (prefix != ws.prefix) {
    return Unsupported("decoder Metaspace whose prefix setting differs from the pre_tokenizer's");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadUnigramTokenizerJson(const json& root,
                                                                    const SpecialTokenNames& names,
                                                                    std::string fingerprint) {
  const json& model = root.at("model");
  Proto proto;
  proto.model_type = Proto::ModelType::kUnigram;
  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_array()) return Bad("model.vocab is not a list");
  // Bounds memory on garbage that parses, as the BPE vocabulary does.
  if (vocab->size() >= (size_t{1} << 28)) return Bad("model.vocab is too large");
  proto.byte_fallback = BoolOr(model, "byte_fallback", false);
  proto.pieces.reserve(vocab->size());
  for (const json& entry : *vocab) {
    if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number()) {
      return Bad(
          absl::StrCat("model.vocab[", proto.pieces.size(), "] is not a [piece, score] pair"));
    }
    Proto::Piece& p = proto.pieces.emplace_back();
    p.piece = entry[0].get<std::string>();
    p.score = static_cast<float>(entry[1].get<double>());
    if (proto.byte_fallback && ParseByteToken(p.piece).has_value()) {
      p.type = Proto::PieceType::kByte;
    }
  }
  const auto unk = model.find("unk_id");
  if (unk == model.end() || !unk->is_number_integer() || unk->get<int64_t>() < 0 ||
      unk->get<int64_t>() >= static_cast<int64_t>(proto.pieces.size())) {
    return Bad("model.unk_id is not the id of a vocabulary piece");
  }
  proto.unk_id = static_cast<int32_t>(unk->get<int64_t>());
  proto.pieces[static_cast<size_t>(proto.unk_id)].type = Proto::PieceType::kUnknown;
  proto.unk_piece = proto.pieces[static_cast<size_t>(proto.unk_id)].piece;

  const auto added = root.find("added_tokens");
  if (added != root.end() && !added->is_null()) {
    if (!added->is_array()) return Bad("added_tokens is not a list");
    for (const json& a : *added) {
      const auto id = a.find("id");
      const auto content = a.find("content");
      if (!a.is_object() || id == a.end() || !id->is_number_integer() || content == a.end() ||
          !content->is_string()) {
        return Bad("an added token lacks a valid id or content");
      }
      const int64_t i = id->get<int64_t>();
      if (i < 0 || i >= static_cast<int64_t>(proto.pieces.size()) ||
          proto.pieces[static_cast<size_t>(i)].piece != content->get<std::string>()) {
        return Unsupported(absl::StrCat("added token ", content->dump(), " (id ", i,
                                        ") that is not the vocabulary's piece of that id"));
      }
      Proto::Piece& p = proto.pieces[static_cast<size_t>(i)];
      const bool is_special = BoolOr(a, "special", false);
      if (p.type != Proto::PieceType::kUnknown) {
        p.type = is_special ? Proto::PieceType::kControl : Proto::PieceType::kUserDefined;
      }
    }
  }

  Whitespace ws;
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder"}) {
    const auto it = root.find(key);
    const json& value = it == root.end() ? json() : *it;
    if (!value.is_null() && !value.is_object()) return Bad(absl::StrCat(key, " is not an object"));
    absl::Status s;
    if (std::string_view(key) == "normalizer") s = ReadNormalizer(value, proto, ws);
    if (std::string_view(key) == "pre_tokenizer") s = ReadPreTokenizer(value, ws);
    if (std::string_view(key) == "decoder") s = ReadDecoder(value, ws);
    if (!s.ok()) return s;
  }
  // Strip(right) and Replace(" {2,}" -> "▁") come as a pair (transformers' SpmConverter); with
  // Metaspace after them they drop leading, trailing and repeated spaces as SentencePiece does.
  if (ws.strip_right != ws.collapse_spaces) {
    return Unsupported(absl::StrCat("normalizer ", ws.strip_right ? "Strip" : "Replace",
                                    " without the ", ws.strip_right ? "Replace" : "Strip",
                                    " that folds whitespace with it"));
  }
  proto.normalizer.remove_extra_whitespaces = ws.whitespace_split || ws.strip_right;
  proto.normalizer.escape_whitespaces = true;
  proto.normalizer.add_dummy_prefix = ws.prefix;

  UnigramBuildOptions options;
  options.names = names;
  options.fingerprint = std::move(fingerprint);
  options.source = std::string(kFile);
  options.kind = "unigram";
  options.unicode_whitespace_is_space = ws.whitespace_split;
  options.dummy_prefix_at_start_only = ws.prefix_first_only;
  return BuildUnigramTokenizer(std::move(proto), std::move(options));
}

}  // namespace manyshot

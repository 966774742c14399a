// tokenizer.json (Hugging Face tokenizers' serialization) -> BpeTokenizer; a Unigram model goes
// to tokenizer_json_unigram.cc.
//
// Only BPE and Unigram models are supported, with the pipeline pieces that BPE tokenizers in the
// wild use; anything else is an Unimplemented error that names the unsupported piece, never a
// silent approximation.
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/special_ids.h"
#include "engine/tokenizer/text_util.h"
#include "engine/tokenizer/tokenizer_json_fields.h"
#include "engine/tokenizer/tokenizer_json_unigram.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

using nlohmann::json;
using Pre = BpePipeline::PreTokenizer;

using tokenizer_json::Bad;
using tokenizer_json::BoolOr;
using tokenizer_json::kFile;
using tokenizer_json::TypeOf;
using tokenizer_json::Unsupported;

// A Replace's pattern: {"String": s} (a {"Regex": ...} pattern is not supported).
absl::StatusOr<std::string> StringPattern(const json& step) {
  const auto it = step.find("pattern");
  if (it == step.end() || !it->is_object()) return Bad("Replace without a pattern");
  const auto s = it->find("String");
  if (s == it->end() || !s->is_string()) return Unsupported("Replace pattern (only String)");
  return s->get<std::string>();
}

absl::Status ParseNormalizer(const json& n, BpePipeline& p) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(n);
  if (type == "Sequence") {
    const auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array()) return Bad("normalizer Sequence without a list");
    for (const auto& step : *it) {
      if (absl::Status s = ParseNormalizer(step, p); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (type == "Prepend") {
    if (!p.replacements.empty()) return Unsupported("normalizer: Prepend after Replace");
    const auto it = n.find("prepend");
    if (it == n.end() || !it->is_string()) return Bad("Prepend without a string");
    p.prepend = it->get<std::string>() + p.prepend;
    return absl::OkStatus();
  }
  if (type == "Replace") {
    auto pattern = StringPattern(n);
    if (!pattern.ok()) return pattern.status();
    const auto it = n.find("content");
    if (it == n.end() || !it->is_string()) return Bad("Replace without content");
    p.replacements.emplace_back(*pattern, it->get<std::string>());
    return absl::OkStatus();
  }
  if (type == "NFC") {
    if (!p.prepend.empty() || !p.replacements.empty()) return Unsupported("normalizer: NFC late");
    p.nfc = true;
    return absl::OkStatus();
  }
  return Unsupported(absl::StrCat("normalizer type \"", type, "\""));
}

absl::Status ParseMetaspace(const json& m, BpePipeline& p) {
  const auto rep = m.find("replacement");
  if (rep != m.end() && rep->is_string()) p.metaspace = rep->get<std::string>();
  if (p.metaspace.empty()) return Bad("Metaspace with an empty replacement");
  const auto scheme = m.find("prepend_scheme");
  if (scheme != m.end() && scheme->is_string()) {
    const std::string s = scheme->get<std::string>();
    if (s == "always") {
      p.metaspace_prepend = BpePipeline::PrependScheme::kAlways;
    } else if (s == "first") {
      p.metaspace_prepend = BpePipeline::PrependScheme::kFirst;
    } else if (s == "never") {
      p.metaspace_prepend = BpePipeline::PrependScheme::kNever;
    } else {
      return Unsupported(absl::StrCat("Metaspace prepend_scheme \"", s, "\""));
    }
  } else {
    p.metaspace_prepend = BoolOr(m, "add_prefix_space", true) ? BpePipeline::PrependScheme::kAlways
                                                              : BpePipeline::PrependScheme::kNever;
  }
  p.metaspace_split = BoolOr(m, "split", true);
  return absl::OkStatus();
}

absl::Status ParsePreTokenizer(const json& t, BpePipeline& p) {
  if (t.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(t);
  if (type == "Sequence") {
    const auto it = t.find("pretokenizers");
    if (it == t.end() || !it->is_array()) return Bad("pre_tokenizer Sequence without a list");
    bool have_split = false;
    for (const auto& step : *it) {
      const std::string step_type = TypeOf(step);
      if (step_type == "Split") {
        if (have_split || p.pre_tokenizer != Pre::kNone) return Unsupported("Split position");
        const auto pattern = step.find("pattern");
        if (pattern == step.end() || !pattern->is_object()) return Bad("Split without pattern");
        const auto regex = pattern->find("Regex");
        if (regex == pattern->end() || !regex->is_string()) {
          return Unsupported("Split pattern (only Regex)");
        }
        auto split = SplitPatternFromRegex(regex->get<std::string>());
        if (!split.ok()) {
          return absl::UnimplementedError(
              absl::StrCat(ToAbsl(kFile), ": ", split.status().message()));
        }
        const auto behavior = step.find("behavior");
        if (behavior == step.end() || *behavior != "Isolated" || BoolOr(step, "invert", false)) {
          return Unsupported("Split behavior (only Isolated, not inverted)");
        }
        p.split = *split;
        have_split = true;
      } else if (step_type == "ByteLevel") {
        if (BoolOr(step, "use_regex", true) && have_split) {
          return Unsupported("ByteLevel with use_regex after a Split");
        }
        p.pre_tokenizer = Pre::kByteLevel;
        p.byte_level_add_prefix_space = BoolOr(step, "add_prefix_space", false);
      } else {
        return Unsupported(absl::StrCat("pre_tokenizer step \"", step_type, "\" in a Sequence"));
      }
    }
    if (have_split && p.pre_tokenizer != Pre::kByteLevel) {
      return Unsupported("Split without a following ByteLevel");
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    if (!BoolOr(t, "use_regex", true)) return Unsupported("ByteLevel without regex on its own");
    p.pre_tokenizer = Pre::kByteLevel;
    p.split = SplitPattern::kGpt2;
    p.byte_level_add_prefix_space = BoolOr(t, "add_prefix_space", false);
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    p.pre_tokenizer = Pre::kMetaspace;
    return ParseMetaspace(t, p);
  }
  return Unsupported(absl::StrCat("pre_tokenizer type \"", type, "\""));
}

absl::Status ParseDecoder(const json& d, BpePipeline& p) {
  if (d.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(d);
  if (type == "ByteLevel") {
    p.decoder = BpePipeline::Decoder::kByteLevel;
    return absl::OkStatus();
  }
  if (type == "Metaspace") {
    p.decoder = BpePipeline::Decoder::kMetaspace;
    p.decode_byte_fallback = true;
    const auto scheme = d.find("prepend_scheme");
    const bool prepends = scheme != d.end() && scheme->is_string()
                              ? *scheme != "never"
                              : BoolOr(d, "add_prefix_space", true);
    p.strip_leading_spaces = prepends ? 1 : 0;
    return absl::OkStatus();
  }
  if (type != "Sequence") return Unsupported(absl::StrCat("decoder type \"", type, "\""));
  const auto it = d.find("decoders");
  if (it == d.end() || !it->is_array()) return Bad("decoder Sequence without a list");
  p.decoder = BpePipeline::Decoder::kMetaspace;
  for (const auto& step : *it) {
    const std::string step_type = TypeOf(step);
    if (step_type == "Replace") {
      auto pattern = StringPattern(step);
      if (!pattern.ok()) return pattern.status();
      const auto content = step.find("content");
      if (content == step.end() || *content != " " || pattern->empty()) {
        return Unsupported("decoder Replace (only \"<metaspace>\" -> \" \")");
      }
      p.metaspace = *pattern;
    } else if (step_type == "ByteFallback") {
      p.decode_byte_fallback = true;
    } else if (step_type == "Fuse") {
      // Decoding already concatenates.
    } else if (step_type == "Strip") {
      const auto content = step.find("content");
      const auto start = step.find("start");
      const auto stop = step.find("stop");
      if (content == step.end() || *content != " " || start == step.end() ||
          !start->is_number_unsigned() || (stop != step.end() && *stop != 0)) {
        return Unsupported("decoder Strip (only leading spaces)");
      }
      p.strip_leading_spaces = std::min(start->get<int>(), 16);
    } else if (step_type == "ByteLevel") {
      p.decoder = BpePipeline::Decoder::kByteLevel;
    } else {
      return Unsupported(absl::StrCat("decoder step \"", step_type, "\""));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseMerges(const json& merges) {
  std::vector<std::pair<std::string, std::string>> out;
  if (merges.is_null()) return out;
  if (!merges.is_array()) return Bad("model.merges is not a list");
  out.reserve(merges.size());
  for (const auto& m : merges) {
    if (m.is_string()) {
      // "a b": tokens never contain a space in the formats that use this form.
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        return Bad(absl::StrCat("merge \"", s, "\" is not two space-separated tokens"));
      }
      out.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      return Bad("a merge is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return out;
}

// The BPE model options this loader cannot honour.
absl::Status CheckBpeOptions(const json& model) {
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() &&
        !(it->is_string() && it->get<std::string>().empty())) {
      return Unsupported(absl::StrCat("model.", key));
    }
  }
  const auto dropout = model.find("dropout");
  if (dropout != model.end() && dropout->is_number() && dropout->get<double>() > 0) {
    return Unsupported("BPE dropout (encoding would be random)");
  }
  return absl::OkStatus();
}

// The normalizer, pre-tokenizer and decoder into `p`.
absl::Status ParsePipeline(const json& root, BpePipeline& p) {
  for (const auto& [key, parse] :
       {std::pair{"normalizer", &ParseNormalizer}, std::pair{"pre_tokenizer", &ParsePreTokenizer},
        std::pair{"decoder", &ParseDecoder}}) {
    const auto it = root.find(key);
    if (it == root.end()) continue;
    if (!it->is_null() && !it->is_object()) return Bad(absl::StrCat(key, " is not an object"));
    if (absl::Status s = parse(*it, p); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<StringMap<int32_t>> ParseVocab(const json& model) {
  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end() || !vocab_it->is_object()) return Bad("model.vocab is not an object");
  StringMap<int32_t> vocab;
  vocab.reserve(vocab_it->size());
  for (const auto& item : vocab_it->items()) {
    const std::string& token = item.key();
    const auto& id = item.value();
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 28)) {
      return Bad(absl::StrCat("model.vocab[\"", token, "\"] is not a valid id"));
    }
    vocab.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  return vocab;
}

// The BPE model: vocabulary, merges and options (byte-level when the pipeline is).
absl::StatusOr<std::unique_ptr<BpeModel>> ParseBpeModel(const json& model, const BpePipeline& p) {
  auto vocab = ParseVocab(model);
  if (!vocab.ok()) return vocab.status();
  const auto merges_it = model.find("merges");
  auto merges = ParseMerges(merges_it == model.end() ? json() : *merges_it);
  if (!merges.ok()) return merges.status();
  BpeOptions options;
  options.byte_level = p.pre_tokenizer == Pre::kByteLevel;
  if (options.byte_level != (p.decoder == BpePipeline::Decoder::kByteLevel) &&
      p.decoder != BpePipeline::Decoder::kNone) {
    return Unsupported("mix of byte-level and non-byte-level pre-tokenizer/decoder");
  }
  options.byte_fallback = BoolOr(model, "byte_fallback", false);
  options.fuse_unk = BoolOr(model, "fuse_unk", false);
  options.ignore_merges = BoolOr(model, "ignore_merges", false);
  const auto unk = model.find("unk_token");
  if (unk != model.end() && unk->is_string()) options.unk_token = unk->get<std::string>();
  auto bpe = BpeModel::Create(std::move(*vocab), *merges, std::move(options));
  if (!bpe.ok()) return Bad(std::string(bpe.status().message()));
  return std::move(*bpe);
}

// root.added_tokens; `vocab_size`: the model's id table, which they follow or replace entries of.
absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const json& root, size_t vocab_size) {
  std::vector<AddedToken> added;
  const auto added_it = root.find("added_tokens");
  if (added_it == root.end() || added_it->is_null()) return added;
  if (!added_it->is_array()) return Bad("added_tokens is not a list");
  for (const auto& a : *added_it) {
    const auto id = a.find("id");
    const auto content = a.find("content");
    if (!a.is_object() || id == a.end() || !id->is_number_integer() || id->get<int64_t>() < 0 ||
        id->get<int64_t>() >= (1 << 28) || content == a.end() || !content->is_string() ||
        content->get<std::string>().empty()) {
      return Bad("an added token lacks a valid id or content");
    }
    AddedToken t;
    t.id = static_cast<int32_t>(id->get<int64_t>());
    t.content = content->get<std::string>();
    t.special = BoolOr(a, "special", false);
    t.normalized = BoolOr(a, "normalized", !t.special);
    t.lstrip = BoolOr(a, "lstrip", false);
    t.rstrip = BoolOr(a, "rstrip", false);
    t.single_word = BoolOr(a, "single_word", false);
    added.push_back(std::move(t));
  }
  // An id beyond the vocabulary and the added tokens together would size the id table by the
  // file's say-so instead of its contents (see BpeModel::Create).
  const size_t id_limit = vocab_size + added.size();
  for (const AddedToken& t : added) {
    if (static_cast<size_t>(t.id) >= id_limit) {
      return Bad(absl::StrCat("added token \"", t.content, "\" has id ", t.id, ", not below the ",
                              id_limit, " tokens of the vocabulary and added_tokens together"));
    }
  }
  return added;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Build(const json& root, const SpecialTokenNames& names,
                                                 std::string fingerprint) {
  if (!root.is_object()) return Bad("not a JSON object");
  const auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) return Bad("no \"model\" object");
  const json& model = *model_it;
  const std::string model_type = TypeOf(model);
  if (model_type == "Unigram") return LoadUnigramTokenizerJson(root, names, std::move(fingerprint));
  // Old files omit model.type for BPE; a vocab + merges pair identifies it.
  if (!(model_type == "BPE" || (model_type.empty() && model.contains("merges")))) {
    return Unsupported(absl::StrCat("model type \"", model_type, "\" (only BPE and Unigram)"));
  }
  if (absl::Status s = CheckBpeOptions(model); !s.ok()) return s;
  BpeTokenizerSpec spec;
  if (absl::Status s = ParsePipeline(root, spec.pipeline); !s.ok()) return s;
  auto bpe = ParseBpeModel(model, spec.pipeline);
  if (!bpe.ok()) return bpe.status();
  spec.model = std::move(*bpe);
  auto added = ParseAddedTokens(root, spec.model->id_to_token().size());
  if (!added.ok()) return added.status();
  spec.added_tokens = std::move(*added);
  spec.kind = spec.model->options().byte_level ? "bpe-bytelevel" : "bpe-sentencepiece";
  spec.fingerprint = std::move(fingerprint);
  const auto lookup = [&](std::string_view name) -> std::optional<int32_t> {
    for (const auto& t : spec.added_tokens) {
      if (t.content == name) return t.id;
    }
    const auto it = spec.model->vocab().find(name);
    if (it == spec.model->vocab().end()) return std::nullopt;
    return it->second;
  };
  spec.bos_id = ResolveSpecialId(names.bos, lookup, kDefaultBosNames);
  spec.eos_id = ResolveSpecialId(names.eos, lookup, kDefaultEosNames);
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(std::string_view json_text,
                                                             const SpecialTokenNames& names,
                                                             std::string fingerprint) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Bad("invalid JSON");
  // The checks above cover the shapes we read; this guards against a type we missed, so that a
  // malformed file is an error and never a crash.
  try {
    return Build(root, names, std::move(fingerprint));
  } catch (const json::exception& e) {
    return Bad(absl::StrCat("unexpected structure: ", e.what()));
  }
}

}  // namespace manyshot

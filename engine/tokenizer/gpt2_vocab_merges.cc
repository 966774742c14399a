// GPT-2's original files: vocab.json (token -> id) and merges.txt ("#version" line, then one
// "a b" merge per line, by rank). Equivalent to a tokenizer.json with a ByteLevel pre-tokenizer
// and decoder, and <|endoftext|> as the special token.
#include "absl/strings/str_cat.h"
#include "engine/tokenizer/bpe_tokenizer.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/special_ids.h"
#include "nlohmann/json.hpp"

namespace manyshot {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadGpt2VocabMerges(std::string_view vocab_json,
                                                               std::string_view merges_txt,
                                                               const SpecialTokenNames& names,
                                                               std::string fingerprint) {
  const auto root = nlohmann::json::parse(vocab_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("vocab.json: not a JSON object");
  }
  StringMap<int32_t> vocab;
  vocab.reserve(root.size());
  for (const auto& item : root.items()) {
    const std::string& token = item.key();
    const auto& id = item.value();
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= (1 << 28)) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab.json: the id of \"", token, "\" is not a valid id"));
    }
    vocab.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  std::vector<std::pair<std::string, std::string>> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos <= merges_txt.size();) {
    size_t eol = merges_txt.find('\n', pos);
    if (eol == std::string_view::npos) eol = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("merges.txt line ", line_no, ": not two space-separated tokens"));
    }
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  if (merges.empty()) return absl::InvalidArgumentError("merges.txt: no merges");

  BpeOptions options;
  options.byte_level = true;
  auto model = BpeModel::Create(std::move(vocab), merges, options);
  if (!model.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("vocab.json + merges.txt: ", model.status().message()));
  }
  BpeTokenizerSpec spec;
  spec.model = std::move(*model);
  spec.pipeline.pre_tokenizer = BpePipeline::PreTokenizer::kByteLevel;
  spec.pipeline.split = SplitPattern::kGpt2;
  spec.pipeline.decoder = BpePipeline::Decoder::kByteLevel;
  // Hugging Face's GPT2Tokenizer adds <|endoftext|> as a special token (matched in raw text).
  const auto eot = spec.model->vocab().find("<|endoftext|>");
  if (eot != spec.model->vocab().end()) {
    AddedToken t;
    t.id = eot->second;
    t.content = "<|endoftext|>";
    t.special = true;
    spec.added_tokens.push_back(std::move(t));
  }
  const auto lookup = [&](std::string_view name) -> std::optional<int32_t> {
    const auto it = spec.model->vocab().find(name);
    if (it == spec.model->vocab().end()) return std::nullopt;
    return it->second;
  };
  spec.bos_id = ResolveSpecialId(names.bos, lookup, kDefaultBosNames);
  spec.eos_id = ResolveSpecialId(names.eos, lookup, kDefaultEosNames);
  spec.kind = "bpe-bytelevel";
  spec.fingerprint = std::move(fingerprint);
  return std::make_unique<BpeTokenizer>(std::move(spec));
}

}  // namespace manyshot

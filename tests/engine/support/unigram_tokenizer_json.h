// A T5-style Unigram tokenizer.json for tests that serve a tiny T5 (special ids pad 0, eos 1,
// unk 2; whitespace split then Metaspace "▁"), written from the caller's [piece, score] list.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "nlohmann/json.hpp"

namespace manyshot::testing {

// Writes dir/tokenizer.json with `vocab` (a JSON array of [piece, score]; ids 0..2 must be
// <pad>, </s>, <unk>) and dir/tokenizer_config.json with `tokenizer_config`.
inline void WriteUnigramTokenizerJson(const std::filesystem::path& dir, const nlohmann::json& vocab,
                                      const std::string& tokenizer_config) {
  const nlohmann::json tokenizer = {
      {"added_tokens",
       {{{"id", 0}, {"content", "<pad>"}, {"special", true}},
        {{"id", 1}, {"content", "</s>"}, {"special", true}},
        {{"id", 2}, {"content", "<unk>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "WhitespaceSplit"}},
          {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}}}}}},
      {"decoder", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", true}}},
      {"model", {{"type", "Unigram"}, {"unk_id", 2}, {"byte_fallback", false}, {"vocab", vocab}}}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  std::ofstream(dir / "tokenizer_config.json") << tokenizer_config;
}

}  // namespace manyshot::testing

// LoadTokenizer: picks the format present in a model directory and reads its files.
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/core/stable_hash.h"
#include "engine/tokenizer/loaders.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot {
namespace {

namespace fs = std::filesystem;

// Tokenizer files are at most a few tens of MB; refuse anything absurd instead of exhausting
// memory on a wrong path.
constexpr uintmax_t kMaxFileBytes = uintmax_t{1} << 30;

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

absl::StatusOr<std::string> ReadFile(const fs::path& p) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(p, ec);
  if (ec) return absl::NotFoundError(absl::StrCat(p.string(), ": ", ec.message()));
  if (size > kMaxFileBytes)
    return absl::InvalidArgumentError(absl::StrCat(p.string(), ": too large"));
  std::ifstream in(p, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(p.string(), ": cannot open"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(p.string(), ": read error"));
  return std::move(ss).str();
}

// Merges the special-token names of tokenizer_config.json over special_tokens_map.json, and
// feeds both files into the fingerprint (they decide bos/eos, so they define the tokenizer).
absl::StatusOr<SpecialTokenNames> ReadSpecialTokenNames(const fs::path& dir, StableHash& hash) {
  SpecialTokenNames names;
  for (const char* name : {"special_tokens_map.json", "tokenizer_config.json"}) {
    if (!IsFile(dir / name)) continue;
    auto text = ReadFile(dir / name);
    if (!text.ok()) return text.status();
    hash.UpdateFile(name, *text);
    auto parsed = ParseSpecialTokenNames(*text, name);
    if (!parsed.ok()) return parsed.status();
    if (parsed->bos.has_value()) names.bos = parsed->bos;
    if (parsed->eos.has_value()) names.eos = parsed->eos;
  }
  return names;
}

absl::Status WithDir(const absl::Status& s, const fs::path& dir) {
  return absl::Status(s.code(), absl::StrCat(dir.string(), ": ", s.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizer(const fs::path& model_dir) {
  StableHash hash;
  auto load = [&]() -> absl::StatusOr<std::unique_ptr<Tokenizer>> {
    // The defining file(s) go first into the hash, then the special-token configs.
    if (IsFile(model_dir / "tokenizer.json")) {
      auto text = ReadFile(model_dir / "tokenizer.json");
      if (!text.ok()) return text.status();
      hash.UpdateFile("tokenizer.json", *text);
      auto names = ReadSpecialTokenNames(model_dir, hash);
      if (!names.ok()) return names.status();
      return LoadTokenizerJson(*text, *names, hash.Hex());
    }
    const bool have_vocab = IsFile(model_dir / "vocab.json");
    const bool have_merges = IsFile(model_dir / "merges.txt");
    if (have_vocab && have_merges) {
      auto vocab = ReadFile(model_dir / "vocab.json");
      if (!vocab.ok()) return vocab.status();
      auto merges = ReadFile(model_dir / "merges.txt");
      if (!merges.ok()) return merges.status();
      hash.UpdateFile("vocab.json", *vocab);
      hash.UpdateFile("merges.txt", *merges);
      auto names = ReadSpecialTokenNames(model_dir, hash);
      if (!names.ok()) return names.status();
      return LoadGpt2VocabMerges(*vocab, *merges, *names, hash.Hex());
    }
    // tokenizer.model is what Llama ships; T5 ships the same format as spiece.model.
    for (const char* name : {"tokenizer.model", "spiece.model"}) {
      if (!IsFile(model_dir / name)) continue;
      auto proto = ReadFile(model_dir / name);
      if (!proto.ok()) return proto.status();
      hash.UpdateFile(name, *proto);
      auto names = ReadSpecialTokenNames(model_dir, hash);
      if (!names.ok()) return names.status();
      return LoadSentencePieceModel(*proto, *names, hash.Hex(), name);
    }
    if (have_vocab != have_merges) {
      return absl::NotFoundError(absl::StrCat("found ", have_vocab ? "vocab.json" : "merges.txt",
                                              " without ",
                                              have_vocab ? "merges.txt" : "vocab.json"));
    }
    return absl::NotFoundError(
        "no tokenizer.json, vocab.json + merges.txt, tokenizer.model or spiece.model in the "
        "directory");
  };
  auto result = load();
  if (!result.ok()) return WithDir(result.status(), model_dir);
  return result;
}

}  // namespace manyshot

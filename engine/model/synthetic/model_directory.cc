// See model_directory.h.
#include "engine/model/synthetic/model_directory.h"

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

absl::Status CopyFile(const std::filesystem::path& from, const std::filesystem::path& to) {
  // The bytes only, into a new file whose mode follows the process's umask like every other file
  // written here: the source's mode (read-only registry files, world-readable shared ones) must
  // not leak into the model directory (the server keeps its data directory private).
  std::ifstream in(from, std::ios::binary);
  if (!in) return absl::InternalError(absl::StrCat("copy ", from.string(), ": cannot read it"));
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  out.flush();
  if (!out || in.bad()) {
    return absl::InternalError(
        absl::StrCat("copy ", from.string(), " to ", to.string(), ": write failed"));
  }
  return absl::OkStatus();
}

absl::Status WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) return absl::InternalError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteModelDirectory(const ModelConfig& config, absl::Span<const TensorToWrite> tensors,
                                 int shards, const std::string& marker_name,
                                 const std::string& marker_json,
                                 const std::filesystem::path& tokenizer_dir,
                                 const std::filesystem::path& out_dir) {
  std::error_code ec;
  if (!tokenizer_dir.empty() && !std::filesystem::is_directory(tokenizer_dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer directory ", tokenizer_dir.string(), " does not exist"));
  }
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(out_dir.string(), ": ", ec.message()));
  // A previous run with a different shard count must not leave stale weight files behind.
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::EndsWith(name, ".safetensors") || name == "model.safetensors.index.json") {
      std::filesystem::remove(entry.path(), ec);
    }
  }

  absl::Status st = WriteText(out_dir / "config.json", ModelConfigToJson(config));
  if (!st.ok()) return st;
  nlohmann::ordered_json gen;
  gen["_from_model_config"] = true;
  gen["bos_token_id"] = config.bos_token_id;
  gen["eos_token_id"] = config.eos_token_id;
  st = WriteText(out_dir / "generation_config.json", gen.dump(2) + "\n");
  if (!st.ok()) return st;
  st = WriteText(out_dir / marker_name, marker_json);
  if (!st.ok()) return st;

  for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model",
                           "tokenizer_config.json", "special_tokens_map.json"}) {
    if (tokenizer_dir.empty()) break;
    const std::filesystem::path from = tokenizer_dir / name;
    if (std::filesystem::is_regular_file(from, ec)) {
      st = CopyFile(from, out_dir / name);
      if (!st.ok()) return st;
    }
  }
  return WriteModelSafetensors(out_dir, tensors, shards);
}

}  // namespace manyshot

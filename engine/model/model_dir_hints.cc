// See model_dir_hints.h.
#include "engine/model/model_dir_hints.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace manyshot {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> SubdirectoryNames(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec)) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool HasPytorchWeights(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "pytorch_model") && absl::EndsWith(name, ".bin")) return true;
  }
  return false;
}

}  // namespace

std::string HfCacheRootHint(const fs::path& dir) {
  std::error_code ec;
  const fs::path snapshots = dir / "snapshots";
  // The cache layout: blobs/ (content-addressed files), refs/ (branch -> revision) and
  // snapshots/<revision>/ (the model directory, as links into blobs/).
  if (!fs::is_directory(snapshots, ec)) return "";
  if (!fs::is_directory(dir / "blobs", ec) && !fs::is_directory(dir / "refs", ec) &&
      !absl::StartsWith(dir.filename().string(), "models--")) {
    return "";
  }
  const std::vector<std::string> revisions = SubdirectoryNames(snapshots);
  if (revisions.empty()) {
    return absl::StrCat(dir.string(),
                        " is a Hugging Face cache root with no snapshot yet: download the model "
                        "(huggingface-cli download), then pass ",
                        (snapshots / "<revision>").string());
  }
  return absl::StrCat(dir.string(), " is a Hugging Face cache root: pass the model directory ",
                      (snapshots / revisions.front()).string(),
                      revisions.size() > 1
                          ? absl::StrCat(" (revisions here: ", absl::StrJoin(revisions, ", "), ")")
                          : std::string());
}

std::string BinWeightsHint(const fs::path& dir) {
  if (!HasPytorchWeights(dir)) return "";
  // clone() because save_file refuses tensors that share memory (tied embeddings).
  return absl::StrCat(
      dir.string(),
      " holds PyTorch .bin weights only; manyshot reads safetensors. Convert them once (needs "
      "the Python packages torch and safetensors): cd ",
      dir.string(),
      " && python3 -c \"import glob, torch; from safetensors.torch import save_file; w = {}; "
      "[w.update(torch.load(f, map_location='cpu', weights_only=True)) for f in "
      "sorted(glob.glob('pytorch_model*.bin'))]; save_file({k: v.clone().contiguous() for k, v "
      "in w.items()}, 'model.safetensors', metadata={'format': 'pt'})\"");
}

}  // namespace manyshot

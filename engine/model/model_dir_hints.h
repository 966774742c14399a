// What to do when a directory is not a loadable model directory but a common near miss: a
// PyTorch-only checkpoint (.bin weights, no safetensors) or a Hugging Face cache root
// (models--Org--Name, whose model directories live under snapshots/<revision>).
#pragma once

#include <filesystem>
#include <string>

namespace manyshot {

// When dir is a Hugging Face cache root, the sentence saying which directory to pass instead
// (naming the revisions found under snapshots/); otherwise empty.
std::string HfCacheRootHint(const std::filesystem::path& dir);

// When dir holds PyTorch .bin weights but no safetensors, the sentence with the one-line Python
// command that converts them to model.safetensors; otherwise empty.
std::string BinWeightsHint(const std::filesystem::path& dir);

}  // namespace manyshot

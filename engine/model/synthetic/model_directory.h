// Writing a generated model as a Hugging Face model directory, whatever generated its weights.
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic/safetensors_writer.h"

namespace manyshot {

// Writes config.json, generation_config.json, the marker file `marker_name` (JSON text saying
// what the weights are and how they were made), the tokenizer files found in tokenizer_dir
// (tokenizer.json, vocab.json, merges.txt, tokenizer.model, tokenizer_config.json,
// special_tokens_map.json; copied verbatim; empty: none) and the weights in `shards` safetensors
// files. Creates out_dir and removes weight files an earlier run with another shard count left.
absl::Status WriteModelDirectory(const ModelConfig& config, absl::Span<const TensorToWrite> tensors,
                                 int shards, const std::string& marker_name,
                                 const std::string& marker_json,
                                 const std::filesystem::path& tokenizer_dir,
                                 const std::filesystem::path& out_dir);

}  // namespace manyshot

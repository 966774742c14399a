// Writes safetensors files (single or sharded with model.safetensors.index.json) from f32 data,
// converting to the stored dtype. Used by the tiny-model writer and by tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/dtype.h"

namespace manyshot {

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::vector<float> data;  // product(shape) values, row-major
};

// Serialises tensors (in the given order) into safetensors bytes. The header is padded with
// spaces to a multiple of 8 bytes, as the reference implementation does, so data is aligned.
absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const TensorToWrite> tensors, const std::map<std::string, std::string>& metadata);

// Writes one file (atomically: a temporary next to it, then rename).
absl::Status WriteSafetensors(const std::filesystem::path& file,
                              absl::Span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata = {
                                  {"format", "pt"}});

// shards == 1: dir/model.safetensors. shards > 1: dir/model-0000k-of-0000n.safetensors, tensors
// split in order into byte-balanced contiguous runs, plus dir/model.safetensors.index.json with
// {"metadata": {"total_size": <data bytes>}, "weight_map": {name: shard}}.
absl::Status WriteModelSafetensors(const std::filesystem::path& dir,
                                   absl::Span<const TensorToWrite> tensors, int shards);

}  // namespace manyshot

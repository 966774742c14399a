// Tiny T5 models with deterministic random weights in the real Hugging Face format (config.json
// + safetensors), for tests, goldens and benchmarks: the T5 counterpart of tiny_model.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/model/synthetic/safetensors_writer.h"
#include "engine/model/t5_config.h"

namespace manyshot {

struct TinyT5Spec {
  T5Config config;
  DType dtype = DType::kF32;  // stored dtype
  int shards = 1;
  uint64_t seed = 0;
};

// Every tensor of T5ExpectedTensors(spec.config), from a PRNG seeded by spec.seed and the tensor's
// name (so adding a tensor never changes the others). INVALID_ARGUMENT for a config that
// ParseT5Config would reject or sizes beyond a tiny model (2^20 per dimension).
absl::StatusOr<std::vector<TensorToWrite>> TinyT5Tensors(const TinyT5Spec& spec);

// Writes config.json, model.safetensors (or shards + index) and manyshot_tiny_model.json (a
// marker: random weights, the seed) into out_dir (created if needed). Weight files of an earlier
// write with another shard count are not removed: write into an empty directory.
absl::Status WriteTinyT5Model(const TinyT5Spec& spec, const std::filesystem::path& out_dir);

}  // namespace manyshot

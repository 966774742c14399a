// Loading a decoder-only model's tensors by role (tensor_names.h) into ModelWeights: the global
// tensors, then each block's attention and MLP weights, with the fusions and reorderings each
// family's traits row asks for (ArchTraits::qkv, ::layout, ::activation).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/core/rope_table.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "engine/transformer/model_weights.h"

namespace manyshot {

// Every tensor of `config`'s checkpoint on `backend`: matrices (rank 2: Linear weights, embedding
// tables) in `matrix_dtype`, norm weights and biases in `compute_dtype`. Errors name the tensor
// (and `model_dir` for a missing lm head).
absl::StatusOr<ModelWeights> LoadModelWeights(const std::filesystem::path& model_dir,
                                              const SafetensorsArchive& archive,
                                              const ModelConfig& config, Backend& backend,
                                              DType compute_dtype, DType matrix_dtype);

// Partial rotary (ModelConfig::rotary_dims = r < head_dim D) runs on the full rotate-half RoPE of
// every backend, which pairs dimension i with i + D/2: q and k's head dimensions are held
// permuted so that the checkpoint's rotary pairs (i, i + r/2) sit at (i, i + D/2), the other
// dimensions fill the rest in order, and the table turns them by angle 0 (cos 1, sin 0: exactly
// the identity). q.k is the same sum in another order, so attention is unchanged.
// Entry p is the checkpoint dimension held at p.
std::vector<int64_t> RotaryDimOrder(int64_t head_dim, int64_t rotary_dims);

// The RoPE table of the held layout: the rotary pairs' frequencies first, then zeros.
RopeTable HeldRopeTable(const ModelConfig& config);

}  // namespace manyshot

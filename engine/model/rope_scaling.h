// config.json "rope_scaling" of the llama family, and the RoPE table it implies, computed as
// transformers' modeling_rope_utils.py does (its _compute_*_parameters of the 4.4x-4.5x releases):
// linear, dynamic (NTK), llama3 and yarn. "default" (or no rope_scaling) is plain RoPE.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/rope_table.h"
#include "engine/model/config_keys.h"
#include "nlohmann/json.hpp"

namespace manyshot {

enum class RopeType : uint8_t { kDefault, kLinear, kDynamic, kLlama3, kYarn };

// The sub-keys as the config gives them (optional ones stay unset when absent, so that a written
// config says what the read one said).
struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;                                      // every type but default
  std::optional<int64_t> original_max_position_embeddings;  // llama3 (required), yarn, dynamic
  double low_freq_factor = 0, high_freq_factor = 0;         // llama3
  std::optional<double> attention_factor, beta_fast, beta_slow, mscale, mscale_all_dim;  // yarn
  std::optional<bool> truncate;                                                          // yarn
};

// The rope_type names this engine computes: "default, linear, dynamic, llama3, yarn".
const char* SupportedRopeTypes();
const char* RopeTypeName(RopeType type);

// Reads config key "rope_scaling" (absent or null: default). Refuses an unknown rope_type naming
// it, and a missing or malformed sub-key naming that key.
absl::StatusOr<RopeScaling> ParseRopeScaling(const config_keys::KeyReader& config);

// Sets j["rope_scaling"]: null for default, else the sub-keys in HF's form.
void RopeScalingToJson(const RopeScaling& scaling, nlohmann::ordered_json& j);

// The table RoPE uses at every position up to max_position_embeddings (the most manyshot runs).
// theta: rope_theta; head_dim even.
RopeTable ComputeRopeTable(const RopeScaling& scaling, double theta, int64_t head_dim,
                           int64_t max_position_embeddings);

}  // namespace manyshot

// config.json parsers and writers of the families that live outside model_config.cc (BLOOM, OPT,
// GPT-NeoX, Gemma), one file each, on the shared typed key reader. ParseModelConfig and
// ModelConfigToJson dispatch here by model_type / architecture.
#pragma once

#include "absl/status/status.h"
#include "engine/model/config_keys.h"
#include "engine/model/model_config.h"
#include "nlohmann/json.hpp"

namespace manyshot {

// BLOOM (modeling_bloom.py): the keys of BloomConfig; c.model_type is already set.
absl::Status ParseBloomConfig(const config_keys::KeyReader& r, ModelConfig& c);
void BloomConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j);

// OPT (modeling_opt.py): the keys of OPTConfig; c.model_type is already set. Only
// word_embed_proj_dim == hidden_size (every OPT but opt-350m, whose project_in/out we lack).
absl::Status ParseOptConfig(const config_keys::KeyReader& r, ModelConfig& c);
void OptConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j);

// GPT-NeoX / Pythia (modeling_gpt_neox.py): the keys of GPTNeoXConfig; c.model_type is already
// set.
absl::Status ParseGptNeoxConfig(const config_keys::KeyReader& r, ModelConfig& c);
void GptNeoxConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j);

// Gemma and Gemma 2 (modeling_gemma.py, modeling_gemma2.py): the keys of GemmaConfig and
// Gemma2Config; c.model_type is already set.
absl::Status ParseGemmaConfig(const config_keys::KeyReader& r, ModelConfig& c);
void GemmaConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j);

// Shared steps of the parsers above and model_config.cc's.
// The shape keys of Llama-style configs: vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads and num_key_value_heads (defaulting to the heads).
absl::Status ReadLlamaStyleShape(const config_keys::KeyReader& r, ModelConfig& c);
// Records a window shorter than the positions; a longer one can never hide a key.
void RecordSlidingWindow(int64_t window, ModelConfig& c);

}  // namespace manyshot

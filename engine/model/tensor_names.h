// Per-architecture tables of checkpoint tensor names and shapes (after llama.cpp's tables): the
// forward pass, the tiny-model writer and the tests all read names from here, so a new family is a
// table, not a new code path.
//
// Names are the Hugging Face ones. GPT-2 checkpoints come in two spellings: openai-community/gpt2's
// model.safetensors has bare names ("h.0.attn.c_attn.weight"), while GPT2LMHeadModel state dicts
// saved by transformers prefix them with "transformer.". The tables hold the bare names;
// FindModelTensor accepts either spelling.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace manyshot {

// Llama / Mistral / Qwen2. Bias names are always filled; whether they exist depends on the config.
struct LlamaLayerNames {
  std::string attn_norm;   // input_layernorm.weight [H]
  std::string q, k, v, o;  // *_proj.weight [out, in]
  std::string q_bias, k_bias, v_bias, o_bias;
  std::string mlp_norm;  // post_attention_layernorm.weight [H]
  std::string gate, up, down;
  std::string gate_bias, up_bias, down_bias;
};
LlamaLayerNames LlamaLayer(int64_t layer);
inline constexpr std::string_view kLlamaEmbed = "model.embed_tokens.weight";
inline constexpr std::string_view kLlamaFinalNorm = "model.norm.weight";
inline constexpr std::string_view kLlamaLmHead = "lm_head.weight";

// GPT-2. Conv1D weights are stored [in, out], i.e. y = x @ W + b.
struct Gpt2LayerNames {
  std::string ln_1_weight, ln_1_bias;
  std::string c_attn_weight, c_attn_bias;        // [H, 3H]: q | k | v along the output dim
  std::string attn_proj_weight, attn_proj_bias;  // attn.c_proj [H, H]
  std::string ln_2_weight, ln_2_bias;
  std::string c_fc_weight, c_fc_bias;          // [H, I]
  std::string mlp_proj_weight, mlp_proj_bias;  // mlp.c_proj [I, H]
};
Gpt2LayerNames Gpt2Layer(int64_t layer);
inline constexpr std::string_view kGpt2Wte = "wte.weight";
inline constexpr std::string_view kGpt2Wpe = "wpe.weight";
inline constexpr std::string_view kGpt2FinalNormWeight = "ln_f.weight";
inline constexpr std::string_view kGpt2FinalNormBias = "ln_f.bias";

struct ExpectedTensor {
  std::string name;  // canonical (bare) name
  std::vector<int64_t> shape;
};

// Every tensor a checkpoint of `config` must hold, in a fixed order (globals, then per layer).
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

// Looks `name` up, also under the alternative spellings the architecture allows.
const TensorInfo* FindModelTensor(const SafetensorsArchive& archive, Architecture arch,
                                  std::string_view name);

// ReadF32 through FindModelTensor's spellings.
absl::Status ReadModelTensorF32(const SafetensorsArchive& archive, Architecture arch,
                                std::string_view name, absl::Span<const int64_t> shape, float* dst);

}  // namespace manyshot

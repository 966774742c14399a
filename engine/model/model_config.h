// The architecture description read from a Hugging Face config.json. Model code reads only this
// struct, never the JSON, so a new family is a parser here plus a traits row (arch_traits.h) and a
// tensor table (tensor_names.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "engine/model/rope_scaling.h"

namespace manyshot {

enum class Architecture : uint8_t {
  kLlama = 0,    // llama, mistral, qwen2: RoPE (rotate-half), RMSNorm, SwiGLU, GQA
  kGpt2 = 1,     // learned positions, LayerNorm, tanh-GELU, Conv1D weights stored [in, out]
  kBloom = 2,    // ALiBi, LayerNorm (also after the embeddings), GELU, fused per-head q|k|v
  kOpt = 3,      // learned positions (offset 2), LayerNorm pre or post, ReLU
  kGptNeox = 4,  // partial rotary, LayerNorm, erf GELU, fused per-head q|k|v, parallel residual
  kPhi3 = 5,     // Llama with fused qkv_proj (q | k | v) and gate_up_proj (gate | up)
  kGemma = 6,    // Llama with embeddings scaled by sqrt(hidden), RMSNorm (1 + w), GeGLU, tied head
  kGemma2 = 7,   // Gemma with norms after each sublayer too and soft-capped logits
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  // config.json "model_type" as given: "llama", "mistral", "qwen2", "gpt2", "bloom", "opt",
  // "gpt_neox", "phi3", "gemma", "gemma2"
  std::string model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // GPT-2: n_inner, or 4 * hidden when null
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;  // == num_heads when the config has no num_key_value_heads
  int64_t head_dim = 0;      // config "head_dim" when present, else hidden_size / num_heads
  int64_t max_position_embeddings = 0;  // GPT-2: n_positions
  float norm_eps = 1e-5f;               // rms_norm_eps (llama) or layer_norm_epsilon (gpt2)
  float rope_theta = 10000.0f;          // llama family only
  RopeScaling rope_scaling;             // llama family: config "rope_scaling" (default: none)
  bool tie_word_embeddings = false;     // GPT-2 is always tied
  bool attention_bias = false;          // q/k/v bias (qwen2 always; llama "attention_bias")
  bool attention_out_bias = false;      // o_proj bias (llama "attention_bias" sets both)
  bool mlp_bias = false;                // llama "mlp_bias"
  // Norms before each sublayer (pre-LN; every family but OPT's do_layer_norm_before: false, whose
  // post-LN layers norm after the residual add and have no final norm).
  bool pre_norm = true;
  // RoPE turns only the first rotary_dims dimensions of each head (GPT-NeoX's rotary_pct), in
  // rotate-half pairs (i, i + rotary_dims / 2); 0: all of them.
  int64_t rotary_dims = 0;
  // Attention and MLP both read the block's input and add to it (GPT-NeoX's
  // use_parallel_residual): x + attn(ln1(x)) + mlp(ln2(x)).
  bool parallel_residual = false;
  // The shortest sliding attention window of any layer when it is shorter than
  // max_position_embeddings (Mistral v0.1, Qwen2 with use_sliding_window); 0 otherwise. The model
  // is served within it (ContextLength), where a window hides no key.
  int64_t sliding_window = 0;
  // Gemma 2: attention logits become cap * tanh(logit / cap) before the softmax (after the query
  // scaling, before masks and structured prompting's log-weights); the lm head's logits likewise.
  // 0: no cap.
  float attn_logit_softcap = 0.0f;
  float final_logit_softcap = 0.0f;
  // q.k is scaled by query_pre_attn_scalar^-1/2 (Gemma 2); 0: by head_dim^-1/2.
  float query_pre_attn_scalar = 0.0f;
  int64_t bos_token_id = -1;  // -1 when absent
  int64_t eos_token_id = -1;  // first id when config gives a list; -1 when absent
  std::string hidden_act;  // "silu" (llama), "gelu_new" (gpt2), "bloom_gelu" (bloom), "relu" (opt)
  std::string torch_dtype = "float32";  // informational: the stored dtype the config claims
};

// The positions a model serves: max_position_embeddings, or the sliding window W when shorter.
// Positions below W are less than W apart, so a window never hides a key there: attention is the
// windowed model's exactly, with no sliding-window kernel.
inline int64_t ContextLength(const ModelConfig& c) {
  return c.sliding_window > 0 && c.sliding_window < c.max_position_embeddings
             ? c.sliding_window
             : c.max_position_embeddings;
}

// Parses `config_json` (a path to config.json). Errors name the file and the offending key.
absl::StatusOr<ModelConfig> ParseModelConfig(const std::filesystem::path& config_json);

// Serialises a config back to HF config.json text (used by the tiny-model writer).
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace manyshot

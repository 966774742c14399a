// BLOOM's config.json (BloomConfig). Unsupported options are INVALID_ARGUMENT naming the key.
//
// BLOOM has no position table (ALiBi), so max_position_embeddings is a practical bound: the
// "seq_length" BigScience's configs carry (the training length), 2048 when absent.
// pretraining_tp and slow_but_exact only choose how a tensor-parallel matmul is summed in HF: the
// exact result is what we compute.
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/family_configs.h"

namespace manyshot {

using config_keys::KeyReader;

absl::Status ParseBloomConfig(const KeyReader& r, ModelConfig& c) {
  c.architecture = Architecture::kBloom;
  MANYSHOT_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  // Older configs name the width n_embed (BloomConfig reads it in place of hidden_size).
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_size,
                            r.PositiveInt(r.Has("n_embed") ? "n_embed" : "hidden_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("n_layer"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("n_head"));
  MANYSHOT_ASSIGN_OR_RETURN(c.max_position_embeddings, r.OptionalPositiveInt("seq_length", 2048));
  double eps = 0;
  MANYSHOT_ASSIGN_OR_RETURN(eps, r.PositiveNumber("layer_norm_epsilon", 1e-5));
  c.norm_eps = static_cast<float>(eps);
  bool residual_after_norm = false;
  MANYSHOT_ASSIGN_OR_RETURN(residual_after_norm,
                            r.Bool("apply_residual_connection_post_layernorm", false));
  if (residual_after_norm) {
    return r.Error("apply_residual_connection_post_layernorm",
                   "is true; only false (the residual is the block's input, as in every released "
                   "BLOOM) is supported");
  }
  if (c.hidden_size > (int64_t{1} << 40)) return r.Error("hidden_size", "is too large");
  if (c.num_heads > c.hidden_size || c.hidden_size % c.num_heads != 0) {
    return r.Error("n_head", "must divide hidden_size");
  }
  c.intermediate_size = 4 * c.hidden_size;  // BloomMLP: dense_h_to_4h
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  c.attention_bias = c.attention_out_bias = c.mlp_bias = true;
  c.rope_theta = 0;
  c.hidden_act = "bloom_gelu";
  MANYSHOT_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id"));
  MANYSHOT_ASSIGN_OR_RETURN(c.eos_token_id, r.TokenId("eos_token_id"));
  return absl::OkStatus();
}

void BloomConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["architectures"] = {"BloomForCausalLM"};
  j["model_type"] = "bloom";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["n_layer"] = c.num_layers;
  j["n_head"] = c.num_heads;
  j["seq_length"] = c.max_position_embeddings;
  j["layer_norm_epsilon"] = config_keys::ShortestDecimal(c.norm_eps);
  j["apply_residual_connection_post_layernorm"] = false;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
}

}  // namespace manyshot

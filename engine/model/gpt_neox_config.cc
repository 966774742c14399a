// GPT-NeoX's config.json (GPTNeoXConfig: Pythia, GPT-NeoX-20B). Unsupported options are
// INVALID_ARGUMENT naming the key.
//
// RoPE turns int(head_dim * rotary_pct) dimensions of each head (HF's rotary_ndims), from
// rotary_emb_base; transformers 4.5x writes them as partial_rotary_factor and rope_theta, read
// here too.
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/family_configs.h"

namespace manyshot {

using config_keys::KeyReader;

namespace {

// The first of `keys` the config has, else the last (its error then names that one).
const char* FirstPresent(const KeyReader& r, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    if (r.Has(key)) return key;
  }
  return *(keys.end() - 1);
}

// rotary_ndims: int(head_dim * rotary_pct), even (rotate-half pairs) and at least 2.
absl::Status ReadRotaryDims(const KeyReader& r, ModelConfig& c) {
  const char* key = FirstPresent(r, {"partial_rotary_factor", "rotary_pct"});
  double pct = 0;
  MANYSHOT_ASSIGN_OR_RETURN(pct, r.PositiveNumber(key, 0.25));
  if (pct > 1) return r.Error(key, absl::StrCat("must be in (0, 1], got ", pct));
  c.rotary_dims = static_cast<int64_t>(static_cast<double>(c.head_dim) * pct);
  if (c.rotary_dims < 2 || c.rotary_dims % 2 != 0) {
    return r.Error(key, absl::StrCat("gives ", c.rotary_dims, " rotary dimensions of head_dim ",
                                     c.head_dim, "; RoPE needs an even number, at least 2"));
  }
  if (c.rotary_dims == c.head_dim) c.rotary_dims = 0;  // every dimension: plain RoPE
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseGptNeoxConfig(const KeyReader& r, ModelConfig& c) {
  c.architecture = Architecture::kGptNeox;
  MANYSHOT_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt("hidden_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveInt("intermediate_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("num_hidden_layers"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("num_attention_heads"));
  MANYSHOT_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveInt("max_position_embeddings"));
  if (c.hidden_size > (int64_t{1} << 40)) return r.Error("hidden_size", "is too large");
  if (c.num_heads > c.hidden_size || c.hidden_size % c.num_heads != 0) {
    return r.Error("num_attention_heads", "must divide hidden_size");
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  double eps = 0, theta = 0;
  MANYSHOT_ASSIGN_OR_RETURN(eps, r.PositiveNumber("layer_norm_eps", 1e-5));
  MANYSHOT_ASSIGN_OR_RETURN(
      theta, r.PositiveNumber(FirstPresent(r, {"rope_theta", "rotary_emb_base"}), 10000.0));
  c.norm_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  if (absl::Status rotary = ReadRotaryDims(r, c); !rotary.ok()) return rotary;
  MANYSHOT_ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(r));
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_act, r.String("hidden_act", std::string("gelu")));
  if (c.hidden_act != "gelu") {
    return r.Error("hidden_act", "must be \"gelu\" (the erf GELU), got \"" + c.hidden_act + "\"");
  }
  MANYSHOT_ASSIGN_OR_RETURN(c.parallel_residual, r.Bool("use_parallel_residual", true));
  // attention_bias: query_key_value and dense; the MLP always has biases.
  MANYSHOT_ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", true));
  c.attention_out_bias = c.attention_bias;
  c.mlp_bias = true;
  MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  MANYSHOT_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id"));
  MANYSHOT_ASSIGN_OR_RETURN(c.eos_token_id, r.TokenId("eos_token_id"));
  return absl::OkStatus();
}

void GptNeoxConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["architectures"] = {"GPTNeoXForCausalLM"};
  j["model_type"] = "gpt_neox";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["layer_norm_eps"] = config_keys::ShortestDecimal(c.norm_eps);
  j["rotary_emb_base"] = config_keys::ShortestDecimal(c.rope_theta);
  const int64_t rotary = c.rotary_dims == 0 ? c.head_dim : c.rotary_dims;
  j["rotary_pct"] = static_cast<double>(rotary) / static_cast<double>(c.head_dim);
  RopeScalingToJson(c.rope_scaling, j);
  j["hidden_act"] = "gelu";
  j["use_parallel_residual"] = c.parallel_residual;
  j["attention_bias"] = c.attention_bias;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
}

}  // namespace manyshot

// OPT's config.json (OPTConfig). Unsupported options are INVALID_ARGUMENT naming the key.
//
// OPT's LayerNorms use torch's default epsilon (1e-5); OPTConfig has no key for it.
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/family_configs.h"

namespace manyshot {

using config_keys::KeyReader;

namespace {

// A boolean option of which only one value is supported.
absl::Status RequireBool(const KeyReader& r, absl::string_view key, bool fallback, bool supported,
                         absl::string_view why) {
  bool value = fallback;
  MANYSHOT_ASSIGN_OR_RETURN(value, r.Bool(key, fallback));
  if (value != supported) {
    return r.Error(key, absl::StrCat("is ", value ? "true" : "false", "; only ",
                                     supported ? "true" : "false", " is supported (", why, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseOptConfig(const KeyReader& r, ModelConfig& c) {
  c.architecture = Architecture::kOpt;
  MANYSHOT_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt("hidden_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveInt("ffn_dim"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("num_hidden_layers"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("num_attention_heads"));
  MANYSHOT_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveInt("max_position_embeddings"));
  int64_t embed_dim = 0;
  MANYSHOT_ASSIGN_OR_RETURN(embed_dim, r.OptionalPositiveInt("word_embed_proj_dim", c.hidden_size));
  if (embed_dim != c.hidden_size) {
    return r.Error("word_embed_proj_dim",
                   absl::StrCat("is ", embed_dim, " but hidden_size is ", c.hidden_size,
                                "; only equal sizes are supported (the project_in / project_out "
                                "layers of opt-350m are not)"));
  }
  MANYSHOT_ASSIGN_OR_RETURN(c.pre_norm, r.Bool("do_layer_norm_before", true));
  absl::Status s = RequireBool(r, "_remove_final_layer_norm", false, false,
                               "checkpoints fine-tuned before transformers 4.20.1");
  if (!s.ok()) return s;
  s = RequireBool(r, "layer_norm_elementwise_affine", true, true, "LayerNorms with weights");
  if (!s.ok()) return s;
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_act, r.String("activation_function", std::string("relu")));
  if (c.hidden_act != "relu") {
    return r.Error("activation_function", "must be \"relu\", got \"" + c.hidden_act + "\"");
  }
  bool bias = true;
  MANYSHOT_ASSIGN_OR_RETURN(bias, r.Bool("enable_bias", true));
  c.attention_bias = c.attention_out_bias = c.mlp_bias = bias;
  if (c.num_heads > c.hidden_size || c.hidden_size % c.num_heads != 0) {
    return r.Error("num_attention_heads", "must divide hidden_size");
  }
  if (c.max_position_embeddings > (int64_t{1} << 40)) {
    return r.Error("max_position_embeddings", "is too large");
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  c.norm_eps = 1e-5f;
  c.rope_theta = 0;
  MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  MANYSHOT_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id"));
  MANYSHOT_ASSIGN_OR_RETURN(c.eos_token_id, r.TokenId("eos_token_id"));
  return absl::OkStatus();
}

void OptConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j) {
  j["architectures"] = {"OPTForCausalLM"};
  j["model_type"] = "opt";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["word_embed_proj_dim"] = c.hidden_size;
  j["ffn_dim"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["do_layer_norm_before"] = c.pre_norm;
  j["activation_function"] = "relu";
  j["enable_bias"] = c.attention_bias;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
}

}  // namespace manyshot

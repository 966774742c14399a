// Gemma's and Gemma 2's config.json (GemmaConfig, Gemma2Config). Unsupported options are
// INVALID_ARGUMENT naming the key.
//
// The MLP's activation is "hidden_activation" when set, else the tanh GELU: the first Gemma
// checkpoints say "hidden_act": "gelu" and transformers runs them with gelu_pytorch_tanh all the
// same (GemmaMLP's warning), as they were trained. Gemma 2's sliding window (even layers) is
// served as Mistral's: within min(max_position_embeddings, sliding_window) positions
// (ContextLength), where it hides no key.
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/family_configs.h"

namespace manyshot {

using config_keys::KeyReader;

namespace {

// The tanh GELU under either of its transformers names.
bool IsTanhGelu(const std::string& name) {
  return name == "gelu_pytorch_tanh" || name == "gelu_new";
}

absl::Status ReadActivation(const KeyReader& r, ModelConfig& c) {
  if (r.Has("hidden_activation")) {  // present and not null
    MANYSHOT_ASSIGN_OR_RETURN(c.hidden_act, r.String("hidden_activation", std::nullopt));
    if (!IsTanhGelu(c.hidden_act)) {
      return r.Error("hidden_activation",
                     "must be \"gelu_pytorch_tanh\", got \"" + c.hidden_act + "\"");
    }
    return absl::OkStatus();
  }
  std::string act;
  MANYSHOT_ASSIGN_OR_RETURN(act, r.String("hidden_act", std::string("gelu_pytorch_tanh")));
  if (!IsTanhGelu(act) && act != "gelu") {
    return r.Error("hidden_act", "must be \"gelu_pytorch_tanh\", got \"" + act + "\"");
  }
  c.hidden_act = "gelu_pytorch_tanh";
  return absl::OkStatus();
}

// A positive float key, or 0 when absent or null (Gemma 2's soft-caps: null turns one off).
absl::StatusOr<float> OptionalCap(const KeyReader& r, const char* key, double fallback) {
  if (r.IsNull(key)) return 0.0f;
  double v = 0;
  MANYSHOT_ASSIGN_OR_RETURN(v, r.PositiveNumber(key, fallback));
  return static_cast<float>(v);
}

absl::Status ReadGemma2Keys(const KeyReader& r, ModelConfig& c) {
  MANYSHOT_ASSIGN_OR_RETURN(c.attn_logit_softcap, OptionalCap(r, "attn_logit_softcapping", 50.0));
  MANYSHOT_ASSIGN_OR_RETURN(c.final_logit_softcap, OptionalCap(r, "final_logit_softcapping", 30.0));
  double scalar = 0;
  MANYSHOT_ASSIGN_OR_RETURN(scalar, r.PositiveNumber("query_pre_attn_scalar", 256.0));
  c.query_pre_attn_scalar = static_cast<float>(scalar);
  int64_t window = 0;
  if (!r.IsNull("sliding_window")) {
    MANYSHOT_ASSIGN_OR_RETURN(window, r.OptionalPositiveInt("sliding_window", 4096));
  }
  RecordSlidingWindow(window, c);
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseGemmaConfig(const KeyReader& r, ModelConfig& c) {
  c.architecture = c.model_type == "gemma2" ? Architecture::kGemma2 : Architecture::kGemma;
  if (absl::Status shape = ReadLlamaStyleShape(r, c); !shape.ok()) return shape;
  MANYSHOT_ASSIGN_OR_RETURN(c.head_dim, r.OptionalPositiveInt("head_dim", 256));
  MANYSHOT_ASSIGN_OR_RETURN(c.max_position_embeddings,
                            r.OptionalPositiveInt("max_position_embeddings", 8192));
  if (c.hidden_size > (int64_t{1} << 40)) return r.Error("hidden_size", "is too large");
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads", "must divide num_attention_heads");
  }
  if (c.head_dim % 2 != 0) return r.Error("head_dim", "must be even for RoPE");
  double eps = 0, theta = 0;
  MANYSHOT_ASSIGN_OR_RETURN(eps, r.PositiveNumber("rms_norm_eps", 1e-6));
  MANYSHOT_ASSIGN_OR_RETURN(theta, r.PositiveNumber("rope_theta", 10000.0));
  c.norm_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  MANYSHOT_ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(r));
  if (absl::Status act = ReadActivation(r, c); !act.ok()) return act;
  MANYSHOT_ASSIGN_OR_RETURN(c.attention_bias, r.Bool("attention_bias", false));
  c.attention_out_bias = c.attention_bias;
  c.mlp_bias = false;
  MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  if (c.architecture == Architecture::kGemma2) {
    if (absl::Status keys = ReadGemma2Keys(r, c); !keys.ok()) return keys;
  }
  MANYSHOT_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id"));
  MANYSHOT_ASSIGN_OR_RETURN(c.eos_token_id, r.TokenId("eos_token_id"));
  return absl::OkStatus();
}

void GemmaConfigToJson(const ModelConfig& c, nlohmann::ordered_json& j) {
  const bool gemma2 = c.architecture == Architecture::kGemma2;
  j["architectures"] = {gemma2 ? "Gemma2ForCausalLM" : "GemmaForCausalLM"};
  j["model_type"] = gemma2 ? "gemma2" : "gemma";
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = config_keys::ShortestDecimal(c.norm_eps);
  j["rope_theta"] = config_keys::ShortestDecimal(c.rope_theta);
  RopeScalingToJson(c.rope_scaling, j);
  j["hidden_act"] = "gelu_pytorch_tanh";
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["attention_bias"] = c.attention_bias;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (!gemma2) return;
  auto cap = [](float v) -> nlohmann::ordered_json {
    if (v == 0.0f) return nullptr;
    return config_keys::ShortestDecimal(v);
  };
  j["attn_logit_softcapping"] = cap(c.attn_logit_softcap);
  j["final_logit_softcapping"] = cap(c.final_logit_softcap);
  j["query_pre_attn_scalar"] = config_keys::ShortestDecimal(c.query_pre_attn_scalar);
  // No window shorter than the positions: one as long (Gemma2Config's default would apply).
  j["sliding_window"] = c.sliding_window > 0 ? c.sliding_window : c.max_position_embeddings;
}

}  // namespace manyshot

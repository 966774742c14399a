// Parses Hugging Face config.json into ModelConfig, per family, with strict validation.
//
// Only the keys that change the forward pass are read. Everything else (torch_dtype,
// transformers_version, ...) is ignored. A sliding attention window (Mistral "sliding_window",
// Qwen2 "use_sliding_window") shorter than the positions becomes ModelConfig::sliding_window: the
// model is then served within it (ContextLength), where the window hides nothing.
#include "engine/model/model_config.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/config_keys.h"
#include "engine/model/family_configs.h"
#include "engine/model/model_dir_hints.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

using Json = nlohmann::json;

using config_keys::KeyReader;
using config_keys::ShortestDecimal;

// The window a family's config.json sets for its layers (0: none), with transformers' defaults:
// MistralConfig's sliding_window defaults to 4096 (null turns it off); Qwen2 uses its window only
// with use_sliding_window, and only on layers from max_window_layers on; Phi3Config's has no
// default (Phi-3-mini-4k sets 2047).
absl::StatusOr<int64_t> SlidingWindow(const KeyReader& r, const ModelConfig& c) {
  if (c.model_type == "qwen2") {
    bool use = false;
    MANYSHOT_ASSIGN_OR_RETURN(use, r.Bool("use_sliding_window", false));
    if (!use) return 0;
    int64_t first_layer = 28;
    if (r.Has("max_window_layers")) {
      MANYSHOT_ASSIGN_OR_RETURN(first_layer, r.Int("max_window_layers"));
    }
    if (first_layer >= c.num_layers) return 0;
  } else if (c.model_type == "phi3") {
    if (!r.Has("sliding_window")) return 0;
  } else if (c.model_type != "mistral") {
    return 0;
  }
  if (r.IsNull("sliding_window")) return 0;
  return r.OptionalPositiveInt("sliding_window", 4096);
}

absl::Status ReadSlidingWindow(const KeyReader& r, ModelConfig& c) {
  int64_t window = 0;
  MANYSHOT_ASSIGN_OR_RETURN(window, SlidingWindow(r, c));
  RecordSlidingWindow(window, c);
  return absl::OkStatus();
}

absl::Status ParseLlamaFamily(const KeyReader& r, ModelConfig& c) {
  c.architecture = Architecture::kLlama;
  if (absl::Status shape = ReadLlamaStyleShape(r, c); !shape.ok()) return shape;
  MANYSHOT_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveInt("max_position_embeddings"));
  double eps = 0, theta = 0;
  MANYSHOT_ASSIGN_OR_RETURN(eps, r.PositiveNumber("rms_norm_eps", std::nullopt));
  MANYSHOT_ASSIGN_OR_RETURN(theta, r.PositiveNumber("rope_theta", 10000.0));
  c.norm_eps = static_cast<float>(eps);
  c.rope_theta = static_cast<float>(theta);
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_act, r.String("hidden_act", std::string("silu")));
  if (c.hidden_act != "silu")
    return r.Error("hidden_act", "must be \"silu\", got \"" + c.hidden_act + "\"");

  if (c.num_heads > c.hidden_size) return r.Error("num_attention_heads", "exceeds hidden_size");
  if (c.num_kv_heads > c.num_heads || c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads", "must divide num_attention_heads");
  }
  if (r.Has("head_dim")) {
    MANYSHOT_ASSIGN_OR_RETURN(c.head_dim, r.PositiveInt("head_dim"));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return r.Error("num_attention_heads", "must divide hidden_size");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  // RoPE rotate-half pairs dimension i with i + head_dim/2.
  if (c.head_dim % 2 != 0) return r.Error("head_dim", "must be even for RoPE");
  MANYSHOT_ASSIGN_OR_RETURN(c.rope_scaling, ParseRopeScaling(r));
  if (absl::Status window = ReadSlidingWindow(r, c); !window.ok()) return window;

  if (c.model_type == "phi3") {
    // Phi-3's projections have no bias, and it rotates every dimension of the head (Phi-4-mini's
    // partial_rotary_factor is not supported).
    c.architecture = Architecture::kPhi3;
    c.attention_bias = c.attention_out_bias = c.mlp_bias = false;
    if (r.Has("partial_rotary_factor")) {
      double factor = 0;
      MANYSHOT_ASSIGN_OR_RETURN(factor, r.PositiveNumber("partial_rotary_factor", 1.0));
      if (factor != 1.0) return r.Error("partial_rotary_factor", "must be 1 for phi3");
    }
    MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  } else if (c.model_type == "qwen2") {
    // Qwen2 always has q/k/v bias and never an o_proj bias; the config has no key for it.
    c.attention_bias = true;
    c.attention_out_bias = false;
    c.mlp_bias = false;
    MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  } else {
    bool bias = false;
    MANYSHOT_ASSIGN_OR_RETURN(bias, r.Bool("attention_bias", false));
    c.attention_bias = bias;
    c.attention_out_bias = bias;
    MANYSHOT_ASSIGN_OR_RETURN(c.mlp_bias, r.Bool("mlp_bias", false));
    MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  }
  MANYSHOT_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id"));
  MANYSHOT_ASSIGN_OR_RETURN(c.eos_token_id, r.TokenId("eos_token_id"));
  return absl::OkStatus();
}

absl::Status ParseGpt2(const KeyReader& r, ModelConfig& c) {
  c.architecture = Architecture::kGpt2;
  MANYSHOT_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt("n_embd"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("n_layer"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("n_head"));
  MANYSHOT_ASSIGN_OR_RETURN(c.max_position_embeddings, r.PositiveInt("n_positions"));
  if (c.hidden_size > (int64_t{1} << 40)) return r.Error("n_embd", "is too large");
  MANYSHOT_ASSIGN_OR_RETURN(c.intermediate_size,
                            r.OptionalPositiveInt("n_inner", 4 * c.hidden_size));
  double eps = 0;
  MANYSHOT_ASSIGN_OR_RETURN(eps, r.PositiveNumber("layer_norm_epsilon", 1e-5));
  c.norm_eps = static_cast<float>(eps);
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_act, r.String("activation_function", std::string("gelu_new")));
  if (c.hidden_act != "gelu_new") {
    return r.Error("activation_function", "must be \"gelu_new\", got \"" + c.hidden_act + "\"");
  }
  if (c.num_heads > c.hidden_size || c.hidden_size % c.num_heads != 0) {
    return r.Error("n_head", "must divide n_embd");
  }
  c.num_kv_heads = c.num_heads;
  c.head_dim = c.hidden_size / c.num_heads;
  c.tie_word_embeddings = true;  // GPT-2's lm_head is always wte.
  c.attention_bias = true;
  c.attention_out_bias = true;
  c.mlp_bias = true;
  c.rope_theta = 0;
  MANYSHOT_ASSIGN_OR_RETURN(c.bos_token_id, r.TokenId("bos_token_id"));
  MANYSHOT_ASSIGN_OR_RETURN(c.eos_token_id, r.TokenId("eos_token_id"));
  return absl::OkStatus();
}

// The keys that give back c.sliding_window (0: none) under SlidingWindow's defaults.
void SlidingWindowToJson(const ModelConfig& c, nlohmann::ordered_json& j) {
  if (c.model_type == "qwen2") {
    if (c.sliding_window == 0) return;
    j["use_sliding_window"] = true;
    j["sliding_window"] = c.sliding_window;
    j["max_window_layers"] = 0;
  } else if (c.model_type == "phi3") {
    if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  } else if (c.model_type == "mistral") {
    if (c.sliding_window > 0) {
      j["sliding_window"] = c.sliding_window;
    } else if (c.max_position_embeddings > 4096) {
      j["sliding_window"] = nullptr;  // MistralConfig's default window would apply
    }
  }
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(const std::filesystem::path& config_json) {
  const std::string file = config_json.string();
  std::error_code ec;
  if (!std::filesystem::exists(config_json, ec)) {
    const std::string hint = HfCacheRootHint(config_json.parent_path());
    if (!hint.empty()) return absl::NotFoundError(absl::StrCat(file, " does not exist: ", hint));
  }
  Json j;
  MANYSHOT_ASSIGN_OR_RETURN(j, config_keys::ReadJsonObject(config_json));
  KeyReader r(j, file);
  ModelConfig c;
  MANYSHOT_ASSIGN_OR_RETURN(c.model_type, r.String("model_type", std::nullopt));
  MANYSHOT_ASSIGN_OR_RETURN(c.torch_dtype, r.String("torch_dtype", std::string("float32")));
  absl::Status s;
  if (c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2" ||
      c.model_type == "phi3") {
    s = ParseLlamaFamily(r, c);
  } else if (c.model_type == "gpt2") {
    s = ParseGpt2(r, c);
  } else if (c.model_type == "bloom") {
    s = ParseBloomConfig(r, c);
  } else if (c.model_type == "opt") {
    s = ParseOptConfig(r, c);
  } else if (c.model_type == "gpt_neox") {
    s = ParseGptNeoxConfig(r, c);
  } else if (c.model_type == "gemma" || c.model_type == "gemma2") {
    s = ParseGemmaConfig(r, c);
  } else if (c.model_type == "t5") {  // described by T5Config (t5_config.h) instead
    return absl::UnimplementedError(absl::StrCat(
        file,
        ": model_type \"t5\" is an encoder-decoder model: it loads as T5Model (engine/t5, "
        "ParseT5Config), not as a decoder-only Transformer"));
  } else {
    return absl::UnimplementedError(
        absl::StrCat(file, ": key \"model_type\" has unsupported value \"", c.model_type,
                     "\" (supported: llama, mistral, qwen2, phi3, gemma, gemma2, gpt2, bloom, opt, "
                     "gpt_neox)"));
  }
  if (!s.ok()) return s;
  return c;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  // nlohmann's ordered_json keeps our key order, which makes the written files easy to read.
  nlohmann::ordered_json j;
  if (c.architecture == Architecture::kBloom) {
    BloomConfigToJson(c, j);
  } else if (c.architecture == Architecture::kOpt) {
    OptConfigToJson(c, j);
  } else if (c.architecture == Architecture::kGptNeox) {
    GptNeoxConfigToJson(c, j);
  } else if (c.architecture == Architecture::kGemma || c.architecture == Architecture::kGemma2) {
    GemmaConfigToJson(c, j);
  } else if (c.architecture == Architecture::kGpt2) {
    j["architectures"] = {"GPT2LMHeadModel"};
    j["model_type"] = "gpt2";
    j["vocab_size"] = c.vocab_size;
    j["n_embd"] = c.hidden_size;
    j["n_layer"] = c.num_layers;
    j["n_head"] = c.num_heads;
    j["n_positions"] = c.max_position_embeddings;
    j["n_ctx"] = c.max_position_embeddings;
    j["n_inner"] = c.intermediate_size;
    j["layer_norm_epsilon"] = ShortestDecimal(c.norm_eps);
    j["activation_function"] = "gelu_new";
    j["tie_word_embeddings"] = true;
  } else {
    const std::string& mt = c.model_type.empty() ? std::string("llama") : c.model_type;
    const char* arch = mt == "mistral" ? "MistralForCausalLM"
                       : mt == "qwen2" ? "Qwen2ForCausalLM"
                       : mt == "phi3"  ? "Phi3ForCausalLM"
                                       : "LlamaForCausalLM";
    j["architectures"] = {arch};
    j["model_type"] = mt;
    j["vocab_size"] = c.vocab_size;
    j["hidden_size"] = c.hidden_size;
    j["intermediate_size"] = c.intermediate_size;
    j["num_hidden_layers"] = c.num_layers;
    j["num_attention_heads"] = c.num_heads;
    j["num_key_value_heads"] = c.num_kv_heads;
    if (c.head_dim != 0 && c.head_dim * c.num_heads != c.hidden_size) j["head_dim"] = c.head_dim;
    j["max_position_embeddings"] = c.max_position_embeddings;
    j["rms_norm_eps"] = ShortestDecimal(c.norm_eps);
    j["rope_theta"] = ShortestDecimal(c.rope_theta);
    RopeScalingToJson(c.rope_scaling, j);
    j["hidden_act"] = "silu";
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (mt != "qwen2" && mt != "phi3") {
      j["attention_bias"] = c.attention_bias;
      j["mlp_bias"] = c.mlp_bias;
    }
    SlidingWindowToJson(c, j);
  }
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_id >= 0) j["eos_token_id"] = c.eos_token_id;
  j["torch_dtype"] = c.torch_dtype.empty() ? std::string("float32") : c.torch_dtype;
  return j.dump(2) + "\n";
}

absl::Status ReadLlamaStyleShape(const KeyReader& r, ModelConfig& c) {
  MANYSHOT_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.hidden_size, r.PositiveInt("hidden_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.intermediate_size, r.PositiveInt("intermediate_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("num_hidden_layers"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("num_attention_heads"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_kv_heads,
                            r.OptionalPositiveInt("num_key_value_heads", c.num_heads));
  return absl::OkStatus();
}

void RecordSlidingWindow(int64_t window, ModelConfig& c) {
  c.sliding_window = window < c.max_position_embeddings ? window : 0;
}

}  // namespace manyshot

// Parses a T5 config.json (transformers' T5Config) with the same strict key reads as the
// decoder-only parser (config_keys.h). Keys that do not change inference (dropout_rate,
// initializer_factor, n_positions, ...) are ignored.
#include "engine/model/t5_config.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/config_keys.h"

namespace manyshot {
namespace {

using config_keys::Json;
using config_keys::KeyReader;

absl::Status ParseT5(const KeyReader& r, T5Config& c) {
  MANYSHOT_ASSIGN_OR_RETURN(c.vocab_size, r.PositiveInt("vocab_size"));
  MANYSHOT_ASSIGN_OR_RETURN(c.d_model, r.PositiveInt("d_model"));
  MANYSHOT_ASSIGN_OR_RETURN(c.d_kv, r.PositiveInt("d_kv"));
  MANYSHOT_ASSIGN_OR_RETURN(c.d_ff, r.PositiveInt("d_ff"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_layers, r.PositiveInt("num_layers"));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_decoder_layers,
                            r.OptionalPositiveInt("num_decoder_layers", c.num_layers));
  MANYSHOT_ASSIGN_OR_RETURN(c.num_heads, r.PositiveInt("num_heads"));
  MANYSHOT_ASSIGN_OR_RETURN(c.relative_attention_num_buckets,
                            r.OptionalPositiveInt("relative_attention_num_buckets", 32));
  MANYSHOT_ASSIGN_OR_RETURN(c.relative_attention_max_distance,
                            r.OptionalPositiveInt("relative_attention_max_distance", 128));
  // Far beyond any released T5 and small enough that products of these sizes stay in int64.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  for (auto [key, v] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab_size},
                        {"d_model", c.d_model},
                        {"d_kv", c.d_kv},
                        {"d_ff", c.d_ff},
                        {"num_layers", c.num_layers},
                        {"num_decoder_layers", c.num_decoder_layers},
                        {"num_heads", c.num_heads},
                        {"relative_attention_num_buckets", c.relative_attention_num_buckets},
                        {"relative_attention_max_distance", c.relative_attention_max_distance}}) {
    if (v > kMaxDim) return r.Error(key, absl::StrCat("is too large (", v, " > 2^24)"));
  }
  // The encoder's bidirectional buckets are num_buckets / 2 per direction, half of them exact:
  // at least one exact bucket per direction, and the logarithmic buckets must span distances
  // beyond the exact ones (the decoder's exact range is num_buckets / 2).
  if (c.relative_attention_num_buckets < 4) {
    return r.Error("relative_attention_num_buckets", "must be at least 4");
  }
  if (c.relative_attention_max_distance <= c.relative_attention_num_buckets / 2) {
    return r.Error("relative_attention_max_distance",
                   absl::StrCat("must exceed relative_attention_num_buckets / 2 (",
                                c.relative_attention_num_buckets / 2, ")"));
  }
  double eps = 0;
  MANYSHOT_ASSIGN_OR_RETURN(eps, r.PositiveNumber("layer_norm_epsilon", 1e-6));
  c.layer_norm_epsilon = static_cast<float>(eps);
  std::string ff;
  MANYSHOT_ASSIGN_OR_RETURN(ff, r.String("feed_forward_proj", std::string("relu")));
  if (ff == "relu") {
    c.feed_forward = T5FeedForward::kRelu;
  } else if (ff == "gated-gelu") {
    c.feed_forward = T5FeedForward::kGatedGelu;
  } else {
    return r.Error("feed_forward_proj", absl::StrCat("has unsupported value \"", ff,
                                                     "\" (supported: relu, gated-gelu)"));
  }
  MANYSHOT_ASSIGN_OR_RETURN(c.tie_word_embeddings, r.Bool("tie_word_embeddings", true));
  bool encoder_decoder = true;
  MANYSHOT_ASSIGN_OR_RETURN(encoder_decoder, r.Bool("is_encoder_decoder", true));
  if (!encoder_decoder) return r.Error("is_encoder_decoder", "must be true for T5");
  int64_t id = -1;
  MANYSHOT_ASSIGN_OR_RETURN(id, r.TokenId("decoder_start_token_id"));
  c.decoder_start_token_id = id >= 0 ? id : 0;
  MANYSHOT_ASSIGN_OR_RETURN(id, r.TokenId("pad_token_id"));
  c.pad_token_id = id >= 0 ? id : 0;
  MANYSHOT_ASSIGN_OR_RETURN(id, r.TokenId("eos_token_id"));
  c.eos_token_id = id >= 0 ? id : 1;
  for (auto [key, v] :
       {std::pair<const char*, int64_t>{"decoder_start_token_id", c.decoder_start_token_id},
        {"pad_token_id", c.pad_token_id},
        {"eos_token_id", c.eos_token_id}}) {
    if (v >= c.vocab_size) {
      return r.Error(key, absl::StrCat(v, " is outside the vocabulary [0, ", c.vocab_size, ")"));
    }
  }
  MANYSHOT_ASSIGN_OR_RETURN(c.torch_dtype, r.String("torch_dtype", std::string("float32")));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ConfigModelType(const std::filesystem::path& config_json) {
  Json j;
  MANYSHOT_ASSIGN_OR_RETURN(j, config_keys::ReadJsonObject(config_json));
  return KeyReader(j, config_json.string()).String("model_type", std::nullopt);
}

absl::StatusOr<T5Config> ParseT5Config(const std::filesystem::path& config_json) {
  Json j;
  MANYSHOT_ASSIGN_OR_RETURN(j, config_keys::ReadJsonObject(config_json));
  KeyReader r(j, config_json.string());
  std::string model_type;
  MANYSHOT_ASSIGN_OR_RETURN(model_type, r.String("model_type", std::nullopt));
  if (model_type != "t5") {
    return r.Error("model_type", absl::StrCat("is \"", model_type, "\", not \"t5\""));
  }
  T5Config c;
  absl::Status s = ParseT5(r, c);
  if (!s.ok()) return s;
  return c;
}

std::string T5ConfigToJson(const T5Config& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {"T5ForConditionalGeneration"};
  j["model_type"] = "t5";
  j["is_encoder_decoder"] = true;
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["d_kv"] = c.d_kv;
  j["d_ff"] = c.d_ff;
  j["num_layers"] = c.num_layers;
  j["num_decoder_layers"] = c.num_decoder_layers;
  j["num_heads"] = c.num_heads;
  j["relative_attention_num_buckets"] = c.relative_attention_num_buckets;
  j["relative_attention_max_distance"] = c.relative_attention_max_distance;
  j["layer_norm_epsilon"] = config_keys::ShortestDecimal(c.layer_norm_epsilon);
  j["feed_forward_proj"] = c.feed_forward == T5FeedForward::kRelu ? "relu" : "gated-gelu";
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["decoder_start_token_id"] = c.decoder_start_token_id;
  j["pad_token_id"] = c.pad_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["dropout_rate"] = 0.1;
  j["torch_dtype"] = c.torch_dtype.empty() ? std::string("float32") : c.torch_dtype;
  return j.dump(2) + "\n";
}

}  // namespace manyshot

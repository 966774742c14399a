// The T5 encoder-decoder architecture read from a Hugging Face config.json ("model_type": "t5"):
// T5 v1.0 (feed_forward_proj "relu", tied embeddings, logits rescaled by d_model^-0.5) and
// v1.1 / LM-adapted ("gated-gelu", untied lm_head). Decoder-only families are ModelConfig
// (model_config.h); which of the two a directory holds is its config's model_type
// (ConfigModelType).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace manyshot {

enum class T5FeedForward : uint8_t {
  kRelu = 0,       // "relu": wo(relu(wi x))
  kGatedGelu = 1,  // "gated-gelu": wo(gelu_new(wi_0 x) * wi_1 x)
};

struct T5Config {
  int64_t vocab_size = 0;
  int64_t d_model = 0;
  int64_t d_kv = 0;  // per head; d_kv * num_heads need not equal d_model
  int64_t d_ff = 0;
  int64_t num_layers = 0;          // encoder blocks
  int64_t num_decoder_layers = 0;  // decoder blocks (config default: num_layers)
  int64_t num_heads = 0;
  int64_t relative_attention_num_buckets = 32;
  int64_t relative_attention_max_distance = 128;
  float layer_norm_epsilon = 1e-6f;
  T5FeedForward feed_forward = T5FeedForward::kRelu;
  // Tied: lm_head is shared.weight and the decoder output is scaled by d_model^-0.5 first.
  bool tie_word_embeddings = true;
  int64_t decoder_start_token_id = 0;  // the decoder's first input token
  int64_t pad_token_id = 0;
  int64_t eos_token_id = 1;
  std::string torch_dtype = "float32";  // informational

  int64_t inner_dim() const { return num_heads * d_kv; }  // q/k/v projection width
};

// config.json's "model_type" (NOT_FOUND / INVALID_ARGUMENT naming the file when unreadable), so a
// loader can tell T5 ("t5") from the decoder-only families before parsing either config.
absl::StatusOr<std::string> ConfigModelType(const std::filesystem::path& config_json);

// Parses a T5 config.json. Errors are INVALID_ARGUMENT naming the file and the key (an unsupported
// feed_forward_proj, a non-positive size, buckets too few for the max distance, ...).
absl::StatusOr<T5Config> ParseT5Config(const std::filesystem::path& config_json);

// HF config.json text for `config` (the tiny-model writer); ParseT5Config reads it back equal.
std::string T5ConfigToJson(const T5Config& config);

}  // namespace manyshot

// Writes small Hugging Face model directories with deterministic random weights, in the real
// formats (config.json, safetensors, tokenizer files), for tests and golden outputs. No weights
// can be downloaded on the build machines, so these stand in for real checkpoints.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/core/dtype.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic/safetensors_writer.h"

namespace manyshot {

struct TinyModelSpec {
  std::string family;  // "gpt2", "llama", "mistral", "qwen2", "bloom", "opt", "gpt_neox",
                       // "phi3", "gemma", "gemma2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // 0: hidden_size / num_heads; another value: gemma and gemma2 only
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;  // must be true for gpt2
  // gpt2, qwen2, bloom and opt: must be true; mistral: must be false
  bool attention_bias = false;
  DType dtype = DType::kF32;
  int shards = 1;
  uint64_t seed = 0;
  float rope_theta = 10000;
  bool pre_norm = true;  // false (post-LN, OPT's do_layer_norm_before: false): opt only
};

// The config.json contents the spec implies (validated: the same checks as ParseModelConfig).
absl::StatusOr<ModelConfig> TinyModelConfig(const TinyModelSpec& spec);

// The tensors, named and shaped per tensor_names, with values from a PRNG seeded by spec.seed and
// each tensor's name (so adding a tensor never changes the others).
absl::StatusOr<std::vector<TensorToWrite>> TinyModelTensors(const TinyModelSpec& spec);

// Writes config.json, generation_config.json, model.safetensors (or shards + index),
// manyshot_tiny_model.json (a marker: random weights, the spec) and copies tokenizer files found
// in tokenizer_dir (tokenizer.json, vocab.json, merges.txt, tokenizer.model,
// tokenizer_config.json, special_tokens_map.json) verbatim. Creates out_dir if needed.
absl::Status WriteTinyModel(const TinyModelSpec& spec, const std::filesystem::path& tokenizer_dir,
                            const std::filesystem::path& out_dir);

// INVALID_ARGUMENT "<spec>: <name> must be in [1, 2^20], got <value>" for the first of `sizes`
// (name, value) beyond what a tiny model allows; OK when every size is in range.
absl::Status CheckTinySizes(absl::string_view spec,
                            absl::Span<const std::pair<const char*, int64_t>> sizes);

// The values of tensor `name` (of `shape`) in a model generated with `seed`: mean + sd N(0, 1)
// from a NormalRng seeded by the seed and the name, so adding a tensor never changes the others.
std::vector<float> SeededNormalValues(uint64_t seed, const std::string& name,
                                      const std::vector<int64_t>& shape, double mean, double sd);

// A tensor of a generated model: its values are SeededNormalValues(seed, name, shape, mean, sd).
struct SeededTensor {
  std::string name;
  std::vector<int64_t> shape;
  double mean = 0;
  double sd = 1;
};

// The tensors' values, generated on every core (each tensor's values depend only on the seed and
// its name, so the result is the same as one by one: a Llama-1B-shaped model's 1.2 billion
// normals take half a minute on one core), in the order given, stored as `dtype`.
std::vector<TensorToWrite> SeededNormalTensors(uint64_t seed, DType dtype,
                                               const std::vector<SeededTensor>& tensors);

// What a generated model's config.json says its weights are stored in ("torch_dtype"): "float32",
// "float16" or "bfloat16".
std::string TorchDTypeName(DType stored);

// Deterministic standard normals: splitmix64 + Box-Muller, identical on every platform with
// IEEE doubles (std::normal_distribution is implementation-defined).
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : state_(seed) {}
  uint64_t NextU64();
  double NextNormal();

 private:
  uint64_t state_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace manyshot

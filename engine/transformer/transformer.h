// A decoder-only transformer of any family ArchTraits describes on a Backend: loads a Hugging Face
// model directory and runs prefill / incremental decode for a batch of variable-length sequences,
// each token with an explicit position id, optionally attending to a shared context (structured
// prompting's encoded demonstrations). Logits are computed only for the rows asked for.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/backend.h"
#include "engine/model/model_config.h"
#include "engine/task/context_kv.h"
#include "engine/transformer/kv_cache.h"
#include "engine/transformer/model_weights.h"

namespace manyshot {

// One sequence of a forward pass. Its tokens are appended to `cache` (which may already hold
// earlier tokens of the same sequence: incremental decode).
struct ForwardSequence {
  absl::Span<const int32_t> tokens;
  absl::Span<const int32_t> positions;  // one per token
  KvCache* cache = nullptr;
  absl::Span<const int64_t> logit_rows;  // indices into tokens whose logits are wanted
  // Structured prompting (see AttentionSequence): ln(weight) on own keys >= weighted_from, and
  // own indices below context_from do not see the context.
  float own_log_weight = 0.0f;
  int64_t weighted_from = 0;
  int64_t context_from = 0;
};

// Dtypes of a loaded model: weights and activations in `compute` (f32 accumulation always), own
// and encoded K/V in `kv`. Unset fields take the backend's default compute dtype.
struct TransformerOptions {
  std::optional<DType> compute;
  std::optional<DType> kv;
  // Matrix weights (Linear weights, embedding tables) in a dtype the backend widens inside its
  // kernels (Backend::SupportsWeightDType; the CPU: bf16 with f32 compute, half the bytes decode
  // reads per token). Unset: the compute dtype. Norm weights and biases stay in the compute dtype.
  std::optional<DType> weights;
  // Record batch-1 and small-batch query passes once per shape and replay them (forward_graphs.h:
  // CUDA graphs, one launch instead of hundreds). Unset: wherever the backend can (CUDA).
  std::optional<bool> graphs;
};

struct ForwardResult {
  int64_t vocab_size = 0;
  // [rows, vocab]: the requested rows of every sequence, in sequence order then logit_rows order.
  std::vector<float> logits;
  const float* row(size_t i) const { return logits.data() + i * vocab_size; }
  size_t rows() const { return vocab_size ? logits.size() / vocab_size : 0; }
};

class ForwardGraphs;
struct ForwardGraphStats;

class Transformer {
 public:
  // Loads config.json and the safetensors weights (converted to the compute dtype). Errors name
  // the file and the tensor; a dtype the backend cannot compute in is INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(const std::filesystem::path& model_dir,
                                                           Backend& backend,
                                                           TransformerOptions options = {});
  ~Transformer();

  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  // Hex fingerprint of config and weights.
  const std::string& fingerprint() const { return fingerprint_; }
  // The dtype the weights were stored in on disk.
  DType stored_dtype() const { return stored_dtype_; }
  // Weights and activations; own and encoded K/V.
  DType compute_dtype() const { return compute_dtype_; }
  DType kv_dtype() const { return kv_dtype_; }
  // Matrix weights (TransformerOptions::weights).
  DType weight_dtype() const { return weight_dtype_; }
  // Positions the model serves (ContextLength): the learned table's rows, a practical bound (RoPE,
  // ALiBi), or a sliding window, past which Forward refuses positions.
  int64_t max_position() const { return ContextLength(config_); }

  // An empty cache in the KV dtype; `capacity` rows are allocated by the first forward pass.
  KvCache NewCache(int64_t capacity) const;

  // Runs every sequence's new tokens through the model. Validates ids and positions
  // (INVALID_ARGUMENT naming the sequence and index). Returns after the backend has finished
  // (the caches hold the new K/V); a device error or out-of-memory is the returned status.
  absl::StatusOr<ForwardResult> Forward(absl::Span<const ForwardSequence> sequences,
                                        const ContextKv* context = nullptr) const;

  // Recorded passes (TransformerOptions::graphs): how many are held, made and replayed.
  ForwardGraphStats graph_stats() const;

 private:
  Transformer() = default;
  absl::Status LoadWeights(const std::filesystem::path& model_dir);

  Backend* backend_ = nullptr;
  ModelConfig config_;
  std::string fingerprint_;
  DType stored_dtype_ = DType::kF32;
  DType compute_dtype_ = DType::kF32;
  DType kv_dtype_ = DType::kF32;
  DType weight_dtype_ = DType::kF32;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<ForwardGraphs> graphs_;  // null: every pass runs eagerly
};

}  // namespace manyshot

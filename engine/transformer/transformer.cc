// Transformer: loading (options, config, weights) and the forward pass's entry; the pass itself
// is built step by step in forward_pass.h, the weights loaded by role in weight_loader.h.
#include "engine/transformer/transformer.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/stable_hash.h"
#include "engine/core/status_macros.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensor_names.h"
#include "engine/transformer/forward_graphs.h"
#include "engine/transformer/forward_pass.h"
#include "engine/transformer/weight_loader.h"

namespace manyshot {

Transformer::~Transformer() = default;

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(
    const std::filesystem::path& model_dir, Backend& backend, TransformerOptions options) {
  std::unique_ptr<Transformer> model(new Transformer());
  model->backend_ = &backend;
  model->compute_dtype_ = options.compute.value_or(backend.default_compute_dtype());
  model->kv_dtype_ = options.kv.value_or(model->compute_dtype_);
  if (!IsFloat(model->compute_dtype_) || !backend.SupportsComputeDType(model->compute_dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", backend.name(),
                                                   " backend cannot compute in ",
                                                   std::string(DTypeName(model->compute_dtype_))));
  }
  model->weight_dtype_ = options.weights.value_or(model->compute_dtype_);
  if (!backend.SupportsWeightDType(model->compute_dtype_, model->weight_dtype_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", backend.name(), " backend cannot hold ",
                     std::string(DTypeName(model->weight_dtype_)), " weights for ",
                     std::string(DTypeName(model->compute_dtype_)), " compute"));
  }
  if (!IsFloat(model->kv_dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV dtype ", std::string(DTypeName(model->kv_dtype_)), " is not a float type"));
  }
  auto config = ParseModelConfig(model_dir / "config.json");
  if (!config.ok()) return config.status();
  model->config_ = *config;
  auto status = model->LoadWeights(model_dir);
  if (!status.ok()) return status;
  if (options.graphs.value_or(true) && backend.SupportsCapture()) {
    const Transformer* self = model.get();
    model->graphs_ = std::make_unique<ForwardGraphs>(
        backend, model->config_, *model->weights_, model->compute_dtype_,
        [self](int64_t capacity) { return self->NewCache(capacity); });
  }
  return model;
}

absl::Status Transformer::LoadWeights(const std::filesystem::path& model_dir) {
  auto archive_or = SafetensorsArchive::Open(model_dir);
  if (!archive_or.ok()) return archive_or.status();
  const SafetensorsArchive& archive = *archive_or;
  const ModelConfig& c = config_;
  StableHash config_hash;
  config_hash.Update(ModelConfigToJson(c));
  fingerprint_ = absl::StrCat(archive.fingerprint(), "-", config_hash.Hex());
  // Weights rounded to another dtype are other weights (their outputs and K/V differ).
  if (weight_dtype_ != compute_dtype_) {
    absl::StrAppend(&fingerprint_, "-w", std::string(DTypeName(weight_dtype_)));
  }
  const std::string embed_name =
      TensorName(c.architecture, TensorRole::kTokenEmbd, TensorPart::kWeight);
  if (const TensorInfo* e = FindModelTensor(archive, c.architecture, embed_name)) {
    stored_dtype_ = e->dtype;
  }
  auto weights = LoadModelWeights(model_dir, archive, c, *backend_, compute_dtype_, weight_dtype_);
  if (!weights.ok()) return weights.status();
  weights_ = std::make_unique<ModelWeights>(*std::move(weights));
  return absl::OkStatus();
}

ForwardGraphStats Transformer::graph_stats() const {
  return graphs_ != nullptr ? graphs_->stats() : ForwardGraphStats{};
}

KvCache Transformer::NewCache(int64_t capacity) const {
  return KvCache(*backend_, config_.num_layers, config_.num_kv_heads, config_.head_dim,
                 std::max<int64_t>(1, capacity), kv_dtype_, weights_->alibi_slopes.defined());
}

absl::StatusOr<ForwardResult> Transformer::Forward(absl::Span<const ForwardSequence> sequences,
                                                   const ContextKv* context) const {
  auto batch_or = FlattenBatch(sequences, config_);
  if (!batch_or.ok()) return batch_or.status();
  const FlatBatch& batch = *batch_or;
  ForwardResult result;
  result.vocab_size = config_.vocab_size;
  if (batch.tokens() == 0) return result;
  if (graphs_ != nullptr) {
    std::optional<absl::StatusOr<ForwardResult>> replayed = graphs_->Forward(sequences, context);
    if (replayed.has_value()) return *std::move(replayed);
  }
  ForwardPass pass(*backend_, config_, *weights_, compute_dtype_, sequences, batch, context);
  MANYSHOT_RETURN_IF_ERROR(pass.Run(result));
  return result;
}

}  // namespace manyshot

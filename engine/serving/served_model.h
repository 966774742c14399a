// The engine's front door: loads any supported model directory on a backend and prepares any task
// kind from API-neutral options. Whether a model is decoder-only (Transformer, IclTask) or
// encoder-decoder (T5Model, T5Task) is decided here, once, by config.json's model_type; each
// architecture is one implementation of this interface (decoder_only_model.h,
// encoder_decoder_model.h).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/core/dtype.h"
#include "engine/serving/model_marker.h"
#include "engine/serving/prepared_task.h"
#include "engine/serving/served_task_options.h"
#include "engine/task/example.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot {

// What the served model is, for GetServerInfo and logs. Figures an architecture does not have
// stay 0 or empty.
struct ModelDescription {
  std::filesystem::path path;  // the model directory
  // What the marker of the manyshot tool that wrote the model says (model_marker.h); empty for a
  // checkpoint from elsewhere.
  ModelMarker marker;
  std::string model_type;  // config.json's: "t5", "llama", "gpt2", ...
  bool encoder_decoder = false;
  uint32_t layers = 0;
  uint32_t hidden_size = 0;
  uint32_t heads = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t vocab_size = 0;
  uint32_t context_length = 0;    // 0: relative positions, no fixed window
  std::string weight_dtype;       // on disk; empty when the model holds its weights as computed
  std::string held_weight_dtype;  // in memory
  DType compute_dtype = DType::kF32;
  DType kv_dtype = DType::kF32;
  std::string fingerprint;
  // Head dim of the attention that reads cached contexts; 0 when the model caches none.
  int64_t context_head_dim = 0;
  // The model's shape in words, for the line the server logs once it is loaded.
  std::string summary;
  // What the server should warn about at startup (a tokenizer larger than the vocabulary); empty
  // when nothing.
  std::string warning;

  // "decoder-only" or "encoder-decoder".
  const char* architecture() const { return encoder_decoder ? "encoder-decoder" : "decoder-only"; }
};

// The dtypes a model is loaded in; unset: the backend's defaults.
struct ServedModelOptions {
  std::optional<DType> compute;
  // Matrix weights in a dtype the backend widens in its kernels: decoder-only models only.
  std::optional<DType> weights;
  // How the caller names `weights` in errors ("--weight_dtype=bf16").
  std::string weights_name = "weights";
  // Decoder-only models: record query passes as CUDA graphs (TransformerOptions::graphs).
  std::optional<bool> graphs;
};

class ServedModel {
 public:
  // Loads the model in `dir`, its tokenizer and its marker. Errors name the directory and the
  // file or tensor; weights set for an encoder-decoder model is INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Load(const std::filesystem::path& dir,
                                                           Backend& backend,
                                                           const ServedModelOptions& options);

  virtual ~ServedModel() = default;

  const ModelDescription& description() const { return description_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }

  // FAILED_PRECONDITION naming `what`, the mode and the model type when this architecture does
  // not have `mode`.
  virtual absl::Status CheckMode(ServedMode mode, const std::string& what) const = 0;
  // CheckMode, then the options this architecture does not read but the caller set, and the
  // mode's own options (INVALID_ARGUMENT naming them with options.field_prefix). Nothing is
  // tokenized: a create checks this before its task becomes visible.
  virtual absl::Status CheckTaskOptions(const ServedTaskOptions& options) const = 0;
  // Renders and tokenizes the demonstrations (and computes what the task keeps between queries);
  // no context is encoded yet. INVALID_ARGUMENT names the option or demonstration at fault.
  virtual absl::StatusOr<PreparedTask> PrepareTask(
      const ServedTaskOptions& options, const std::vector<Example>& demonstrations) const = 0;

 protected:
  ServedModel(ModelDescription description, std::unique_ptr<Tokenizer> tokenizer)
      : description_(std::move(description)), tokenizer_(std::move(tokenizer)) {}

 private:
  ModelDescription description_;
  std::unique_ptr<Tokenizer> tokenizer_;
};

}  // namespace manyshot

// The model the server serves: the backend, the model on it (a decoder-only Transformer, or a
// T5Model when config.json's model_type is "t5") and the tokenizer, loaded once at startup. With no
// --model_dir the server serves a generated tiny GPT-2-style model with RANDOM weights (the real
// GPT-2 tokenizer, so the plumbing is real, but its answers are meaningless).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/model/tiny_model.h"
#include "engine/t5/t5_model.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"
#include "server/server_config.h"

namespace manyshot::server {

struct LoadedModel {
  // Declared first so it is destroyed last: the transformer's tensors live on it.
  std::unique_ptr<Backend> backend;
  std::string backend_selection;  // why this backend: the flag, or what the GPU probe found
  // Exactly one of these is set: `transformer` for decoder-only models, `t5` for encoder-decoder
  // ones.
  std::unique_ptr<Transformer> transformer;
  std::unique_ptr<T5Model> t5;
  std::unique_ptr<Tokenizer> tokenizer;
  std::filesystem::path path;  // the model directory served
  // True when the directory holds the tiny-model marker (manyshot_tiny_model.json): the weights
  // were generated at random and the model's answers mean nothing.
  bool random_weights = false;
  // What the marker left by the manyshot tool that wrote the model says its weights are (its
  // "note"), e.g. the hand-built induction model's; empty for a model without a marker (a
  // checkpoint from elsewhere). ReadModelMarker reads it.
  std::string weights_note;

  bool encoder_decoder() const { return t5 != nullptr; }
  // "decoder-only" or "encoder-decoder" (GetServerInfo, logs, metrics).
  const char* architecture() const { return t5 ? "encoder-decoder" : "decoder-only"; }
  // config.json's model_type: "t5", "llama", "gpt2", ...
  std::string model_type() const { return t5 ? "t5" : transformer->config().model_type; }
  DType compute_dtype() const { return t5 ? t5->compute_dtype() : transformer->compute_dtype(); }
  DType kv_dtype() const { return t5 ? t5->kv_dtype() : transformer->kv_dtype(); }
  const std::string& fingerprint() const {
    return t5 ? t5->fingerprint() : transformer->fingerprint();
  }
};

// Where the default model lives inside the data directory.
inline constexpr char kDefaultModelSubdir[] = "models/default-gpt2-tiny";
// The name of the marker file that WriteTinyModel leaves in every generated model.
inline constexpr char kTinyModelMarker[] = "manyshot_tiny_model.json";

// What the marker file left by a manyshot model generator says about the weights.
struct ModelMarker {
  std::string file;             // kTinyModelMarker or kInductionModelMarker; empty: no marker
  bool random_weights = false;  // the tiny models' weights are random, the induction model's not
  std::string note;             // the marker's "note": what the weights are
};

// Reads the marker in `model_dir`, the same way for every generator's marker (kTinyModelMarker:
// make-tiny-model, make-tiny-t5 and the default model; kInductionModelMarker:
// make-induction-model). No marker: an empty ModelMarker. A marker that is not a JSON object
// with a string "note" is an error naming the file.
absl::StatusOr<ModelMarker> ReadModelMarker(const std::filesystem::path& model_dir);

// The default model: family gpt2, the real GPT-2 vocabulary (50257), hidden 128, 4 layers,
// 4 heads, intermediate 512, 1024 positions, f32, a fixed seed.
TinyModelSpec DefaultModelSpec();

// Loads config.model_dir, or (when empty) the default model in data_dir/models/default-gpt2-tiny,
// generating it first from config.default_tokenizer_dir when it does not exist yet. Generation
// writes to a temporary directory that is renamed into place, so a crash never leaves a half
// model that a later start would take for a complete one. Errors name the file or tensor.
absl::StatusOr<LoadedModel> LoadServedModel(const ServerConfig& config,
                                            const std::filesystem::path& data_dir);

}  // namespace manyshot::server

// The model the server serves, loaded once at startup from the flags: the backend the flags (or
// the GPU probe) select, and the ServedModel on it (engine/serving/served_model.h), which knows
// the model's architecture so that the server does not. With no --model_dir the server serves the
// default model (server/default_model.h).
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/serving/served_model.h"
#include "server/server_config.h"

namespace manyshot::server {

struct LoadedModel {
  // Declared first so it is destroyed last: the model's tensors live on it.
  std::unique_ptr<Backend> backend;
  std::string backend_selection;  // why this backend: the flag, or what the GPU probe found
  std::unique_ptr<ServedModel> served;

  const ModelDescription& description() const { return served->description(); }
  const Tokenizer& tokenizer() const { return served->tokenizer(); }
};

// Loads config.model_dir, or (when empty) the default model in data_dir/models/default-gpt2-tiny,
// generating it first when it does not exist yet. Errors name the flag, file or tensor.
absl::StatusOr<LoadedModel> LoadServedModel(const ServerConfig& config,
                                            const std::filesystem::path& data_dir);

}  // namespace manyshot::server

#include "server/model_loader.h"

#include <chrono>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/backends/backend_factory.h"
#include "server/default_model.h"
#include "server/dtype_flag.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

namespace fs = std::filesystem;

// --model_dir as an absolute path, or the default model (generated on first use).
absl::StatusOr<fs::path> ModelDirectory(const ServerConfig& config, const fs::path& data_dir) {
  std::error_code ec;
  fs::path model_dir;
  if (config.model_dir.empty()) {
    model_dir = data_dir / kDefaultModelSubdir;
    if (absl::Status status = EnsureDefaultModel(config, model_dir); !status.ok()) return status;
  } else {
    model_dir = config.model_dir;
    if (!fs::exists(model_dir, ec)) {
      return absl::NotFoundError(
          absl::StrCat("--model_dir=", config.model_dir, ": no such directory"));
    }
    if (!fs::is_directory(model_dir, ec)) {
      return absl::FailedPreconditionError(
          absl::StrCat("--model_dir=", config.model_dir, ": not a directory"));
    }
  }
  return fs::absolute(model_dir, ec).lexically_normal();
}

// The backend --backend names, or the one the GPU probe picks; `selection` says why.
absl::StatusOr<std::unique_ptr<Backend>> SelectBackend(const ServerConfig& config,
                                                       std::string* selection) {
  BackendKind kind;
  if (config.backend.empty()) {
    kind = DefaultBackendKind(selection);
  } else {
    auto parsed = ParseBackendKind(config.backend);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--backend: ", parsed.status().message()));
    }
    kind = *parsed;
    *selection = absl::StrCat("--backend=", config.backend);
  }
  return CreateBackend(kind, config.device, config.threads);
}

absl::StatusOr<ServedModelOptions> DtypeOptions(const ServerConfig& config) {
  ServedModelOptions options;
  auto compute = ParseDTypeFlag("compute_dtype", config.compute_dtype);
  if (!compute.ok()) return compute.status();
  options.compute = *compute;
  auto weights = ParseDTypeFlag("weight_dtype", config.weight_dtype);
  if (!weights.ok()) return weights.status();
  options.weights = *weights;
  options.weights_name = absl::StrCat("--weight_dtype=", config.weight_dtype);
  options.graphs = config.cuda_graphs;
  return options;
}

// Says at startup what a generated model's marker says: a warning when the weights are random.
void LogModelMarker(const ModelDescription& model) {
  const ModelMarker& marker = model.marker;
  if (marker.file.empty()) return;
  if (marker.random_weights) {
    spdlog::warn(
        "the model in {} has RANDOM weights ({}: \"{}\"): it exercises the whole service, but its "
        "answers are meaningless. Pass --model_dir=DIR to serve a trained Hugging Face model.",
        model.path.string(), marker.file, marker.note);
  } else {
    spdlog::info("the model in {} was written by a manyshot tool ({}): {}", model.path.string(),
                 marker.file, marker.note);
  }
}

}  // namespace

absl::StatusOr<LoadedModel> LoadServedModel(const ServerConfig& config, const fs::path& data_dir) {
  auto model_dir = ModelDirectory(config, data_dir);
  if (!model_dir.ok()) return model_dir.status();
  const auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  auto backend = SelectBackend(config, &loaded.backend_selection);
  if (!backend.ok()) return backend.status();
  loaded.backend = *std::move(backend);
  spdlog::info("backend {} ({}): {}", loaded.backend->name(), loaded.backend_selection,
               loaded.backend->description());
  auto options = DtypeOptions(config);
  if (!options.ok()) return options.status();
  auto served = ServedModel::Load(*model_dir, *loaded.backend, *options);
  if (!served.ok()) return served.status();
  loaded.served = *std::move(served);

  const ModelDescription& d = loaded.description();
  if (!d.warning.empty()) spdlog::warn("{}", d.warning);
  spdlog::info("model loaded in {} ms: {} ({}), tokenizer {} {}, backend {}",
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count(),
               d.path.string(), d.summary, loaded.tokenizer().kind(),
               loaded.tokenizer().fingerprint(), loaded.backend->description());
  LogModelMarker(d);
  return loaded;
}

}  // namespace manyshot::server

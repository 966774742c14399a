#include "server/model_loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/backends/backend_factory.h"
#include "engine/core/dtype.h"
#include "engine/model/induction_model.h"
#include "engine/model/t5_config.h"
#include "nlohmann/json.hpp"
#include "server/dtype_flag.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

namespace fs = std::filesystem;

// fsync a file or directory so that a rename after it publishes complete contents.
absl::Status SyncPath(const fs::path& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat(
        "cannot open ", path.string(), " to sync it: ", std::generic_category().message(errno)));
  }
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) {
    return absl::InternalError(
        absl::StrCat("fsync ", path.string(), ": ", std::generic_category().message(err)));
  }
  return absl::OkStatus();
}

// Says at startup what a generated model's marker says: a warning when the weights are random.
void LogModelMarker(const fs::path& model_dir, const ModelMarker& marker) {
  if (marker.file.empty()) return;
  if (marker.random_weights) {
    spdlog::warn(
        "the model in {} has RANDOM weights ({}: \"{}\"): it exercises the whole service, but its "
        "answers are meaningless. Pass --model_dir=DIR to serve a trained Hugging Face model.",
        model_dir.string(), marker.file, marker.note);
  } else {
    spdlog::info("the model in {} was written by a manyshot tool ({}): {}", model_dir.string(),
                 marker.file, marker.note);
  }
}

bool HasTokenizerFiles(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "tokenizer.json", ec) ||
         (fs::is_regular_file(dir / "vocab.json", ec) &&
          fs::is_regular_file(dir / "merges.txt", ec));
}

// Generates the default model into `final_dir` unless it is already there.
absl::Status EnsureDefaultModel(const ServerConfig& config, const fs::path& final_dir) {
  std::error_code ec;
  if (fs::is_directory(final_dir, ec)) {
    spdlog::info("reusing the default model in {}", final_dir.string());
    return absl::OkStatus();
  }
  const fs::path tokenizer_dir = config.default_tokenizer_dir;
  if (tokenizer_dir.empty() || !HasTokenizerFiles(tokenizer_dir)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the default model needs the GPT-2 tokenizer files (vocab.json and merges.txt) in "
        "--default_tokenizer_dir=",
        tokenizer_dir.string(),
        fs::is_directory(tokenizer_dir, ec) ? ", which lacks them" : ", which does not exist",
        "; run scripts/setup.sh to install them, or pass --model_dir=DIR to serve a Hugging Face "
        "model directory"));
  }

  const fs::path parent = final_dir.parent_path();
  fs::create_directories(parent, ec);
  if (ec)
    return absl::InternalError(absl::StrCat("cannot create ", parent.string(), ": ", ec.message()));
  // We hold the data directory's lock, so a leftover temporary directory can only come from a
  // run that crashed while generating: remove it.
  const fs::path tmp_dir = parent / ("." + final_dir.filename().string() + ".tmp");
  fs::remove_all(tmp_dir, ec);
  if (ec)
    return absl::InternalError(
        absl::StrCat("cannot remove ", tmp_dir.string(), ": ", ec.message()));

  spdlog::info("generating the default model (tiny GPT-2-style, random weights) in {}",
               final_dir.string());
  const auto start = std::chrono::steady_clock::now();
  absl::Status status = WriteTinyModel(DefaultModelSpec(), tokenizer_dir, tmp_dir);
  if (!status.ok()) {
    fs::remove_all(tmp_dir, ec);
    return absl::Status(status.code(),
                        absl::StrCat("generating the default model: ", status.message()));
  }
  for (const auto& entry : fs::directory_iterator(tmp_dir, ec)) {
    std::error_code type_ec;
    if (!entry.is_regular_file(type_ec)) continue;
    if (status = SyncPath(entry.path(), false); !status.ok()) return status;
  }
  if (ec) return absl::InternalError(absl::StrCat(tmp_dir.string(), ": ", ec.message()));
  if (status = SyncPath(tmp_dir, true); !status.ok()) return status;
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp_dir.string(), " to ",
                                            final_dir.string(), ": ", ec.message()));
  }
  if (status = SyncPath(parent, true); !status.ok()) return status;
  spdlog::info("generated the default model in {} ms",
               std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::steady_clock::now() - start)
                   .count());
  return absl::OkStatus();
}

}  // namespace

TinyModelSpec DefaultModelSpec() {
  TinyModelSpec spec;
  spec.family = "gpt2";
  spec.vocab_size = 50257;
  spec.hidden_size = 128;
  spec.intermediate_size = 512;
  spec.num_layers = 4;
  spec.num_heads = 4;
  spec.num_kv_heads = 4;
  spec.max_position_embeddings = 1024;
  spec.tie_word_embeddings = true;
  spec.attention_bias = true;
  spec.dtype = DType::kF32;
  spec.shards = 1;
  spec.seed = 20240501;
  return spec;
}

absl::StatusOr<ModelMarker> ReadModelMarker(const fs::path& model_dir) {
  struct Known {
    const char* file;
    bool random_weights;
  };
  static constexpr Known kKnown[] = {{kTinyModelMarker, true}, {kInductionModelMarker, false}};
  for (const Known& known : kKnown) {
    const fs::path path = model_dir / known.file;
    std::error_code ec;
    if (!fs::exists(path, ec)) continue;
    std::ifstream in(path);
    const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    const auto note = json.is_object() ? json.find("note") : json.end();
    if (note == json.end() || !note->is_string()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the model marker ", path.string(),
                       " is not a JSON object with a string \"note\" saying what the model is"));
    }
    ModelMarker marker;
    marker.file = known.file;
    marker.random_weights = known.random_weights;
    marker.note = note->get<std::string>();
    return marker;
  }
  return ModelMarker{};
}

absl::StatusOr<LoadedModel> LoadServedModel(const ServerConfig& config, const fs::path& data_dir) {
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
  model_dir = fs::absolute(model_dir, ec).lexically_normal();

  const auto start = std::chrono::steady_clock::now();
  LoadedModel loaded;
  loaded.path = model_dir;
  auto marker = ReadModelMarker(model_dir);
  if (!marker.ok()) return marker.status();
  loaded.random_weights = marker->random_weights;
  loaded.weights_note = marker->note;
  BackendKind kind;
  if (config.backend.empty()) {
    kind = DefaultBackendKind(&loaded.backend_selection);
  } else {
    auto parsed = ParseBackendKind(config.backend);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--backend: ", parsed.status().message()));
    }
    kind = *parsed;
    loaded.backend_selection = absl::StrCat("--backend=", config.backend);
  }
  auto backend = CreateBackend(kind, config.device, config.threads);
  if (!backend.ok()) return backend.status();
  loaded.backend = *std::move(backend);
  spdlog::info("backend {} ({}): {}", loaded.backend->name(), loaded.backend_selection,
               loaded.backend->description());
  TransformerOptions options;
  auto compute = ParseDTypeFlag("compute_dtype", config.compute_dtype);
  if (!compute.ok()) return compute.status();
  options.compute = *compute;
  auto weights = ParseDTypeFlag("weight_dtype", config.weight_dtype);
  if (!weights.ok()) return weights.status();
  options.weights = *weights;
  // An encoder-decoder (T5) directory loads as T5Model; every other model_type as a Transformer,
  // whose loader names what it does not support.
  auto model_type = ConfigModelType(model_dir / "config.json");
  if (model_type.ok() && *model_type == "t5") {
    if (options.weights.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--weight_dtype=", config.weight_dtype,
                       " applies to decoder-only models; the T5 model in ", model_dir.string(),
                       " holds its weights in the compute dtype (set --compute_dtype)"));
    }
    auto t5 = T5Model::Load(model_dir, *loaded.backend, options);
    if (!t5.ok()) {
      return absl::Status(
          t5.status().code(),
          absl::StrCat("loading the model in ", model_dir.string(), ": ", t5.status().message()));
    }
    loaded.t5 = *std::move(t5);
    auto tokenizer = LoadTokenizer(model_dir);
    if (!tokenizer.ok()) {
      return absl::Status(tokenizer.status().code(),
                          absl::StrCat("loading the tokenizer in ", model_dir.string(), ": ",
                                       tokenizer.status().message()));
    }
    loaded.tokenizer = *std::move(tokenizer);
    const T5Config& c = loaded.t5->config();
    if (loaded.tokenizer->vocab_size() > c.vocab_size) {
      spdlog::warn(
          "the tokenizer has {} ids but the model's vocabulary is {}: ids past it will be "
          "rejected",
          loaded.tokenizer->vocab_size(), c.vocab_size);
    }
    spdlog::info(
        "model loaded in {} ms: {} (t5, encoder-decoder, {} encoder / {} decoder layers, d_model "
        "{}, {} heads of {}, vocab {}, computed in {}, fingerprint {}), tokenizer {} {}, backend "
        "{}",
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                              start)
            .count(),
        model_dir.string(), c.num_layers, c.num_decoder_layers, c.d_model, c.num_heads, c.d_kv,
        c.vocab_size, std::string(DTypeName(loaded.t5->compute_dtype())), loaded.t5->fingerprint(),
        loaded.tokenizer->kind(), loaded.tokenizer->fingerprint(), loaded.backend->description());
    LogModelMarker(model_dir, *marker);
    return loaded;
  }
  auto transformer = Transformer::Load(model_dir, *loaded.backend, options);
  if (!transformer.ok()) {
    return absl::Status(transformer.status().code(),
                        absl::StrCat("loading the model in ", model_dir.string(), ": ",
                                     transformer.status().message()));
  }
  loaded.transformer = *std::move(transformer);
  auto tokenizer = LoadTokenizer(model_dir);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(),
                        absl::StrCat("loading the tokenizer in ", model_dir.string(), ": ",
                                     tokenizer.status().message()));
  }
  loaded.tokenizer = *std::move(tokenizer);

  const ModelConfig& c = loaded.transformer->config();
  if (loaded.tokenizer->vocab_size() > c.vocab_size) {
    spdlog::warn(
        "the tokenizer has {} ids but the model's vocabulary is {}: ids past it will be rejected",
        loaded.tokenizer->vocab_size(), c.vocab_size);
  }
  spdlog::info(
      "model loaded in {} ms: {} ({}, decoder-only, {} layers, hidden {}, {} heads / {} kv, vocab "
      "{}, context "
      "{}, weights stored as {} held as {} computed in {}, KV {}, fingerprint {}), tokenizer {} "
      "{}, "
      "backend {}",
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                            start)
          .count(),
      model_dir.string(), c.model_type, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads,
      c.vocab_size, c.max_position_embeddings,
      std::string(DTypeName(loaded.transformer->stored_dtype())),
      std::string(DTypeName(loaded.transformer->weight_dtype())),
      std::string(DTypeName(loaded.transformer->compute_dtype())),
      std::string(DTypeName(loaded.transformer->kv_dtype())), loaded.transformer->fingerprint(),
      loaded.tokenizer->kind(), loaded.tokenizer->fingerprint(), loaded.backend->description());
  LogModelMarker(model_dir, *marker);
  return loaded;
}

}  // namespace manyshot::server

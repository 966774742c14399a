#include "server/default_model.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
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

bool HasTokenizerFiles(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "tokenizer.json", ec) ||
         (fs::is_regular_file(dir / "vocab.json", ec) &&
          fs::is_regular_file(dir / "merges.txt", ec));
}

}  // namespace

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

}  // namespace manyshot::server

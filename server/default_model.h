// The model a server serves when no --model_dir is given: a tiny GPT-2-style model with RANDOM
// weights (the real GPT-2 tokenizer, so the plumbing is real, but its answers are meaningless),
// generated once into the data directory.
#pragma once

#include <filesystem>

#include "absl/status/status.h"
#include "engine/model/synthetic/tiny_model.h"
#include "server/server_config.h"

namespace manyshot::server {

// Where the default model lives inside the data directory.
inline constexpr char kDefaultModelSubdir[] = "models/default-gpt2-tiny";

// The default model: family gpt2, the real GPT-2 vocabulary (50257), hidden 128, 4 layers,
// 4 heads, intermediate 512, 1024 positions, f32, a fixed seed.
TinyModelSpec DefaultModelSpec();

// Generates the default model into `final_dir` (from config.default_tokenizer_dir) unless it is
// already there. Generation writes to a temporary directory that is renamed into place, so a crash
// never leaves a half model that a later start would take for a complete one.
absl::Status EnsureDefaultModel(const ServerConfig& config, const std::filesystem::path& final_dir);

}  // namespace manyshot::server

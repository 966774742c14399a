// Test support: the tiny models of tests/golden, generated on demand (deterministically, from the
// spec recorded in each golden file) into a per-process temp directory and loaded once.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "engine/cpu/cpu_backend.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"
#include "nlohmann/json.hpp"

namespace manyshot::testing {

// tests/golden/forward_<name>.json, parsed.
const nlohmann::json& ForwardGolden(const std::string& name);

// The golden's model written to disk (once per process); returns its directory.
std::filesystem::path GoldenModelDir(const std::string& name);

// A CPU backend shared by the tests (2 threads, so the parallel paths run).
CpuBackend& TestBackend();

// The golden's model loaded on TestBackend() (once per process).
const Transformer& GoldenModel(const std::string& name);

// The real GPT-2 tokenizer (MANYSHOT_GPT2_TOKENIZER_DIR), loaded once; aborts if missing.
const Tokenizer& Gpt2Tokenizer();

// Eight SST-2 demonstrations (label words negative / positive) for small task tests.
std::vector<Example> Sst2Demonstrations();

inline const char* kGoldenModels[] = {"gpt2", "llama", "llama_gqa_tied", "mistral", "qwen2"};

}  // namespace manyshot::testing

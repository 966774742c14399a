// Test support: the tiny models of tests/golden, generated on demand (deterministically, from the
// spec recorded in each golden file) into a per-process temp directory and loaded once.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/backends/backend_factory.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace manyshot::testing {

// The value of a load the tests cannot go on without; otherwise a test failure naming the error,
// then abort (rather than a crash on the missing value, with the reason lost).
template <typename T>
T ValueOrAbort(absl::StatusOr<T> loaded) {
  if (!loaded.ok()) {
    ADD_FAILURE() << loaded.status();
    std::abort();
  }
  return *std::move(loaded);
}

// tests/golden/forward_<name>.json, parsed.
const nlohmann::json& ForwardGolden(const std::string& name);

// The golden's model written to disk (once per process); returns its directory.
std::filesystem::path GoldenModelDir(const std::string& name);

// A CPU backend shared by the tests (2 threads, so the parallel paths run).
CpuBackend& TestBackend();

// The golden's model loaded on TestBackend() (once per process).
const Transformer& GoldenModel(const std::string& name);

// Model-level tests run on every backend this build has: "cpu" always, "cuda" (instantiated
// with the prefix Cuda, ctest label gpu) and "simt-cuda" (the CUDA backend on the SIMT emulator,
// prefix SimtCuda, everywhere), which compute in f32 there so that the goldens hold at
// their f32 tolerance; the bf16/f16 paths are checked against the CPU in tests/engine/backend.
// The shared backend of that name, or nullptr with the reason it cannot run here (not built, no
// usable GPU: the driver's own message).
Backend* NamedTestBackend(const std::string& backend, std::string* why_not);
// "" when NamedTestBackend(backend) can run here, else the reason a test gives GTEST_SKIP().
std::string BackendUnavailable(const std::string& backend);
// Test-name suffix for a suite parameterised by backend name: "Cpu", "SimtCuda", "Cuda".
std::string BackendTestName(const ::testing::TestParamInfo<std::string>& info);
// The golden's model loaded on NamedTestBackend(backend) (once per process and backend).
const Transformer& GoldenModelOn(const std::string& name, const std::string& backend);

// The parameter of model-level tests: a golden model family on a backend.
struct ModelOnBackend {
  std::string model;
  std::string backend;
};
inline void PrintTo(const ModelOnBackend& p, std::ostream* os) {
  *os << p.model << "@" << p.backend;
}
// Every golden family on `backend`, and test names "gpt2", "llama", ...
std::vector<ModelOnBackend> GoldenModelsOn(const std::string& backend);
// The RoPE-scaled golden models (kRopeScaledModels) on `backend`.
std::vector<ModelOnBackend> RopeScaledModelsOn(const std::string& backend);
std::string ModelOnBackendName(const ::testing::TestParamInfo<ModelOnBackend>& info);

// Skips (reporting why) when the backend cannot run here; model() is the golden on it.
class ModelBackendTest : public ::testing::TestWithParam<ModelOnBackend> {
 protected:
  void SetUp() override {
    const std::string why = BackendUnavailable(GetParam().backend);
    if (!why.empty()) GTEST_SKIP() << why;
  }
  const std::string& family() const { return GetParam().model; }
  const Transformer& model() const { return GoldenModelOn(GetParam().model, GetParam().backend); }
  const Transformer& model(const std::string& name) const {
    return GoldenModelOn(name, GetParam().backend);
  }
};

// Instantiates a ModelBackendTest suite for every family on the CPU, again under the prefix
// Cuda on the CUDA backend (those tests carry the ctest label gpu: tests/CMakeLists.txt), and
// under SimtCuda on the same CUDA backend code running on the SIMT emulator (testing/simt: every
// machine runs those).
#define MANYSHOT_INSTANTIATE_ON_EVERY_BACKEND(suite)                                              \
  INSTANTIATE_TEST_SUITE_P(AllFamilies, suite,                                                    \
                           ::testing::ValuesIn(::manyshot::testing::GoldenModelsOn("cpu")),       \
                           ::manyshot::testing::ModelOnBackendName);                              \
  INSTANTIATE_TEST_SUITE_P(Cuda, suite,                                                           \
                           ::testing::ValuesIn(::manyshot::testing::GoldenModelsOn("cuda")),      \
                           ::manyshot::testing::ModelOnBackendName);                              \
  INSTANTIATE_TEST_SUITE_P(SimtCuda, suite,                                                       \
                           ::testing::ValuesIn(::manyshot::testing::GoldenModelsOn("simt-cuda")), \
                           ::manyshot::testing::ModelOnBackendName)

// The real GPT-2 tokenizer (MANYSHOT_GPT2_TOKENIZER_DIR), loaded once; aborts if missing.
const Tokenizer& Gpt2Tokenizer();

// Eight SST-2 demonstrations (label words negative / positive) for small task tests.
std::vector<Example> Sst2Demonstrations();

inline const char* kGoldenModels[] = {
    "gpt2",         "llama", "llama_gqa_tied", "mistral", "qwen2",  "bloom",
    "bloom_heads6", "opt",   "opt_post_ln",    "phi3",    "pythia", "gpt_neox_sequential",
    "gemma",        "gemma2"};

// Goldens with config.json rope_scaling: Llama-family ones, one per rope_type, and GPT-NeoX's
// partial rotary with linear scaling (make_goldens.py). Only the forward goldens cover them:
// rope_scaling changes nothing but the RoPE table.
inline const char* kRopeScaledModels[] = {"llama_rope_linear", "mistral_rope_dynamic",
                                          "llama_rope_llama3", "qwen2_rope_yarn",
                                          "pythia_rope_linear"};

}  // namespace manyshot::testing

#include "tests/engine/support/golden_models.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>

#include "engine/cuda/cuda_backend.h"  // CreateCudaBackend, here from testing/simt (emulated)
#include "engine/model/arch_traits.h"
#include "engine/model/synthetic/tiny_model.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"

namespace manyshot::testing {
namespace {

DType ParseDType(const std::string& s) {
  if (s == "f16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  return DType::kF32;
}

// Sets config.json keys as a checkpoint's would: rope_scaling, and the spec's "config" keys (the
// weights do not depend on them; as tools/reference/make_goldens.py does).
void SetConfigKeys(const std::filesystem::path& config_json, const nlohmann::json& keys) {
  nlohmann::ordered_json config;
  {
    std::ifstream in(config_json);
    config = nlohmann::ordered_json::parse(in);
  }
  for (const auto& [key, value] : keys.items()) config[key] = value;
  std::ofstream(config_json) << config.dump(2) << "\n";
}

std::mutex& Mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

const nlohmann::json& ForwardGolden(const std::string& name) {
  static std::map<std::string, nlohmann::json> cache;
  std::lock_guard<std::mutex> lock(Mutex());
  auto it = cache.find(name);
  if (it == cache.end()) {
    std::ifstream in(std::string(MANYSHOT_SOURCE_DIR) + "/tests/golden/forward_" + name + ".json");
    it = cache.emplace(name, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

std::filesystem::path GoldenModelDir(const std::string& name) {
  const nlohmann::json& m = ForwardGolden(name)["model"];
  auto dir = ProcessScratchDir() / name;
  std::lock_guard<std::mutex> lock(Mutex());
  if (!std::filesystem::exists(dir / "config.json")) {
    TinyModelSpec spec;
    spec.family = m["family"];
    spec.vocab_size = m["vocab_size"];
    spec.hidden_size = m["hidden_size"];
    spec.intermediate_size = m["intermediate_size"];
    spec.num_layers = m["num_layers"];
    spec.num_heads = m["num_heads"];
    spec.num_kv_heads = m["num_kv_heads"];
    spec.head_dim = m.value("head_dim", int64_t{0});  // recorded for Gemma only
    spec.max_position_embeddings = m["max_position_embeddings"];
    spec.tie_word_embeddings = m["tie_word_embeddings"];
    spec.attention_bias = m["attention_bias"];
    spec.dtype = ParseDType(m["dtype"]);
    spec.shards = m["shards"];
    spec.seed = m["seed"];
    spec.rope_theta = m["rope_theta"];
    spec.pre_norm = m.value("pre_norm", true);  // recorded for OPT only
    // Weights never depend on tokenizer files: an empty directory is enough here.
    auto empty = ProcessScratchDir() / "no-tokenizer";
    std::filesystem::create_directories(empty);
    auto status = WriteTinyModel(spec, empty, dir);
    EXPECT_TRUE(status.ok()) << status;
    if (m.contains("rope_scaling")) {
      SetConfigKeys(dir / "config.json", {{"rope_scaling", m["rope_scaling"]}});
    }
    if (m.contains("config")) SetConfigKeys(dir / "config.json", m["config"]);
  }
  return dir;
}

CpuBackend& TestBackend() {
  static CpuBackend backend(2);
  return backend;
}

const Transformer& GoldenModel(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Transformer>> models;
  auto dir = GoldenModelDir(name);
  std::lock_guard<std::mutex> lock(Mutex());
  auto& slot = models[name];
  if (!slot) {
    auto loaded = Transformer::Load(dir, TestBackend());
    slot = ValueOrAbort(std::move(loaded));
  }
  return *slot;
}

Backend* NamedTestBackend(const std::string& backend, std::string* why_not) {
  if (backend == "cpu") return &TestBackend();
  // The CUDA backends (and the models on them, GoldenModelOn) are never destroyed: the CUDA
  // runtime tears itself down in an exit handler of its own, registered when the backend is
  // created, so a backend destroyed by a static's destructor after it would call into a runtime
  // that is gone (on the emulator that was a double free at exit, after every test had passed).
  if (backend == "simt-cuda") {
    // The CUDA backend's own code on the SIMT emulator (testing/simt): runs everywhere.
    static Backend* emulated = [] {
      auto created = CreateCudaBackend(0);
      EXPECT_TRUE(created.ok()) << created.status();
      return created.ok() ? created->release() : nullptr;
    }();
    if (why_not) *why_not = "the emulated CUDA backend could not be created";
    return emulated;
  }
  static Backend* cuda = nullptr;
  static std::string cuda_error;
  static std::once_flag once;
  std::call_once(once, [] {
    auto created = CreateBackend(BackendKind::kCuda, 0, 0);
    if (created.ok()) {
      cuda = created->release();
    } else {
      cuda_error = std::string(created.status().message());
    }
  });
  if (why_not) *why_not = cuda_error;
  return cuda;
}

std::string BackendUnavailable(const std::string& backend) {
  std::string why;
  if (NamedTestBackend(backend, &why) != nullptr) return "";
  return "backend " + backend + " cannot run here: " + why;
}

std::string BackendTestName(const ::testing::TestParamInfo<std::string>& info) {
  if (info.param == "cpu") return "Cpu";
  if (info.param == "simt-cuda") return "SimtCuda";
  return "Cuda";
}

const Transformer& GoldenModelOn(const std::string& name, const std::string& backend) {
  if (backend == "cpu") return GoldenModel(name);
  // Never destroyed, like the backends they live on (NamedTestBackend).
  static auto* models = new std::map<std::string, std::unique_ptr<Transformer>>();
  auto dir = GoldenModelDir(name);
  std::lock_guard<std::mutex> lock(Mutex());
  auto& slot = (*models)[name + "@" + backend];
  if (!slot) {
    Backend* b = NamedTestBackend(backend, nullptr);
    EXPECT_NE(b, nullptr);
    TransformerOptions options;
    options.compute = DType::kF32;
    options.kv = DType::kF32;
    auto loaded = Transformer::Load(dir, *b, options);
    slot = ValueOrAbort(std::move(loaded));
  }
  return *slot;
}

std::vector<ModelOnBackend> GoldenModelsOn(const std::string& backend) {
  std::vector<ModelOnBackend> out;
  for (const char* name : kGoldenModels) out.push_back({name, backend});
  return out;
}

std::vector<ModelOnBackend> RopeScaledModelsOn(const std::string& backend) {
  std::vector<ModelOnBackend> out;
  for (const char* name : kRopeScaledModels) out.push_back({name, backend});
  return out;
}

std::string ModelOnBackendName(const ::testing::TestParamInfo<ModelOnBackend>& info) {
  return info.param.model;
}

const Tokenizer& Gpt2Tokenizer() {
  static std::unique_ptr<Tokenizer> tokenizer = [] {
    auto t = LoadTokenizer(MANYSHOT_GPT2_TOKENIZER_DIR);
    if (!t.ok()) {
      std::fprintf(stderr, "GPT-2 tokenizer: %s\n", t.status().ToString().c_str());
      std::abort();
    }
    return *std::move(t);
  }();
  return *tokenizer;
}

std::vector<Example> Sst2Demonstrations() {
  const char* sentences[][2] = {
      {"a stirring , funny and finally transporting re-imagining", "positive"},
      {"apparently reassembled from the cutting-room floor", "negative"},
      {"they presume their audience wo n't sit still", "negative"},
      {"the performances are an absolute joy", "positive"},
      {"one long string of cliches .", "negative"},
      {"a gorgeous , witty , seductive movie .", "positive"},
      {"it 's a bad sign when you 're rooting for the film to end", "negative"},
      {"an utterly charming and hilarious film", "positive"}};
  std::vector<Example> demos;
  for (const auto& s : sentences) demos.push_back({s[0], {}, s[1]});
  return demos;
}

}  // namespace manyshot::testing

#include "tests/engine/t5/t5_test_support.h"

#include <fstream>
#include <map>
#include <memory>
#include <mutex>

#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

std::mutex& Mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

const nlohmann::json& T5Golden(const std::string& name) {
  static std::map<std::string, nlohmann::json> goldens;
  std::lock_guard<std::mutex> lock(Mutex());
  auto& slot = goldens[name];
  if (slot.is_null()) {
    std::ifstream in(std::filesystem::path(MANYSHOT_SOURCE_DIR) / "tests/golden" /
                     ("t5_" + name + ".json"));
    EXPECT_TRUE(in.good()) << "missing golden t5_" << name;
    slot = nlohmann::json::parse(in);
  }
  return slot;
}

TinyT5Spec T5SpecFromGolden(const nlohmann::json& m) {
  TinyT5Spec spec;
  T5Config& c = spec.config;
  c.vocab_size = m["vocab_size"];
  c.d_model = m["d_model"];
  c.d_kv = m["d_kv"];
  c.d_ff = m["d_ff"];
  c.num_layers = m["layers"];
  c.num_decoder_layers = m["decoder_layers"];
  c.num_heads = m["heads"];
  c.relative_attention_num_buckets = m["buckets"];
  c.relative_attention_max_distance = m["max_distance"];
  c.feed_forward =
      m["feed_forward_proj"] == "relu" ? T5FeedForward::kRelu : T5FeedForward::kGatedGelu;
  c.tie_word_embeddings = m["tie"];
  const std::string dtype = m["dtype"];
  spec.dtype = dtype == "f32" ? DType::kF32 : dtype == "f16" ? DType::kF16 : DType::kBF16;
  spec.shards = m["shards"];
  spec.seed = m["seed"];
  return spec;
}

std::filesystem::path T5GoldenModelDir(const std::string& name) {
  const nlohmann::json& golden = T5Golden(name);
  std::lock_guard<std::mutex> lock(Mutex());
  const std::filesystem::path dir = ProcessScratchDir() / name;
  if (!std::filesystem::exists(dir / "config.json")) {
    absl::Status status = WriteTinyT5Model(T5SpecFromGolden(golden["model"]), dir);
    EXPECT_TRUE(status.ok()) << status;
  }
  return dir;
}

const T5Model& T5GoldenModel(const std::string& name) {
  static std::map<std::string, std::unique_ptr<T5Model>> models;
  const std::filesystem::path dir = T5GoldenModelDir(name);
  std::lock_guard<std::mutex> lock(Mutex());
  auto& slot = models[name];
  if (!slot) {
    auto loaded = T5Model::Load(dir, TestBackend());
    slot = ValueOrAbort(std::move(loaded));
  }
  return *slot;
}

}  // namespace manyshot::testing

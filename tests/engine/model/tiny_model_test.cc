#include "engine/model/synthetic/tiny_model.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "engine/model/arch_traits.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "engine/model/synthetic/safetensors_writer.h"
#include "engine/model/tensor_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;

const std::filesystem::path kGoldenDir =
    std::filesystem::path(MANYSHOT_SOURCE_DIR) / "tests/golden";

// The specs of the golden models, read from the golden files themselves (the "model" object).
TinyModelSpec SpecFromGolden(const std::string& name) {
  auto j = nlohmann::json::parse(ReadFile(kGoldenDir / ("forward_" + name + ".json")))["model"];
  TinyModelSpec s;
  s.family = j["family"];
  s.vocab_size = j["vocab_size"];
  s.hidden_size = j["hidden_size"];
  s.intermediate_size = j["intermediate_size"];
  s.num_layers = j["num_layers"];
  s.num_heads = j["num_heads"];
  s.num_kv_heads = j["num_kv_heads"];
  s.max_position_embeddings = j["max_position_embeddings"];
  s.tie_word_embeddings = j["tie_word_embeddings"];
  s.attention_bias = j["attention_bias"];
  const std::string dtype = j["dtype"];
  s.dtype = dtype == "f32" ? DType::kF32 : dtype == "f16" ? DType::kF16 : DType::kBF16;
  s.shards = j["shards"];
  s.seed = j["seed"];
  s.rope_theta = j["rope_theta"];
  s.pre_norm = j.value("pre_norm", true);  // recorded for OPT only
  return s;
}

const char* const kGoldenModels[] = {
    "gpt2",         "llama", "llama_gqa_tied", "mistral", "qwen2",  "bloom",
    "bloom_heads6", "opt",   "opt_post_ln",    "phi3",    "pythia", "gpt_neox_sequential"};

class TinyModelGoldenSpecTest : public ::testing::TestWithParam<const char*> {};

TEST_P(TinyModelGoldenSpecTest, WritesAModelTheReadersAccept) {
  const TinyModelSpec spec = SpecFromGolden(GetParam());
  TempDir dir;
  const std::filesystem::path tok = spec.family == "gpt2" ? MANYSHOT_GPT2_TOKENIZER_DIR : "";
  ASSERT_TRUE(WriteTinyModel(spec, tok, dir.path()).ok());

  auto config = ParseModelConfig(dir.path() / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->model_type, spec.family);
  EXPECT_EQ(config->vocab_size, spec.vocab_size);
  EXPECT_EQ(config->hidden_size, spec.hidden_size);
  EXPECT_EQ(config->intermediate_size, spec.intermediate_size);
  EXPECT_EQ(config->num_layers, spec.num_layers);
  EXPECT_EQ(config->num_heads, spec.num_heads);
  EXPECT_EQ(config->num_kv_heads, spec.num_kv_heads);
  EXPECT_EQ(config->tie_word_embeddings, spec.tie_word_embeddings);
  EXPECT_EQ(config->attention_bias, spec.attention_bias);
  const bool rotary = TraitsOf(config->architecture).position == PositionKind::kRotary;
  EXPECT_EQ(config->rope_theta, rotary ? spec.rope_theta : 0.0f);
  const int64_t bos = spec.family == "gpt2"       ? 50256
                      : spec.family == "opt"      ? 2
                      : spec.family == "gpt_neox" ? 0
                                                  : 1;
  EXPECT_EQ(config->bos_token_id, bos);
  EXPECT_EQ(config->pre_norm, spec.pre_norm);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "generation_config.json"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "manyshot_tiny_model.json"));
  EXPECT_EQ(std::filesystem::exists(dir.path() / "model.safetensors.index.json"), spec.shards > 1);
  if (spec.family == "gpt2") {
    EXPECT_EQ(ReadFile(dir.path() / "vocab.json"),
              ReadFile(std::filesystem::path(MANYSHOT_GPT2_TOKENIZER_DIR) / "vocab.json"));
  }

  auto archive = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(archive.ok()) << archive.status();
  const auto expected = ExpectedTensors(*config);
  EXPECT_EQ(archive->size(), expected.size());  // nothing extra
  for (const ExpectedTensor& t : expected) {
    const TensorInfo* info = FindModelTensor(*archive, config->architecture, t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->shape, t.shape) << t.name;
    EXPECT_EQ(info->dtype, spec.dtype) << t.name;
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    std::vector<float> values(n);
    ASSERT_TRUE(
        ReadModelTensorF32(*archive, config->architecture, t.name, t.shape, values.data()).ok());
    for (float v : values) ASSERT_TRUE(std::isfinite(v)) << t.name;
  }
  if (config->architecture == Architecture::kLlama) {
    const Architecture arch = Architecture::kLlama;
    EXPECT_EQ(archive->Find(TensorName(arch, TensorRole::kOutput, TensorPart::kWeight)) != nullptr,
              !spec.tie_word_embeddings);
    EXPECT_EQ(archive->Find(TensorName(arch, TensorRole::kAttnQ, TensorPart::kBias)) != nullptr,
              spec.attention_bias);
    EXPECT_EQ(archive->Find(TensorName(arch, TensorRole::kAttnOut, TensorPart::kBias)) != nullptr,
              spec.attention_bias && spec.family == "llama");
  }
}

INSTANTIATE_TEST_SUITE_P(Goldens, TinyModelGoldenSpecTest, ::testing::ValuesIn(kGoldenModels));

// The goldens were computed from these exact bytes. If the writer changes (PRNG, scales, layout),
// this fails: regenerate tests/golden with the command recorded in each golden file, then update
// these fingerprints. (They changed once without the bytes changing: the fingerprint became XXH3.)
TEST(TinyModelTest, GoldenModelFingerprintsArePinned) {
  const std::map<std::string, std::string> pinned = {
      {"gpt2", "2954371a4846c597"},           {"llama", "fcfda5f3892b18c8"},
      {"llama_gqa_tied", "01795138c9990707"}, {"mistral", "91b81b44a8771c01"},
      {"qwen2", "cbc4aa834906230e"},          {"bloom", "f04446e7631a7813"},
      {"bloom_heads6", "7419abcbe9c2b874"},   {"opt", "ac9ce1eb55ae44de"},
      {"opt_post_ln", "ec6b0b58f6254e06"},    {"phi3", "6ca96d200a8ebcb8"},
      {"pythia", "b1eeb87342fb8679"},         {"gpt_neox_sequential", "92bc5e548f543f0a"},
  };
  for (const auto& [name, fingerprint] : pinned) {
    TempDir dir;
    ASSERT_TRUE(WriteTinyModel(SpecFromGolden(name), "", dir.path()).ok());
    auto archive = SafetensorsArchive::Open(dir.path());
    ASSERT_TRUE(archive.ok());
    EXPECT_EQ(archive->fingerprint(), fingerprint) << name;
  }
}

TinyModelSpec SmallSpec(const std::string& family) {
  TinyModelSpec s;
  s.family = family;
  s.vocab_size = 100;
  s.hidden_size = 16;
  s.intermediate_size = 24;
  s.num_layers = 2;
  s.num_heads = 4;
  s.num_kv_heads = family == "gpt2" ? 4 : 2;
  s.max_position_embeddings = 64;
  s.tie_word_embeddings = family == "gpt2" || family == "qwen2";
  s.attention_bias = family == "gpt2" || family == "qwen2";
  return s;
}

std::map<std::string, std::string> DirBytes(const std::filesystem::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    out[e.path().filename().string()] = ReadFile(e.path());
  }
  return out;
}

TEST(TinyModelTest, DeterministicAndSeedSensitive) {
  for (const char* family : {"gpt2", "llama", "mistral", "qwen2"}) {
    TinyModelSpec spec = SmallSpec(family);
    spec.seed = 42;
    spec.shards = 2;
    TempDir a, b, c;
    ASSERT_TRUE(WriteTinyModel(spec, "", a.path()).ok());
    ASSERT_TRUE(WriteTinyModel(spec, "", b.path()).ok());
    spec.seed = 43;
    ASSERT_TRUE(WriteTinyModel(spec, "", c.path()).ok());
    const auto bytes_a = DirBytes(a.path());
    EXPECT_EQ(bytes_a, DirBytes(b.path())) << family;
    const auto bytes_c = DirBytes(c.path());
    EXPECT_EQ(bytes_a.at("config.json"), bytes_c.at("config.json"));
    EXPECT_NE(bytes_a.at("model-00001-of-00002.safetensors"),
              bytes_c.at("model-00001-of-00002.safetensors"));
    EXPECT_NE(SafetensorsArchive::Open(a.path())->fingerprint(),
              SafetensorsArchive::Open(c.path())->fingerprint());
  }
}

// Generated on every core, in any order, the values are those of one tensor at a time.
TEST(TinyModelTest, SeededNormalTensorsEqualTheValuesOneByOne) {
  std::vector<SeededTensor> tensors;
  for (int i = 0; i < 23; ++i) {
    tensors.push_back(
        {"t" + std::to_string(i), {1 + (i * 37) % 11, 1 + (i * 53) % 17}, i * 0.1, 1.0 + i});
  }
  tensors.push_back({"big", {300, 200}, 0.0, 0.5});
  const auto out = SeededNormalTensors(9, DType::kBF16, tensors);
  ASSERT_EQ(out.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(out[i].name, tensors[i].name);
    EXPECT_EQ(out[i].dtype, DType::kBF16);
    EXPECT_EQ(out[i].shape, tensors[i].shape);
    EXPECT_EQ(out[i].data, SeededNormalValues(9, tensors[i].name, tensors[i].shape, tensors[i].mean,
                                              tensors[i].sd))
        << tensors[i].name;
  }
}

TEST(TinyModelTest, RewritingWithFewerShardsRemovesStaleFiles) {
  TinyModelSpec spec = SmallSpec("llama");
  spec.shards = 3;
  TempDir dir;
  ASSERT_TRUE(WriteTinyModel(spec, "", dir.path()).ok());
  spec.shards = 1;
  ASSERT_TRUE(WriteTinyModel(spec, "", dir.path()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "model-00001-of-00003.safetensors"));
  EXPECT_TRUE(SafetensorsArchive::Open(dir.path()).ok());
}

TEST(TinyModelTest, WeightStatistics) {
  TinyModelSpec spec = SmallSpec("llama");
  spec.hidden_size = 64;
  spec.intermediate_size = 160;
  auto tensors = TinyModelTensors(spec);
  ASSERT_TRUE(tensors.ok());
  for (const TensorToWrite& t : *tensors) {
    double sum = 0, sq = 0;
    for (float v : t.data) {
      sum += v;
      sq += static_cast<double>(v) * v;
    }
    const double mean = sum / static_cast<double>(t.data.size());
    const double sd = std::sqrt(sq / static_cast<double>(t.data.size()) - mean * mean);
    if (t.name.find("norm") != std::string::npos) {
      EXPECT_NEAR(mean, 1.0, 0.05) << t.name;
      EXPECT_NEAR(sd, 0.1, 0.04) << t.name;
    } else if (t.name.find("down_proj") != std::string::npos) {
      EXPECT_NEAR(sd, 1.0 / std::sqrt(160.0), 0.01) << t.name;
    }
  }
}

TEST(TinyModelTest, NormalRngIsStandardNormal) {
  NormalRng rng(9);
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = rng.NextNormal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
  NormalRng a(5), b(5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.NextNormal(), b.NextNormal());
}

TEST(TinyModelTest, InvalidSpecs) {
  struct Case {
    const char* what;
    void (*mutate)(TinyModelSpec&);
  };
  const Case cases[] = {
      {"family", [](TinyModelSpec& s) { s.family = "falcon"; }},
      {"vocab_size", [](TinyModelSpec& s) { s.vocab_size = 0; }},
      {"hidden_size", [](TinyModelSpec& s) { s.hidden_size = -1; }},
      {"num_heads", [](TinyModelSpec& s) { s.num_heads = 3; }},
      {"num_kv_heads", [](TinyModelSpec& s) { s.num_kv_heads = 3; }},
      {"shards", [](TinyModelSpec& s) { s.shards = 0; }},
      {"head_dim", [](TinyModelSpec& s) { s.hidden_size = 12; }},  // head_dim 3
      {"mistral",
       [](TinyModelSpec& s) {
         s.family = "mistral";
         s.attention_bias = true;
       }},
      {"qwen2",
       [](TinyModelSpec& s) {
         s.family = "qwen2";
         s.attention_bias = false;
       }},
      {"gpt2",
       [](TinyModelSpec& s) {
         s.family = "gpt2";
         s.tie_word_embeddings = false;
       }},
  };
  for (const Case& c : cases) {
    TinyModelSpec spec = SmallSpec("llama");
    c.mutate(spec);
    TempDir dir;
    absl::Status s = WriteTinyModel(spec, "", dir.path());
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_THAT(s.message(), HasSubstr(c.what));
  }
}

TEST(TinyModelTest, MissingTokenizerDirIsNotFound) {
  TempDir dir;
  absl::Status s = WriteTinyModel(SmallSpec("llama"), dir.path() / "nope", dir.path() / "out");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
}

TEST(TensorNamesTest, Gpt2AcceptsTransformerPrefix) {
  TempDir dir;
  std::vector<TensorToWrite> tensors = {
      {"transformer.h.0.attn.c_attn.weight", DType::kF32, {2, 6}, std::vector<float>(12, 1.0f)},
      {"transformer.wte.weight", DType::kF32, {3, 2}, std::vector<float>(6, 2.0f)},
  };
  ASSERT_TRUE(WriteModelSafetensors(dir.path(), tensors, 1).ok());
  auto archive = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(archive.ok());
  const std::string c_attn =
      TensorName(Architecture::kGpt2, TensorRole::kAttnQkv, TensorPart::kWeight, 0);
  const std::string wte =
      TensorName(Architecture::kGpt2, TensorRole::kTokenEmbd, TensorPart::kWeight);
  const std::string wpe =
      TensorName(Architecture::kGpt2, TensorRole::kPosEmbd, TensorPart::kWeight);
  const TensorInfo* t = FindModelTensor(*archive, Architecture::kGpt2, c_attn);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->name, "transformer.h.0.attn.c_attn.weight");
  std::vector<float> values(6);
  const int64_t shape[] = {3, 2};
  EXPECT_TRUE(ReadModelTensorF32(*archive, Architecture::kGpt2, wte, shape, values.data()).ok());
  EXPECT_EQ(values[5], 2.0f);
  EXPECT_EQ(FindModelTensor(*archive, Architecture::kLlama, "h.0.attn.c_attn.weight"), nullptr);
  absl::Status s = ReadModelTensorF32(*archive, Architecture::kGpt2, wpe, shape, values.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("wpe.weight"));
}

TEST(TensorNamesTest, NamesByRole) {
  constexpr TensorPart W = TensorPart::kWeight;
  const Architecture llama = Architecture::kLlama;
  EXPECT_EQ(TensorName(llama, TensorRole::kAttnQ, W, 7), "model.layers.7.self_attn.q_proj.weight");
  EXPECT_EQ(TensorName(llama, TensorRole::kAttnNorm, W, 7),
            "model.layers.7.input_layernorm.weight");
  EXPECT_EQ(TensorName(llama, TensorRole::kFfnNorm, W, 7),
            "model.layers.7.post_attention_layernorm.weight");
  EXPECT_EQ(TensorName(llama, TensorRole::kFfnDown, W, 7), "model.layers.7.mlp.down_proj.weight");
  EXPECT_EQ(TensorName(llama, TensorRole::kOutputNorm, W), "model.norm.weight");
  EXPECT_EQ(TensorName(Architecture::kGpt2, TensorRole::kFfnDown, W, 3), "h.3.mlp.c_proj.weight");
}

}  // namespace
}  // namespace manyshot

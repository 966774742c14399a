// Gemma and Gemma 2 as data: their config.json keys, the options they refuse (naming the key),
// the round trip through ModelConfigToJson, their traits rows and their tensor tables.
#include <string>

#include "engine/model/arch_traits.h"
#include "engine/model/model_config.h"
#include "engine/model/tensor_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

// Gemma-2-2B's keys, shortened to the ones the parser reads.
nlohmann::json Gemma2Json() {
  return nlohmann::json::parse(R"({"model_type": "gemma2", "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2304, "intermediate_size": 9216, "max_position_embeddings": 8192,
    "num_attention_heads": 8, "num_hidden_layers": 26, "num_key_value_heads": 4,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "vocab_size": 256000})");
}

absl::StatusOr<ModelConfig> Parse(const nlohmann::json& j) {
  TempDir dir;
  WriteFile(dir.path() / "config.json", j.dump());
  return ParseModelConfig(dir.path() / "config.json");
}

TEST(GemmaConfigTest, ExactGeluIsRefusedNamingTheKey) {
  nlohmann::json j = Gemma2Json();
  j["hidden_activation"] = "gelu";
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("\"hidden_activation\""));
}

TEST(GemmaConfigTest, NullCapsTurnSoftCappingOff) {
  nlohmann::json j = Gemma2Json();
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcap, 0.0f);
  EXPECT_EQ(c->final_logit_softcap, 0.0f);
}

TEST(GemmaConfigTest, NegativeCapIsRefusedNamingTheKey) {
  nlohmann::json j = Gemma2Json();
  j["attn_logit_softcapping"] = -1.0;
  auto c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("\"attn_logit_softcapping\""));
}

TEST(GemmaConfigTest, Gemma2DefaultsAreGemma2ConfigDefaults) {
  nlohmann::json j = Gemma2Json();
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping",
                          "query_pre_attn_scalar", "sliding_window", "head_dim"}) {
    j.erase(key);
  }
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attn_logit_softcap, 50.0f);
  EXPECT_EQ(c->final_logit_softcap, 30.0f);
  EXPECT_EQ(c->query_pre_attn_scalar, 256.0f);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(GemmaConfigTest, RoundTripsThroughModelConfigToJson) {
  for (const char* type : {"gemma", "gemma2"}) {
    nlohmann::json j = Gemma2Json();
    j["model_type"] = type;
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status();
    auto back = Parse(nlohmann::json::parse(ModelConfigToJson(*c)));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(ModelConfigToJson(*back), ModelConfigToJson(*c)) << type;
    EXPECT_EQ(back->architecture, c->architecture) << type;
    EXPECT_EQ(back->sliding_window, c->sliding_window) << type;
    EXPECT_EQ(back->attn_logit_softcap, c->attn_logit_softcap) << type;
    EXPECT_EQ(back->query_pre_attn_scalar, c->query_pre_attn_scalar) << type;
  }
}

// Gemma ignores Gemma 2's keys: no cap, no query scalar, no window.
TEST(GemmaConfigTest, GemmaHasNoGemma2Options) {
  nlohmann::json j = Gemma2Json();
  j["model_type"] = "gemma";
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGemma);
  EXPECT_EQ(c->attn_logit_softcap, 0.0f);
  EXPECT_EQ(c->final_logit_softcap, 0.0f);
  EXPECT_EQ(c->query_pre_attn_scalar, 0.0f);
  EXPECT_EQ(c->sliding_window, 0);
}

TEST(GemmaConfigTest, TraitsAndTablesNameTheCheckpointsTensors) {
  const ArchTraits& gemma = TraitsOf(Architecture::kGemma);
  EXPECT_EQ(gemma.activation, Activation::kGeGlu);
  EXPECT_TRUE(gemma.embedding_scaled);
  EXPECT_TRUE(gemma.norm_adds_one);
  EXPECT_FALSE(gemma.sublayer_post_norms);
  EXPECT_TRUE(TraitsOf(Architecture::kGemma2).sublayer_post_norms);
  // Gemma 2's post_attention_layernorm norms the attention output; Gemma's is the MLP's input.
  EXPECT_EQ(TensorName(Architecture::kGemma, TensorRole::kFfnNorm, TensorPart::kWeight, 3),
            "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(TensorName(Architecture::kGemma2, TensorRole::kAttnPostNorm, TensorPart::kWeight, 3),
            "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(TensorName(Architecture::kGemma2, TensorRole::kFfnNorm, TensorPart::kWeight, 0),
            "model.layers.0.pre_feedforward_layernorm.weight");
  EXPECT_EQ(TensorName(Architecture::kGemma2, TensorRole::kFfnPostNorm, TensorPart::kWeight, 0),
            "model.layers.0.post_feedforward_layernorm.weight");
  auto c = Parse(Gemma2Json());
  ASSERT_TRUE(c.ok()) << c.status();
  // q_proj is [heads * head_dim, hidden]: 2048 x 2304, not square.
  EXPECT_EQ(TensorShape(*c, TensorRole::kAttnQ, TensorPart::kWeight),
            (std::vector<int64_t>{2048, 2304}));
  EXPECT_FALSE(HasTensor(*c, TensorRole::kOutput, TensorPart::kWeight));  // tied
  EXPECT_FALSE(HasTensor(*c, TensorRole::kAttnNorm, TensorPart::kBias));
}

}  // namespace
}  // namespace manyshot

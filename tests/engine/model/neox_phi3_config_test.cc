// GPT-NeoX and Phi-3 as data: their config.json keys (as EleutherAI/pythia-160m and
// microsoft/Phi-3-mini-4k-instruct ship them), the keys newer transformers write, unsupported
// options named, the round trip through ModelConfigToJson, and their tensor tables.
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

constexpr char kPythia160m[] = R"({
  "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0,
  "hidden_act": "gelu", "hidden_size": 768, "initializer_range": 0.02,
  "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
  "model_type": "gpt_neox", "num_attention_heads": 12, "num_hidden_layers": 12,
  "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false,
  "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": true,
  "use_parallel_residual": true, "vocab_size": 50304})";

constexpr char kPhi3Mini4k[] = R"({
  "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192,
  "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047,
  "tie_word_embeddings": false, "vocab_size": 32064})";

class NeoxPhi3ConfigTest : public ::testing::Test {
 protected:
  absl::StatusOr<ModelConfig> Parse(const nlohmann::json& j) {
    WriteFile(dir_.path() / "config.json", j.dump());
    return ParseModelConfig(dir_.path() / "config.json");
  }
  absl::StatusOr<ModelConfig> ParseWith(const char* base, const std::string& key,
                                        nlohmann::json value) {
    nlohmann::json j = nlohmann::json::parse(base);
    j[key] = std::move(value);
    return Parse(j);
  }
  TempDir dir_;
};

TEST_F(NeoxPhi3ConfigTest, GptNeox) {
  auto c = Parse(nlohmann::json::parse(kPythia160m));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGptNeox);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 12);
  EXPECT_EQ(c->rotary_dims, 16);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_TRUE(c->parallel_residual);
  EXPECT_TRUE(c->attention_bias && c->attention_out_bias && c->mlp_bias);
  EXPECT_EQ(c->hidden_act, "gelu");
}

// transformers 4.5x writes partial_rotary_factor and rope_theta; attention_bias: false drops the
// attention's biases only; a whole-head rotary is plain RoPE.
TEST_F(NeoxPhi3ConfigTest, GptNeoxNewerKeys) {
  nlohmann::json j = nlohmann::json::parse(kPythia160m);
  j.erase("rotary_pct");
  j.erase("rotary_emb_base");
  j["partial_rotary_factor"] = 0.5;
  j["rope_theta"] = 500.0;
  j["attention_bias"] = false;
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rotary_dims, 32);
  EXPECT_FLOAT_EQ(c->rope_theta, 500.0f);
  EXPECT_FALSE(c->attention_bias || c->attention_out_bias);
  EXPECT_TRUE(c->mlp_bias);
  j["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(Parse(j)->rotary_dims, 0);
}

TEST_F(NeoxPhi3ConfigTest, GptNeoxRejectsWhatItCannotRun) {
  auto odd = ParseWith(kPythia160m, "rotary_pct", 0.2);  // int(64 * 0.2) = 12 is fine; 0.1 is 6
  EXPECT_TRUE(odd.ok()) << odd.status();
  auto tiny = ParseWith(kPythia160m, "rotary_pct", 0.01);  // 0 dimensions
  EXPECT_THAT(tiny.status().message(), HasSubstr("\"rotary_pct\" gives 0 rotary dimensions"));
  auto uneven = ParseWith(kPythia160m, "rotary_pct", 0.05);  // 3 dimensions
  EXPECT_THAT(uneven.status().message(), HasSubstr("gives 3 rotary dimensions"));
  EXPECT_THAT(ParseWith(kPythia160m, "rotary_pct", 1.5).status().message(),
              HasSubstr("must be in (0, 1]"));
  EXPECT_THAT(ParseWith(kPythia160m, "hidden_act", "gelu_fast").status().message(),
              HasSubstr("\"hidden_act\" must be \"gelu\""));
  EXPECT_THAT(ParseWith(kPythia160m, "num_attention_heads", 7).status().message(),
              HasSubstr("must divide hidden_size"));
  EXPECT_THAT(
      ParseWith(kPythia160m, "rope_scaling", {{"rope_type", "longrope"}}).status().message(),
      HasSubstr("\"longrope\""));
}

TEST_F(NeoxPhi3ConfigTest, Phi3) {
  auto c = Parse(nlohmann::json::parse(kPhi3Mini4k));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kPhi3);
  EXPECT_EQ(c->model_type, "phi3");
  EXPECT_EQ(c->head_dim, 96);
  EXPECT_EQ(c->sliding_window, 2047);
  EXPECT_FALSE(c->attention_bias || c->mlp_bias);
  EXPECT_THAT(ParseWith(kPhi3Mini4k, "partial_rotary_factor", 0.75).status().message(),
              HasSubstr("\"partial_rotary_factor\" must be 1 for phi3"));
  nlohmann::json no_window = nlohmann::json::parse(kPhi3Mini4k);
  no_window.erase("sliding_window");  // Phi3Config has no default window
  EXPECT_EQ(Parse(no_window)->sliding_window, 0);
}

TEST_F(NeoxPhi3ConfigTest, RoundTripThroughConfigJson) {
  for (const char* text : {kPythia160m, kPhi3Mini4k}) {
    nlohmann::json j = nlohmann::json::parse(text);
    auto a = Parse(j);
    ASSERT_TRUE(a.ok()) << a.status();
    auto b = Parse(nlohmann::json::parse(ModelConfigToJson(*a)));
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(ModelConfigToJson(*a), ModelConfigToJson(*b));
    EXPECT_EQ(a->architecture, b->architecture);
    EXPECT_EQ(a->rotary_dims, b->rotary_dims);
    EXPECT_EQ(a->parallel_residual, b->parallel_residual);
    EXPECT_EQ(a->sliding_window, b->sliding_window);
    EXPECT_EQ(a->tie_word_embeddings, b->tie_word_embeddings);
  }
}

TEST_F(NeoxPhi3ConfigTest, TensorTables) {
  auto neox = Parse(nlohmann::json::parse(kPythia160m));
  ASSERT_TRUE(neox.ok());
  EXPECT_EQ(TensorName(Architecture::kGptNeox, TensorRole::kAttnQkv, TensorPart::kWeight, 3),
            "gpt_neox.layers.3.attention.query_key_value.weight");
  EXPECT_EQ(TensorShape(*neox, TensorRole::kAttnQkv, TensorPart::kWeight),
            (std::vector<int64_t>{3 * 768, 768}));
  EXPECT_TRUE(HasTensor(*neox, TensorRole::kOutput, TensorPart::kWeight));  // embed_out
  EXPECT_TRUE(HasTensor(*neox, TensorRole::kFfnUp, TensorPart::kBias));
  EXPECT_EQ(TraitsOf(Architecture::kGptNeox).qkv, QkvLayout::kFusedPerHead);

  auto phi3 = Parse(nlohmann::json::parse(kPhi3Mini4k));
  ASSERT_TRUE(phi3.ok());
  EXPECT_EQ(TensorName(Architecture::kPhi3, TensorRole::kFfnGateUp, TensorPart::kWeight, 0),
            "model.layers.0.mlp.gate_up_proj.weight");
  EXPECT_EQ(TensorShape(*phi3, TensorRole::kFfnGateUp, TensorPart::kWeight),
            (std::vector<int64_t>{2 * 8192, 3072}));
  EXPECT_EQ(TensorShape(*phi3, TensorRole::kAttnQkv, TensorPart::kWeight),
            (std::vector<int64_t>{3 * 3072, 3072}));
  EXPECT_FALSE(HasTensor(*phi3, TensorRole::kAttnQkv, TensorPart::kBias));
  EXPECT_EQ(TraitsOf(Architecture::kPhi3).qkv, QkvLayout::kFused);
}

}  // namespace
}  // namespace manyshot

#include "engine/model/model_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

constexpr char kLlama[] = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 32000,
  "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": null, "hidden_act": "silu",
  "tie_word_embeddings": false, "attention_bias": false, "bos_token_id": 1,
  "eos_token_id": [2, 32007], "torch_dtype": "bfloat16"})";

constexpr char kGpt2[] = R"({
  "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "bos_token_id": 50256,
  "eos_token_id": 50256, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024,
  "n_embd": 768, "n_head": 12, "n_inner": null, "n_layer": 12, "n_positions": 1024,
  "vocab_size": 50257})";

constexpr char kQwen2[] = R"({
  "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
  "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
  "max_position_embeddings": 32768, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "use_sliding_window": false, "tie_word_embeddings": true,
  "hidden_act": "silu", "bos_token_id": 151643, "eos_token_id": 151643})";

class ModelConfigTest : public ::testing::Test {
 protected:
  absl::StatusOr<ModelConfig> Parse(const std::string& text) {
    WriteFile(dir_.path() / "config.json", text);
    return ParseModelConfig(dir_.path() / "config.json");
  }
  // kLlama with one key replaced (or removed when value is null and remove is set).
  absl::StatusOr<ModelConfig> ParseLlamaWith(const std::string& key, nlohmann::json value,
                                             bool remove = false) {
    nlohmann::json j = nlohmann::json::parse(kLlama);
    if (remove) {
      j.erase(key);
    } else {
      j[key] = value;
    }
    return Parse(j.dump());
  }
  TempDir dir_;
};

TEST_F(ModelConfigTest, Llama) {
  auto c = Parse(kLlama);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 32000);
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 11008);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-5f);
  EXPECT_FLOAT_EQ(c->rope_theta, 500000.0f);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_FALSE(c->attention_out_bias);
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);  // first of the list
  EXPECT_EQ(c->hidden_act, "silu");
  EXPECT_EQ(c->torch_dtype, "bfloat16");
}

TEST_F(ModelConfigTest, LlamaDefaults) {
  nlohmann::json j = nlohmann::json::parse(kLlama);
  for (const char* k : {"num_key_value_heads", "rope_theta", "tie_word_embeddings",
                        "attention_bias", "bos_token_id", "eos_token_id", "hidden_act"}) {
    j.erase(k);
  }
  auto c = Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 32);
  EXPECT_FLOAT_EQ(c->rope_theta, 10000.0f);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_EQ(c->eos_token_id, -1);
}

TEST_F(ModelConfigTest, LlamaAttentionBiasSetsOutputBiasToo) {
  auto c = ParseLlamaWith("attention_bias", true);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->attention_out_bias);
}

TEST_F(ModelConfigTest, ExplicitHeadDim) {
  auto c = ParseLlamaWith("head_dim", 64);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 64);
}

TEST_F(ModelConfigTest, MistralIsLlamaArchitecture) {
  nlohmann::json j = nlohmann::json::parse(kLlama);
  j["model_type"] = "mistral";
  j["sliding_window"] = 4096;
  auto c = Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_EQ(c->model_type, "mistral");
}

// Mistral-7B-v0.1: a 4096 window over 32768 positions; served within the window.
TEST_F(ModelConfigTest, MistralWindowShorterThanPositionsLimitsTheContext) {
  nlohmann::json j = nlohmann::json::parse(kLlama);
  j["model_type"] = "mistral";
  j["max_position_embeddings"] = 32768;
  j["sliding_window"] = 4096;
  auto c = Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->max_position_embeddings, 32768);  // RoPE scaling still sees the real value
  EXPECT_EQ(ContextLength(*c), 4096);
  // Written back, the window survives.
  WriteFile(dir_.path() / "config.json", ModelConfigToJson(*c));
  auto again = ParseModelConfig(dir_.path() / "config.json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->sliding_window, 4096);
}

TEST_F(ModelConfigTest, MistralWindowDefaultsAsTransformersDoes) {
  nlohmann::json j = nlohmann::json::parse(kLlama);
  j["model_type"] = "mistral";
  j["max_position_embeddings"] = 8192;
  j.erase("sliding_window");  // MistralConfig's default window is 4096
  EXPECT_EQ(Parse(j.dump())->sliding_window, 4096);
  j["sliding_window"] = nullptr;  // Mistral v0.2 and later: no window
  auto none = Parse(j.dump());
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->sliding_window, 0);
  EXPECT_EQ(ContextLength(*none), 8192);
  // Written back, null stays null (not MistralConfig's default 4096).
  WriteFile(dir_.path() / "config.json", ModelConfigToJson(*none));
  EXPECT_EQ(ParseModelConfig(dir_.path() / "config.json")->sliding_window, 0);
  j["sliding_window"] = 0;
  EXPECT_THAT(Parse(j.dump()).status().message(), HasSubstr("must be positive"));
}

TEST_F(ModelConfigTest, Qwen2WindowOnlyWhenUsedOnSomeLayer) {
  nlohmann::json j = nlohmann::json::parse(kQwen2);
  j["sliding_window"] = 4096;
  EXPECT_EQ(Parse(j.dump())->sliding_window, 0);  // use_sliding_window false
  j["use_sliding_window"] = true;
  j["max_window_layers"] = 24;  // the window starts past the last of the 24 layers
  EXPECT_EQ(Parse(j.dump())->sliding_window, 0);
  j["max_window_layers"] = 21;
  auto windowed = Parse(j.dump());
  ASSERT_TRUE(windowed.ok()) << windowed.status();
  EXPECT_EQ(windowed->sliding_window, 4096);
  EXPECT_EQ(ContextLength(*windowed), 4096);
  WriteFile(dir_.path() / "config.json", ModelConfigToJson(*windowed));
  EXPECT_EQ(ParseModelConfig(dir_.path() / "config.json")->sliding_window, 4096);
  j["sliding_window"] = 32768;  // covers every position: no limit
  EXPECT_EQ(Parse(j.dump())->sliding_window, 0);
}

TEST_F(ModelConfigTest, LlamaIgnoresWindowKeys) {
  EXPECT_EQ(ParseLlamaWith("sliding_window", 16)->sliding_window, 0);
}

TEST_F(ModelConfigTest, Qwen2HasQkvBiasButNoOutputBias) {
  auto c = Parse(kQwen2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kLlama);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->attention_out_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-6f);
}

TEST_F(ModelConfigTest, Gpt2) {
  auto c = Parse(kGpt2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGpt2);
  EXPECT_EQ(c->hidden_size, 768);
  EXPECT_EQ(c->intermediate_size, 4 * 768);  // n_inner null
  EXPECT_EQ(c->num_layers, 12);
  EXPECT_EQ(c->num_heads, 12);
  EXPECT_EQ(c->num_kv_heads, 12);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->max_position_embeddings, 1024);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->hidden_act, "gelu_new");
  EXPECT_EQ(c->bos_token_id, 50256);
  EXPECT_EQ(c->eos_token_id, 50256);
}

TEST_F(ModelConfigTest, Gpt2ExplicitInner) {
  nlohmann::json j = nlohmann::json::parse(kGpt2);
  j["n_inner"] = 1000;
  auto c = Parse(j.dump());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->intermediate_size, 1000);
}

TEST_F(ModelConfigTest, MissingFile) {
  auto c = ParseModelConfig(dir_.path() / "nope.json");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelConfigTest, BadJson) {
  for (const char* text : {"", "{", "{\"model_type\": }", "[1, 2]", "null", "\"llama\""}) {
    auto c = Parse(text);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(c.status().message(), HasSubstr("config.json")) << text;
  }
}

TEST_F(ModelConfigTest, UnknownModelType) {
  auto c = ParseLlamaWith("model_type", "falcon");
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(c.status().message(), HasSubstr("falcon"));
  c = ParseLlamaWith("model_type", nlohmann::json(), /*remove=*/true);
  EXPECT_THAT(c.status().message(), HasSubstr("model_type"));
  c = ParseLlamaWith("model_type", 5);
  EXPECT_THAT(c.status().message(), HasSubstr("model_type"));
}

TEST_F(ModelConfigTest, MissingKeysAreNamed) {
  for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                          "num_attention_heads", "max_position_embeddings", "rms_norm_eps"}) {
    auto c = ParseLlamaWith(key, nullptr, /*remove=*/true);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(c.status().message(), HasSubstr(key));
    EXPECT_THAT(c.status().message(), HasSubstr("config.json"));
  }
  for (const char* key : {"vocab_size", "n_embd", "n_layer", "n_head", "n_positions"}) {
    nlohmann::json j = nlohmann::json::parse(kGpt2);
    j.erase(key);
    auto c = Parse(j.dump());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(c.status().message(), HasSubstr(key));
  }
}

// The supported types and every refusal: rope_scaling_test.cc.
TEST_F(ModelConfigTest, AnUnknownRopeTypeIsUnimplemented) {
  auto c = ParseLlamaWith("rope_scaling", {{"type", "longrope"}, {"factor", 2.0}});
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(c.status().message(), HasSubstr("rope_scaling"));
  EXPECT_THAT(c.status().message(), HasSubstr("\"longrope\""));
}

TEST_F(ModelConfigTest, InvalidValues) {
  struct Case {
    const char* key;
    nlohmann::json value;
  };
  const Case cases[] = {
      {"vocab_size", 0},           {"vocab_size", -5},
      {"vocab_size", "32000"},     {"hidden_size", 1.5},
      {"num_attention_heads", 30},  // does not divide 4096
      {"num_key_value_heads", 5},  {"num_key_value_heads", 64},
      {"rms_norm_eps", -1},        {"rms_norm_eps", "x"},
      {"rope_theta", 0},           {"hidden_act", "gelu"},
      {"tie_word_embeddings", 1},  {"head_dim", 63},
      {"bos_token_id", "a"},       {"eos_token_id", -3},
      {"vocab_size", 1e30},
  };
  for (const Case& c : cases) {
    auto r = ParseLlamaWith(c.key, c.value);
    EXPECT_FALSE(r.ok()) << c.key << "=" << c.value.dump();
    EXPECT_THAT(r.status().message(), HasSubstr(c.key)) << c.value.dump();
  }
  nlohmann::json j = nlohmann::json::parse(kGpt2);
  j["activation_function"] = "relu";
  EXPECT_THAT(Parse(j.dump()).status().message(), HasSubstr("activation_function"));
  j = nlohmann::json::parse(kGpt2);
  j["n_head"] = 7;
  EXPECT_THAT(Parse(j.dump()).status().message(), HasSubstr("n_head"));
}

TEST_F(ModelConfigTest, JsonRoundTrip) {
  for (const char* text : {kLlama, kGpt2, kQwen2}) {
    auto c = Parse(text);
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string written = ModelConfigToJson(*c);
    auto again = Parse(written);
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << written;
    EXPECT_EQ(again->architecture, c->architecture);
    EXPECT_EQ(again->model_type, c->model_type);
    EXPECT_EQ(again->vocab_size, c->vocab_size);
    EXPECT_EQ(again->hidden_size, c->hidden_size);
    EXPECT_EQ(again->intermediate_size, c->intermediate_size);
    EXPECT_EQ(again->num_layers, c->num_layers);
    EXPECT_EQ(again->num_heads, c->num_heads);
    EXPECT_EQ(again->num_kv_heads, c->num_kv_heads);
    EXPECT_EQ(again->head_dim, c->head_dim);
    EXPECT_EQ(again->max_position_embeddings, c->max_position_embeddings);
    EXPECT_EQ(again->norm_eps, c->norm_eps);
    EXPECT_EQ(again->rope_theta, c->rope_theta);
    EXPECT_EQ(again->tie_word_embeddings, c->tie_word_embeddings);
    EXPECT_EQ(again->attention_bias, c->attention_bias);
    EXPECT_EQ(again->attention_out_bias, c->attention_out_bias);
    EXPECT_EQ(again->bos_token_id, c->bos_token_id);
    EXPECT_EQ(again->eos_token_id, c->eos_token_id);
    nlohmann::json j = nlohmann::json::parse(written);
    EXPECT_TRUE(j["architectures"].is_array());
    EXPECT_TRUE(j.contains("torch_dtype"));
  }
  auto c = Parse(kLlama);
  EXPECT_THAT(ModelConfigToJson(*c), HasSubstr("\"rms_norm_eps\": 1e-05"));
  EXPECT_THAT(ModelConfigToJson(*c), HasSubstr("LlamaForCausalLM"));
  EXPECT_THAT(ModelConfigToJson(*Parse(kQwen2)), HasSubstr("Qwen2ForCausalLM"));
  EXPECT_THAT(ModelConfigToJson(*Parse(kGpt2)), HasSubstr("GPT2LMHeadModel"));
}

}  // namespace
}  // namespace manyshot

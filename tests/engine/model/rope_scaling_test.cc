// rope_scaling: the tables against tools/reference/rope_scaling.py (tests/golden/rope_scaling.json,
// HF's float32 arithmetic in NumPy), parsed from real config.json text; the refusals; and the
// config written back.
#include "engine/model/rope_scaling.h"

#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/model/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

nlohmann::json LlamaConfig(double theta, int64_t head_dim, int64_t max_position) {
  return {{"model_type", "llama"},
          {"vocab_size", 100},
          {"hidden_size", head_dim * 2},
          {"intermediate_size", 16},
          {"num_hidden_layers", 1},
          {"num_attention_heads", 2},
          {"max_position_embeddings", max_position},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", theta}};
}

class RopeScalingTest : public ::testing::Test {
 protected:
  absl::StatusOr<ModelConfig> Parse(const nlohmann::json& config) {
    WriteFile(dir_.path() / "config.json", config.dump());
    return ParseModelConfig(dir_.path() / "config.json");
  }
  absl::StatusOr<ModelConfig> ParseScaling(const nlohmann::json& rope_scaling) {
    nlohmann::json j = LlamaConfig(10000.0, 16, 2048);
    j["rope_scaling"] = rope_scaling;
    return Parse(j);
  }
  static RopeTable TableOf(const ModelConfig& c) {
    return ComputeRopeTable(c.rope_scaling, c.rope_theta, c.head_dim, c.max_position_embeddings);
  }
  TempDir dir_;
};

TEST_F(RopeScalingTest, TablesMatchTheReference) {
  std::ifstream in(std::string(MANYSHOT_SOURCE_DIR) + "/tests/golden/rope_scaling.json");
  const nlohmann::json golden = nlohmann::json::parse(in);
  ASSERT_GE(golden["cases"].size(), 9u);
  for (const auto& g : golden["cases"]) {
    SCOPED_TRACE(g["name"].get<std::string>());
    nlohmann::json j = LlamaConfig(g["rope_theta"], g["head_dim"], g["max_position_embeddings"]);
    j["rope_scaling"] = g["rope_scaling"];
    auto c = Parse(j);
    ASSERT_TRUE(c.ok()) << c.status();
    const RopeTable t = TableOf(*c);
    const auto want = g["inv_freq"].get<std::vector<double>>();
    ASSERT_EQ(t.inv_freq.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(t.inv_freq[i] - want[i]) / want[i]);
    }
    EXPECT_LE(worst, 1e-6);
    RecordProperty("max_rel_diff_" + g["name"].get<std::string>(), absl::StrCat(worst));
    EXPECT_NEAR(t.attention_factor, g["attention_factor"].get<double>(), 1e-12);
  }
}

TEST_F(RopeScalingTest, AbsentNullAndDefaultAreThePlainTableBitForBit) {
  const RopeTable plain = DefaultRopeTable(10000.0, 16);
  nlohmann::json absent = LlamaConfig(10000.0, 16, 2048);
  for (const nlohmann::json& scaling :
       {nlohmann::json(), nlohmann::json({{"rope_type", "default"}}),
        nlohmann::json({{"type", "dynamic"}, {"factor", 4.0}})}) {
    auto c = scaling.is_null() ? Parse(absent) : ParseScaling(scaling);
    ASSERT_TRUE(c.ok()) << c.status();
    const RopeTable t = TableOf(*c);
    EXPECT_EQ(t.inv_freq, plain.inv_freq) << scaling;
    EXPECT_EQ(t.attention_factor, 1.0);
  }
}

TEST_F(RopeScalingTest, UnknownTypesAreRefusedNamingThemAndTheSupportedOnes) {
  for (const char* type : {"longrope", "ntk", "su", "mrope"}) {
    auto c = ParseScaling({{"rope_type", type}, {"factor", 2.0}});
    EXPECT_EQ(c.status().code(), absl::StatusCode::kUnimplemented) << type;
    EXPECT_THAT(c.status().message(), HasSubstr(std::string("\"") + type + "\""));
    EXPECT_THAT(c.status().message(), HasSubstr("default, linear, dynamic, llama3, yarn"));
  }
}

TEST_F(RopeScalingTest, MissingOrBadSubKeysAreRefusedNamingTheKey) {
  const nlohmann::json llama3 = {{"rope_type", "llama3"},
                                 {"factor", 8.0},
                                 {"low_freq_factor", 1.0},
                                 {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 256}};
  struct Case {
    nlohmann::json scaling;
    const char* key;
  };
  const Case cases[] = {
      {{{"factor", 2.0}}, "rope_type"},
      {{{"rope_type", 3}}, "rope_type"},
      {{{"rope_type", "linear"}}, "factor"},
      {{{"rope_type", "linear"}, {"factor", "2"}}, "factor"},
      {{{"rope_type", "linear"}, {"factor", -1.0}}, "factor"},
      {{{"type", "dynamic"}}, "factor"},
      {{{"type", "dynamic"}, {"factor", 2.0}, {"original_max_position_embeddings", 0}},
       "original_max_position_embeddings"},
      {{{"rope_type", "yarn"}}, "factor"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", "32"}}, "beta_fast"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_slow", 0.0}}, "beta_slow"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"attention_factor", -1.0}}, "attention_factor"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", "1"}}, "mscale"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"mscale_all_dim", false}}, "mscale_all_dim"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"truncate", 1}}, "truncate"},
      {{{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 2.5}},
       "original_max_position_embeddings"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseScaling(c.scaling);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << c.scaling;
    EXPECT_THAT(parsed.status().message(), HasSubstr(std::string("\"") + c.key + "\""))
        << c.scaling;
    EXPECT_THAT(parsed.status().message(), HasSubstr("rope_scaling")) << c.scaling;
  }
  for (const char* key :
       {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) {
    nlohmann::json s = llama3;
    s.erase(key);
    auto parsed = ParseScaling(s);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(parsed.status().message(), HasSubstr(std::string("\"") + key + "\""));
  }
  nlohmann::json flipped = llama3;
  flipped["high_freq_factor"] = 1.0;  // not above low_freq_factor: HF would divide by zero
  EXPECT_THAT(ParseScaling(flipped).status().message(), HasSubstr("high_freq_factor"));
  EXPECT_THAT(ParseScaling(nlohmann::json::array({1, 2})).status().message(),
              HasSubstr("\"rope_scaling\" must be an object"));
}

TEST_F(RopeScalingTest, AWrittenConfigReadsBackTheSameTable) {
  const nlohmann::json scalings[] = {
      {{"rope_type", "linear"}, {"factor", 4.0}},
      {{"type", "dynamic"}, {"factor", 2.0}, {"original_max_position_embeddings", 1024}},
      {{"rope_type", "llama3"},
       {"factor", 8.0},
       {"low_freq_factor", 1.0},
       {"high_freq_factor", 4.0},
       {"original_max_position_embeddings", 256}},
      {{"rope_type", "yarn"},
       {"factor", 8.0},
       {"attention_factor", 1.25},
       {"beta_fast", 16.0},
       {"beta_slow", 2.0},
       {"mscale", 0.707},
       {"mscale_all_dim", 1.0},
       {"truncate", false}},
  };
  for (const auto& scaling : scalings) {
    auto c = ParseScaling(scaling);
    ASSERT_TRUE(c.ok()) << c.status();
    auto again = Parse(nlohmann::json::parse(ModelConfigToJson(*c)));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->rope_scaling.type, c->rope_scaling.type);
    const RopeTable a = TableOf(*c), b = TableOf(*again);
    EXPECT_EQ(a.inv_freq, b.inv_freq) << scaling;
    EXPECT_EQ(a.attention_factor, b.attention_factor) << scaling;
  }
}

}  // namespace
}  // namespace manyshot

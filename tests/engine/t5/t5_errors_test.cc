// Malformed T5 configs and checkpoints, and bad calls: each a clear status naming what is wrong
// (the key, the tensor, the input), never a crash.
#include <fstream>

#include "engine/model/synthetic/safetensors_writer.h"
#include "engine/model/t5_tensor_names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"
#include "tests/engine/support/golden_models.h"
#include "tests/engine/t5/t5_test_support.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

// The v1.1 golden's config.json with `edit` applied to its JSON.
absl::StatusOr<T5Config> ParseEdited(const std::function<void(nlohmann::json&)>& edit) {
  TempDir dir;
  std::ifstream in(T5GoldenModelDir("v1_1") / "config.json");
  nlohmann::json j = nlohmann::json::parse(in);
  edit(j);
  WriteFile(dir.path() / "config.json", j.dump());
  return ParseT5Config(dir.path() / "config.json");
}

TEST(T5ConfigTest, WrittenConfigReadsBackEqual) {
  const TinyT5Spec spec = T5SpecFromGolden(T5Golden("v1_1")["model"]);
  auto parsed = ParseT5Config(T5GoldenModelDir("v1_1") / "config.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->d_model, spec.config.d_model);
  EXPECT_EQ(parsed->num_layers, 3);
  EXPECT_EQ(parsed->num_decoder_layers, 2);
  EXPECT_EQ(parsed->inner_dim(), 96);
  EXPECT_EQ(parsed->feed_forward, T5FeedForward::kGatedGelu);
  EXPECT_FALSE(parsed->tie_word_embeddings);
  EXPECT_EQ(parsed->relative_attention_max_distance, 20);
  EXPECT_FLOAT_EQ(parsed->layer_norm_epsilon, 1e-6f);
  auto type = ConfigModelType(T5GoldenModelDir("v1_1") / "config.json");
  ASSERT_TRUE(type.ok());
  EXPECT_EQ(*type, "t5");
}

TEST(T5ConfigTest, DecoderOnlyParserPointsToT5Model) {
  auto parsed = ParseModelConfig(T5GoldenModelDir("v1_0") / "config.json");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(parsed.status().message(), HasSubstr("encoder-decoder model: it loads as T5Model"));
}

TEST(T5ConfigTest, HfDefaultsWhenKeysAreAbsent) {
  auto parsed = ParseEdited([](nlohmann::json& j) {
    for (const char* key :
         {"num_decoder_layers", "relative_attention_num_buckets", "relative_attention_max_distance",
          "feed_forward_proj", "tie_word_embeddings", "layer_norm_epsilon"}) {
      j.erase(key);
    }
  });
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->num_decoder_layers, parsed->num_layers);
  EXPECT_EQ(parsed->relative_attention_num_buckets, 32);
  EXPECT_EQ(parsed->relative_attention_max_distance, 128);
  EXPECT_EQ(parsed->feed_forward, T5FeedForward::kRelu);
  EXPECT_TRUE(parsed->tie_word_embeddings);
}

TEST(T5ConfigTest, UnsupportedOrMalformedKeysNameTheKey) {
  struct Bad {
    std::function<void(nlohmann::json&)> edit;
    std::string key;
  };
  const std::vector<Bad> bad = {
      {[](auto& j) { j["feed_forward_proj"] = "gated-silu"; }, "feed_forward_proj"},
      {[](auto& j) { j["feed_forward_proj"] = "gelu"; }, "feed_forward_proj"},
      {[](auto& j) { j.erase("d_model"); }, "d_model"},
      {[](auto& j) { j["d_kv"] = 0; }, "d_kv"},
      {[](auto& j) { j["num_heads"] = "six"; }, "num_heads"},
      {[](auto& j) { j["relative_attention_num_buckets"] = 2; }, "relative_attention_num_buckets"},
      {[](auto& j) { j["relative_attention_max_distance"] = 4; },
       "relative_attention_max_distance"},
      {[](auto& j) { j["is_encoder_decoder"] = false; }, "is_encoder_decoder"},
      {[](auto& j) { j["decoder_start_token_id"] = 100000; }, "decoder_start_token_id"},
      {[](auto& j) { j["tie_word_embeddings"] = "yes"; }, "tie_word_embeddings"},
      {[](auto& j) { j["layer_norm_epsilon"] = 0; }, "layer_norm_epsilon"},
      {[](auto& j) { j["model_type"] = "llama"; }, "model_type"},
      {[](auto& j) { j["d_ff"] = 1e12; }, "d_ff"},
  };
  for (const Bad& b : bad) {
    auto parsed = ParseEdited(b.edit);
    ASSERT_FALSE(parsed.ok()) << b.key;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
    EXPECT_THAT(parsed.status().message(), HasSubstr("\"" + b.key + "\"")) << parsed.status();
  }
}

TEST(T5ConfigTest, NotJsonOrMissingFile) {
  TempDir dir;
  auto missing = ParseT5Config(dir.path() / "config.json");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  WriteFile(dir.path() / "config.json", "{\"model_type\": \"t5\",");
  auto broken = ParseT5Config(dir.path() / "config.json");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken.status().message(), HasSubstr("not valid JSON"));
}

// Writes the v1.1 model with its tensors passed through `edit`.
absl::StatusOr<std::unique_ptr<T5Model>> LoadEdited(
    const TempDir& dir, const std::function<void(std::vector<TensorToWrite>&)>& edit) {
  const TinyT5Spec spec = T5SpecFromGolden(T5Golden("v1_1")["model"]);
  EXPECT_TRUE(WriteTinyT5Model(spec, dir.path()).ok());
  auto tensors = TinyT5Tensors(spec);
  EXPECT_TRUE(tensors.ok());
  edit(*tensors);
  std::filesystem::remove(dir.path() / "model-00001-of-00002.safetensors");
  std::filesystem::remove(dir.path() / "model-00002-of-00002.safetensors");
  std::filesystem::remove(dir.path() / "model.safetensors.index.json");
  EXPECT_TRUE(WriteModelSafetensors(dir.path(), *tensors, 1).ok());
  return T5Model::Load(dir.path(), TestBackend());
}

TEST(T5WeightsTest, MissingTensorIsNotFoundNamingIt) {
  TempDir dir;
  const std::string victim = "decoder.block.1.layer.1.EncDecAttention.k.weight";
  auto loaded = LoadEdited(dir, [&](auto& tensors) {
    std::erase_if(tensors, [&](const TensorToWrite& t) { return t.name == victim; });
  });
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr(victim));
}

TEST(T5WeightsTest, UntiedWithoutLmHeadNamesIt) {
  TempDir dir;
  auto loaded = LoadEdited(dir, [](auto& tensors) {
    std::erase_if(tensors, [](const TensorToWrite& t) { return t.name == "lm_head.weight"; });
  });
  ASSERT_FALSE(loaded.ok());
  EXPECT_THAT(loaded.status().message(), HasSubstr("lm_head.weight"));
}

TEST(T5WeightsTest, WrongShapeIsInvalidArgumentNamingTensorAndShapes) {
  TempDir dir;
  const std::string victim = "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight";
  auto loaded = LoadEdited(dir, [&](auto& tensors) {
    for (TensorToWrite& t : tensors) {
      if (t.name == victim) {  // [buckets, heads] written transposed
        std::swap(t.shape[0], t.shape[1]);
      }
    }
  });
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr(victim));
  EXPECT_THAT(loaded.status().message(), HasSubstr("[16, 6]"));
}

TEST(T5WeightsTest, EmbeddingUnderAStackNameIsAccepted) {
  TempDir dir;
  auto loaded = LoadEdited(dir, [](auto& tensors) {
    for (TensorToWrite& t : tensors) {
      if (t.name == "shared.weight") t.name = "encoder.embed_tokens.weight";
    }
  });
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto encoded = (*loaded)->Encode({{5, 6, 7}});
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  // The same weights under the canonical name give the same states.
  auto reference = T5GoldenModel("v1_1").Encode({{5, 6, 7}});
  ASSERT_TRUE(reference.ok());
  auto a = (*loaded)->StatesToHost(*encoded, 0);
  auto b = T5GoldenModel("v1_1").StatesToHost(*reference, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(T5CallsTest, BadInputsAreInvalidArgumentNamingThem) {
  const T5Model& model = T5GoldenModel("v1_0");
  auto empty = model.Encode({{1, 2}, {}});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.status().message(), HasSubstr("encoder input 1 is empty"));
  auto out_of_vocab = model.Encode({{1, 512}});
  ASSERT_FALSE(out_of_vocab.ok());
  EXPECT_EQ(out_of_vocab.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out_of_vocab.status().message(), HasSubstr("token 1: id 512"));

  auto encoded = model.Encode({{3, 4, 5}});
  ASSERT_TRUE(encoded.ok());
  KvCache cache = model.NewDecoderCache(4);
  const std::vector<int32_t> tokens = {0, 7};
  const std::vector<int64_t> rows = {1};
  auto bad_input = model.Decode({{tokens, &cache, &*encoded, 1, rows}});
  ASSERT_FALSE(bad_input.ok());
  EXPECT_THAT(bad_input.status().message(), HasSubstr("input 1 is not one of"));
  const std::vector<int32_t> negative = {0, -3};
  auto bad_token = model.Decode({{negative, &cache, &*encoded, 0, rows}});
  ASSERT_FALSE(bad_token.ok());
  EXPECT_THAT(bad_token.status().message(), HasSubstr("token 1: id -3"));
  const std::vector<int64_t> bad_rows = {2};
  auto bad_row = model.Decode({{tokens, &cache, &*encoded, 0, bad_rows}});
  ASSERT_FALSE(bad_row.ok());
  EXPECT_THAT(bad_row.status().message(), HasSubstr("logit row 2"));
  EXPECT_EQ(cache.length(), 0);  // nothing ran
  // Another model's encoder output (v1.1 has 2 decoder layers too, but 6 heads, not 4).
  auto other = T5GoldenModel("v1_1").Encode({{3, 4, 5}});
  ASSERT_TRUE(other.ok());
  auto mismatched = model.Decode({{tokens, &cache, &*other, 0, rows}});
  ASSERT_FALSE(mismatched.ok());
  EXPECT_THAT(mismatched.status().message(), HasSubstr("not this model's"));
}

}  // namespace
}  // namespace manyshot::testing

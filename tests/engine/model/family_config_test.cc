// BLOOM and OPT as data: their config.json keys (as bigscience/bloom-560m and facebook/opt-125m
// ship them), unsupported options named, the round trip through ModelConfigToJson, their traits
// rows and tensor tables (names, optional prefixes, post-LN without a final norm), and BLOOM's
// ALiBi slopes against the closed form of HF's build_alibi_tensor.
#include <cmath>
#include <string>

#include "engine/model/arch_traits.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic/safetensors_writer.h"
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

constexpr char kBloom560m[] = R"({
  "apply_residual_connection_post_layernorm": false, "architectures": ["BloomForCausalLM"],
  "attention_dropout": 0.0, "attention_softmax_in_fp32": true, "bias_dropout_fusion": true,
  "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 1024,
  "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": true,
  "model_type": "bloom", "n_head": 16, "n_inner": null, "n_layer": 24, "offset_alibi": 100,
  "pad_token_id": 3, "pretraining_tp": 1, "skip_bias_add": true, "skip_bias_add_qkv": false,
  "slow_but_exact": false, "unk_token_id": 0, "use_cache": true, "vocab_size": 250880})";

constexpr char kOpt125m[] = R"({
  "_remove_final_layer_norm": false, "activation_dropout": 0.0, "activation_function": "relu",
  "architectures": ["OPTForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 2,
  "do_layer_norm_before": true, "dropout": 0.1, "eos_token_id": 2, "ffn_dim": 3072,
  "hidden_size": 768, "init_std": 0.02, "layerdrop": 0.0, "max_position_embeddings": 2048,
  "model_type": "opt", "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1,
  "torch_dtype": "float16", "use_cache": true, "vocab_size": 50272, "word_embed_proj_dim": 768})";

class FamilyConfigTest : public ::testing::Test {
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
  void ExpectRejected(const char* base, const std::string& key, nlohmann::json value) {
    auto c = ParseWith(base, key, value);
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << key << " = " << value;
    EXPECT_THAT(c.status().message(), HasSubstr("\"" + key + "\"")) << key;
  }
  TempDir dir_;
};

TEST_F(FamilyConfigTest, Bloom) {
  auto c = Parse(nlohmann::json::parse(kBloom560m));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kBloom);
  EXPECT_EQ(c->hidden_size, 1024);
  EXPECT_EQ(c->num_layers, 24);
  EXPECT_EQ(c->num_heads, 16);
  EXPECT_EQ(c->num_kv_heads, 16);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->intermediate_size, 4096);
  EXPECT_EQ(c->vocab_size, 250880);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-5f);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->attention_bias && c->attention_out_bias && c->mlp_bias);
  EXPECT_TRUE(c->pre_norm);
  EXPECT_EQ(c->max_position_embeddings, 2048);  // no seq_length: the practical bound
  EXPECT_EQ(c->bos_token_id, 1);
  EXPECT_EQ(c->eos_token_id, 2);
  // Older configs name the width n_embed.
  nlohmann::json j = nlohmann::json::parse(kBloom560m);
  j.erase("hidden_size");
  j["n_embed"] = 512;
  j["seq_length"] = 4096;
  auto older = Parse(j);
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->hidden_size, 512);
  EXPECT_EQ(older->head_dim, 32);
  EXPECT_EQ(older->max_position_embeddings, 4096);
}

TEST_F(FamilyConfigTest, BloomRejectsWhatItCannotRun) {
  ExpectRejected(kBloom560m, "apply_residual_connection_post_layernorm", true);
  ExpectRejected(kBloom560m, "n_head", 7);  // does not divide 1024
  ExpectRejected(kBloom560m, "n_layer", 0);
  ExpectRejected(kBloom560m, "layer_norm_epsilon", "small");
}

TEST_F(FamilyConfigTest, Opt) {
  auto c = Parse(nlohmann::json::parse(kOpt125m));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kOpt);
  EXPECT_EQ(c->hidden_size, 768);
  EXPECT_EQ(c->intermediate_size, 3072);
  EXPECT_EQ(c->num_layers, 12);
  EXPECT_EQ(c->num_heads, 12);
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_TRUE(c->pre_norm);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_TRUE(c->attention_bias && c->attention_out_bias && c->mlp_bias);
  EXPECT_FLOAT_EQ(c->norm_eps, 1e-5f);
  EXPECT_EQ(c->bos_token_id, 2);
  auto post = ParseWith(kOpt125m, "do_layer_norm_before", false);
  ASSERT_TRUE(post.ok()) << post.status();
  EXPECT_FALSE(post->pre_norm);
}

TEST_F(FamilyConfigTest, OptRejectsWhatItCannotRun) {
  // opt-350m: a 512-wide embedding projected in and out of the 1024-wide decoder.
  ExpectRejected(kOpt125m, "word_embed_proj_dim", 512);
  ExpectRejected(kOpt125m, "_remove_final_layer_norm", true);
  ExpectRejected(kOpt125m, "layer_norm_elementwise_affine", false);
  ExpectRejected(kOpt125m, "activation_function", "gelu");
  ExpectRejected(kOpt125m, "do_layer_norm_before", "yes");
  ExpectRejected(kOpt125m, "ffn_dim", -3);
}

TEST_F(FamilyConfigTest, RoundTripThroughConfigJson) {
  for (const char* text : {kBloom560m, kOpt125m}) {
    for (bool pre_norm : {true, false}) {
      nlohmann::json j = nlohmann::json::parse(text);
      if (!pre_norm && j["model_type"] != "opt") continue;
      j["do_layer_norm_before"] = pre_norm;  // ignored by BLOOM
      j["tie_word_embeddings"] = false;
      auto a = Parse(j);
      ASSERT_TRUE(a.ok()) << a.status();
      auto b = Parse(nlohmann::json::parse(ModelConfigToJson(*a)));
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_EQ(ModelConfigToJson(*a), ModelConfigToJson(*b));
      EXPECT_EQ(a->architecture, b->architecture);
      EXPECT_EQ(a->pre_norm, b->pre_norm);
      EXPECT_EQ(a->tie_word_embeddings, b->tie_word_embeddings);
      EXPECT_EQ(a->intermediate_size, b->intermediate_size);
      EXPECT_EQ(a->max_position_embeddings, b->max_position_embeddings);
    }
  }
}

TEST_F(FamilyConfigTest, TraitsRows) {
  const ArchTraits& bloom = TraitsOf(Architecture::kBloom);
  EXPECT_EQ(bloom.position, PositionKind::kAlibi);
  EXPECT_EQ(bloom.qkv, QkvLayout::kFusedPerHead);
  EXPECT_TRUE(bloom.embedding_norm);
  EXPECT_EQ(bloom.activation, Activation::kGeluTanh);
  const ArchTraits& opt = TraitsOf(Architecture::kOpt);
  EXPECT_EQ(opt.position, PositionKind::kLearned);
  EXPECT_EQ(opt.position_offset, 2);
  EXPECT_EQ(opt.activation, Activation::kRelu);
  EXPECT_EQ(opt.qkv, QkvLayout::kSeparate);
  for (Architecture a :
       {Architecture::kLlama, Architecture::kGpt2, Architecture::kBloom, Architecture::kOpt}) {
    EXPECT_EQ(TraitsOf(a).architecture, a);
  }
}

TEST_F(FamilyConfigTest, TensorTables) {
  auto bloom = Parse(nlohmann::json::parse(kBloom560m));
  ASSERT_TRUE(bloom.ok());
  constexpr TensorPart W = TensorPart::kWeight, B = TensorPart::kBias;
  EXPECT_EQ(TensorName(Architecture::kBloom, TensorRole::kAttnQkv, W, 3),
            "h.3.self_attention.query_key_value.weight");
  EXPECT_EQ(TensorShape(*bloom, TensorRole::kAttnQkv, W), (std::vector<int64_t>{3072, 1024}));
  EXPECT_EQ(TensorShape(*bloom, TensorRole::kTokenEmbdNorm, B), (std::vector<int64_t>{1024}));
  EXPECT_FALSE(HasTensor(*bloom, TensorRole::kOutput, W));   // tied
  EXPECT_FALSE(HasTensor(*bloom, TensorRole::kPosEmbd, W));  // ALiBi: no table
  // 1 word embedding, 2 embedding-norm, 12 per layer, 2 final norm.
  EXPECT_EQ(ExpectedTensors(*bloom).size(), 1u + 2u + 12u * 24u + 2u);

  auto opt = Parse(nlohmann::json::parse(kOpt125m));
  ASSERT_TRUE(opt.ok());
  EXPECT_EQ(TensorShape(*opt, TensorRole::kPosEmbd, W), (std::vector<int64_t>{2050, 768}));
  EXPECT_EQ(TensorName(Architecture::kOpt, TensorRole::kFfnNorm, W, 0),
            "decoder.layers.0.final_layer_norm.weight");
  EXPECT_TRUE(HasTensor(*opt, TensorRole::kOutputNorm, W));
  const size_t pre_ln = ExpectedTensors(*opt).size();
  auto post = ParseWith(kOpt125m, "do_layer_norm_before", false);
  ASSERT_TRUE(post.ok());
  EXPECT_FALSE(HasTensor(*post, TensorRole::kOutputNorm, W));  // post-LN: no final norm
  EXPECT_EQ(ExpectedTensors(*post).size(), pre_ln - 2);
}

TEST_F(FamilyConfigTest, OptionalPrefixes) {
  std::vector<TensorToWrite> tensors = {
      {"model.decoder.embed_tokens.weight", DType::kF32, {2, 2}, std::vector<float>(4, 1.0f)},
      {"transformer.word_embeddings.weight", DType::kF32, {2, 2}, std::vector<float>(4, 2.0f)},
  };
  ASSERT_TRUE(WriteModelSafetensors(dir_.path(), tensors, 1).ok());
  auto archive = SafetensorsArchive::Open(dir_.path());
  ASSERT_TRUE(archive.ok()) << archive.status();
  const std::string opt_embed =
      TensorName(Architecture::kOpt, TensorRole::kTokenEmbd, TensorPart::kWeight);
  const std::string bloom_embed =
      TensorName(Architecture::kBloom, TensorRole::kTokenEmbd, TensorPart::kWeight);
  const TensorInfo* o = FindModelTensor(*archive, Architecture::kOpt, opt_embed);
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->name, "model.decoder.embed_tokens.weight");
  const TensorInfo* b = FindModelTensor(*archive, Architecture::kBloom, bloom_embed);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name, "transformer.word_embeddings.weight");
  EXPECT_EQ(FindModelTensor(*archive, Architecture::kLlama, "decoder.embed_tokens.weight"),
            nullptr);
}

TEST(AlibiSlopesTest, PowersOfTwoAndTheRest) {
  // 8 heads: 2^-1 .. 2^-8.
  const std::vector<float> eight = AlibiSlopes(8);
  ASSERT_EQ(eight.size(), 8u);
  for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(eight[h], std::exp2(-(h + 1.0f)));
  // 6 heads: the 4-head sequence 2^-2, 2^-4, 2^-6, 2^-8, then the odd powers of the 8-head
  // sequence's base 2^-1: 2^-1, 2^-3.
  const std::vector<float> six = AlibiSlopes(6);
  const float want[] = {0.25f, 0.0625f, 0.015625f, 0.00390625f, 0.5f, 0.125f};
  ASSERT_EQ(six.size(), 6u);
  for (int h = 0; h < 6; ++h) EXPECT_FLOAT_EQ(six[h], want[h]) << h;
  // 12 heads (BLOOM-560m has 16; 1b7 16; 7b1 32; 176b 112): 8 then 4 extra.
  const std::vector<float> twelve = AlibiSlopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  EXPECT_FLOAT_EQ(twelve[8], std::exp2(-0.5f));
  EXPECT_FLOAT_EQ(twelve[11], std::exp2(-3.5f));
  EXPECT_EQ(AlibiSlopes(1), std::vector<float>{std::exp2(-8.0f)});
}

}  // namespace
}  // namespace manyshot

// The config.json of published checkpoints, transcribed key for key (their weights cannot be
// downloaded here): each loads with the shapes the checkpoint has, or is refused saying why.
// docs/models.md lists these checkpoints; keep the two in step.
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/model/model_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::WriteFile;

absl::StatusOr<ModelConfig> Parse(const std::string& text) {
  TempDir dir;
  WriteFile(dir.path() / "config.json", text);
  return ParseModelConfig(dir.path() / "config.json");
}

TEST(PublishedConfigTest, Gpt2) {
  auto c = Parse(R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"],
    "attn_pdrop": 0.1, "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256,
    "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024,
    "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1,
    "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
    "summary_type": "cls_index", "summary_use_proj": true,
    "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
    "vocab_size": 50257})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGpt2);
  EXPECT_EQ(c->num_layers, 12);
  EXPECT_EQ(c->head_dim, 64);
}

TEST(PublishedConfigTest, Qwen25_0_5B) {
  auto c = Parse(R"({"architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896,
    "initializer_range": 0.02, "intermediate_size": 4864, "max_position_embeddings": 32768,
    "max_window_layers": 24, "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_TRUE(c->tie_word_embeddings);
}

TEST(PublishedConfigTest, SmolLM2_135M) {
  auto c = Parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu",
    "hidden_size": 576, "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
    "is_llama_config": true, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": false, "rope_scaling": null,
    "rope_theta": 100000, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.40.1", "use_cache": true, "vocab_size": 49152})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_layers, 30);
}

TEST(PublishedConfigTest, TinyLlama_1_1B) {
  auto c = Parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048,
    "initializer_range": 0.02, "intermediate_size": 5632, "max_position_embeddings": 2048,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 22,
    "num_key_value_heads": 4, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
    "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.35.0", "use_cache": true, "vocab_size": 32000})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_kv_heads, 4);
}

TEST(PublishedConfigTest, Llama32_1B) {
  auto c = Parse(R"({"architectures": ["LlamaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_TRUE(c->tie_word_embeddings);
}

// v0.1 ships a 4096 window over 32768 positions: served within the window.
TEST(PublishedConfigTest, Mistral7Bv01IsServedWithinItsWindow) {
  auto c = Parse(R"({"architectures": ["MistralForCausalLM"], "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(ContextLength(*c), 4096);
}

TEST(PublishedConfigTest, Mistral7Bv03) {
  auto c = Parse(R"({"architectures": ["MistralForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
    "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768,
    "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 32768})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);
}

TEST(PublishedConfigTest, Pythia70m) {
  auto c = Parse(R"({"architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0,
    "eos_token_id": 0, "hidden_act": "gelu", "hidden_size": 512, "initializer_range": 0.02,
    "intermediate_size": 2048, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "model_type": "gpt_neox", "num_attention_heads": 8, "num_hidden_layers": 6,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": false,
    "torch_dtype": "float16", "transformers_version": "4.24.0", "use_cache": true,
    "use_parallel_residual": true, "vocab_size": 50304})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGptNeox);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->rotary_dims, 16);  // int(64 * 0.25)
  EXPECT_TRUE(c->parallel_residual);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->bos_token_id, 0);
}

// Phi-3-mini-4k: fused projections, and a 2047 window over 4096 positions.
TEST(PublishedConfigTest, Phi3Mini4k) {
  auto c = Parse(R"({"architectures": ["Phi3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000,
    "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0,
    "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.2",
    "use_cache": true, "vocab_size": 32064})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kPhi3);
  EXPECT_EQ(c->head_dim, 96);
  EXPECT_EQ(c->sliding_window, 2047);
  EXPECT_EQ(ContextLength(*c), 2047);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->eos_token_id, 32000);
}

// Phi-3's long-context "su" / "longrope" scaling is not implemented: refused naming the type.
TEST(PublishedConfigTest, Phi3LongRopeIsRefusedNamingIt) {
  for (const char* type : {"su", "longrope"}) {
    auto c = Parse(absl::StrCat(R"({"model_type": "phi3", "hidden_act": "silu",
      "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 131072,
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
      "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-05,
      "rope_scaling": {"long_factor": [1.0], "short_factor": [1.0], "type": ")",
                                type, R"("}, "rope_theta": 10000.0, "vocab_size": 32064})"));
    ASSERT_FALSE(c.ok()) << type;
    EXPECT_THAT(c.status().message(), HasSubstr(absl::StrCat("\"", type, "\""))) << type;
  }
}

// Gemma-7B: "hidden_act": "gelu" with no hidden_activation runs the tanh GELU, as transformers
// does (the activation the checkpoint was trained with).
TEST(PublishedConfigTest, Gemma7B) {
  auto c = Parse(R"({"architectures": ["GemmaForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 2, "eos_token_id": 1, "head_dim": 256,
    "hidden_act": "gelu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 24576, "max_position_embeddings": 8192, "model_type": "gemma",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 16,
    "pad_token_id": 0, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000.0,
    "torch_dtype": "bfloat16", "transformers_version": "4.38.0.dev0", "use_cache": true,
    "vocab_size": 256000})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGemma);
  EXPECT_EQ(c->head_dim, 256);  // 16 heads of 256: 4096 wide, not hidden_size 3072
  EXPECT_EQ(c->hidden_act, "gelu_pytorch_tanh");
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->attn_logit_softcap, 0.0f);
  EXPECT_EQ(c->bos_token_id, 2);
  EXPECT_EQ(c->eos_token_id, 1);
}

// Gemma-2-2B: soft-caps, query scaling and its window (served within 4096 positions).
TEST(PublishedConfigTest, Gemma2_2B) {
  auto c = Parse(R"({"architectures": ["Gemma2ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "attn_logit_softcapping": 50.0, "bos_token_id": 2,
    "cache_implementation": "hybrid", "eos_token_id": 1, "final_logit_softcapping": 30.0,
    "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 2304, "initializer_range": 0.02, "intermediate_size": 9216,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8,
    "num_hidden_layers": 26, "num_key_value_heads": 4, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "torch_dtype": "float32", "transformers_version": "4.42.4",
    "use_cache": true, "vocab_size": 256000})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, Architecture::kGemma2);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->num_kv_heads, 4);
  EXPECT_EQ(c->attn_logit_softcap, 50.0f);
  EXPECT_EQ(c->final_logit_softcap, 30.0f);
  EXPECT_EQ(c->query_pre_attn_scalar, 256.0f);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(ContextLength(*c), 4096);
}

}  // namespace
}  // namespace manyshot

// The traits rows; see arch_traits.h.
#include "engine/model/arch_traits.h"

#include <cmath>
#include <cstdlib>

namespace manyshot {
namespace {

constexpr ArchTraits kLlamaTraits = {
    .architecture = Architecture::kLlama,
    .name = "llama",
    .norm = NormKind::kRms,
    .activation = Activation::kSwiGlu,
    .position = PositionKind::kRotary,
    .position_offset = 0,
    .layout = WeightLayout::kOutIn,
    .qkv = QkvLayout::kSeparate,
    .embedding_norm = false,
    .embedding_scaled = false,
    .norm_adds_one = false,
    .sublayer_post_norms = false,
    .optional_prefix = "",
};

constexpr ArchTraits kGpt2Traits = {
    .architecture = Architecture::kGpt2,
    .name = "gpt2",
    .norm = NormKind::kLayer,
    .activation = Activation::kGeluTanh,
    .position = PositionKind::kLearned,
    .position_offset = 0,
    .layout = WeightLayout::kInOut,  // Conv1D
    .qkv = QkvLayout::kFused,
    .embedding_norm = false,
    .embedding_scaled = false,
    .norm_adds_one = false,
    .sublayer_post_norms = false,
    .optional_prefix = "transformer.",
};

constexpr ArchTraits kBloomTraits = {
    .architecture = Architecture::kBloom,
    .name = "bloom",
    .norm = NormKind::kLayer,
    .activation = Activation::kGeluTanh,  // bloom_gelu: GPT-2's tanh approximation
    .position = PositionKind::kAlibi,
    .position_offset = 0,
    .layout = WeightLayout::kOutIn,
    .qkv = QkvLayout::kFusedPerHead,
    .embedding_norm = true,  // word_embeddings_layernorm
    .embedding_scaled = false,
    .norm_adds_one = false,
    .sublayer_post_norms = false,
    .optional_prefix = "transformer.",
};

constexpr ArchTraits kOptTraits = {
    .architecture = Architecture::kOpt,
    .name = "opt",
    .norm = NormKind::kLayer,
    .activation = Activation::kRelu,
    .position = PositionKind::kLearned,
    .position_offset = 2,  // OPTLearnedPositionalEmbedding
    .layout = WeightLayout::kOutIn,
    .qkv = QkvLayout::kSeparate,
    .embedding_norm = false,
    .embedding_scaled = false,
    .norm_adds_one = false,
    .sublayer_post_norms = false,
    .optional_prefix = "model.",  // OPTForCausalLM's state dict; OPTModel's has none
};

constexpr ArchTraits kGptNeoxTraits = {
    .architecture = Architecture::kGptNeox,
    .name = "gpt_neox",
    .norm = NormKind::kLayer,
    .activation = Activation::kGeluErf,
    .position = PositionKind::kRotary,  // on ModelConfig::rotary_dims of each head
    .position_offset = 0,
    .layout = WeightLayout::kOutIn,
    .qkv = QkvLayout::kFusedPerHead,  // query_key_value viewed [heads, 3, head_dim]
    .embedding_norm = false,
    .embedding_scaled = false,
    .norm_adds_one = false,
    .sublayer_post_norms = false,
    .optional_prefix =
        "",  // the table holds GPTNeoXForCausalLM's names ("gpt_neox." and embed_out)
};

constexpr ArchTraits kPhi3Traits = {
    .architecture = Architecture::kPhi3,
    .name = "phi3",
    .norm = NormKind::kRms,
    .activation = Activation::kSwiGlu,  // gate_up_proj: gate | up, as the fused Llama weight
    .position = PositionKind::kRotary,
    .position_offset = 0,
    .layout = WeightLayout::kOutIn,
    .qkv = QkvLayout::kFused,  // qkv_proj: q | k | v
    .embedding_norm = false,
    .embedding_scaled = false,
    .norm_adds_one = false,
    .sublayer_post_norms = false,
    .optional_prefix = "",
};

constexpr ArchTraits kGemmaTraits = {
    .architecture = Architecture::kGemma,
    .name = "gemma",
    .norm = NormKind::kRms,
    .activation = Activation::kGeGlu,  // gelu_pytorch_tanh(gate_proj) * up_proj
    .position = PositionKind::kRotary,
    .position_offset = 0,
    .layout = WeightLayout::kOutIn,
    .qkv = QkvLayout::kSeparate,
    .embedding_norm = false,
    .embedding_scaled = true,
    .norm_adds_one = true,
    .sublayer_post_norms = false,
    .optional_prefix = "",
};

constexpr ArchTraits kGemma2Traits = {
    .architecture = Architecture::kGemma2,
    .name = "gemma2",
    .norm = NormKind::kRms,
    .activation = Activation::kGeGlu,
    .position = PositionKind::kRotary,
    .position_offset = 0,
    .layout = WeightLayout::kOutIn,
    .qkv = QkvLayout::kSeparate,
    .embedding_norm = false,
    .embedding_scaled = true,
    .norm_adds_one = true,
    .sublayer_post_norms = true,
    .optional_prefix = "",
};

}  // namespace

const ArchTraits& TraitsOf(Architecture architecture) {
  switch (architecture) {
    case Architecture::kLlama:
      return kLlamaTraits;
    case Architecture::kGpt2:
      return kGpt2Traits;
    case Architecture::kBloom:
      return kBloomTraits;
    case Architecture::kOpt:
      return kOptTraits;
    case Architecture::kGptNeox:
      return kGptNeoxTraits;
    case Architecture::kPhi3:
      return kPhi3Traits;
    case Architecture::kGemma:
      return kGemmaTraits;
    case Architecture::kGemma2:
      return kGemma2Traits;
  }
  std::abort();  // every enumerator is handled above (-Wswitch checks)
}

std::vector<float> AlibiSlopes(int64_t num_heads) {
  // In double, from exact powers of two: HF computes base^k in float32 from the same bases.
  int64_t n = 1;
  while (n * 2 <= num_heads) n *= 2;
  std::vector<float> slopes;
  const double base = std::exp2(-8.0 / static_cast<double>(n));
  for (int64_t k = 1; k <= n; ++k) slopes.push_back(static_cast<float>(std::pow(base, k)));
  const double extra_base = std::exp2(-4.0 / static_cast<double>(n));  // the sequence for 2n
  for (int64_t k = 1; static_cast<int64_t>(slopes.size()) < num_heads; k += 2) {
    slopes.push_back(static_cast<float>(std::pow(extra_base, k)));
  }
  return slopes;
}

}  // namespace manyshot

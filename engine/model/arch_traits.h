// What the forward pass needs to know about an architecture, as data: one ArchTraits row per
// Architecture (after llama.cpp's per-architecture tables). The forward pass branches on these
// fields, never on the architecture itself, so a new decoder family is a traits row, a tensor
// table (tensor_names.h) and a config parser (model_config.cc), plus at most a new op.
//
// Properties that vary between checkpoints of one family live in ModelConfig instead: tied head,
// biases, pre/post-LN (OPT's do_layer_norm_before), GQA.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "engine/core/backend.h"
#include "engine/model/model_config.h"

namespace manyshot {

enum class NormKind : uint8_t {
  kRms = 0,    // x / rms(x) * w (Llama)
  kLayer = 1,  // (x - mean) / std * w + b (GPT-2, BLOOM, OPT)
};

// The MLP between the up and the down projection.
enum class Activation : uint8_t {
  kSwiGlu = 0,    // silu(gate) * up: the up projection is gate | up (Llama)
  kGeluTanh = 1,  // GPT-2 gelu_new, BLOOM bloom_gelu (the same tanh approximation)
  kRelu = 2,      // OPT
  kGeluErf = 3,   // GPT-NeoX "gelu": x * Phi(x), the exact (erf) GELU
  kGeGlu = 4,     // gelu_tanh(gate) * up: the up projection is gate | up (Gemma)
};

// Whether the up projection is gate | up, the activation multiplying them (SwiGLU, GeGLU).
constexpr bool IsGated(Activation activation) {
  return activation == Activation::kSwiGlu || activation == Activation::kGeGlu;
}

// How a token's position id enters the model.
enum class PositionKind : uint8_t {
  kRotary = 0,   // rotate-half RoPE on q and k (Llama)
  kLearned = 1,  // a learned table added to the embeddings; row = position id + position_offset
  kAlibi = 2,    // a per-head linear bias on the attention logits: slope * (key pos - query pos)
};

// How the query/key/value projection is stored.
enum class QkvLayout : uint8_t {
  kSeparate = 0,      // three tensors (ATTN_Q, ATTN_K, ATTN_V), fused at load time
  kFused = 1,         // one tensor, output units q | k | v (GPT-2 c_attn)
  kFusedPerHead = 2,  // one tensor, output units per head [q_h | k_h | v_h] (BLOOM, GPT-NeoX),
                      // reordered to q | k | v at load time; [out, in] layouts only
};

struct ArchTraits {
  Architecture architecture;
  std::string_view name;  // for messages
  NormKind norm;
  Activation activation;
  PositionKind position;
  int64_t position_offset;  // kLearned: rows of the table before position 0 (OPT: 2)
  WeightLayout layout;      // of every projection weight (the lm head is always [V, H])
  QkvLayout qkv;
  bool embedding_norm;  // a norm right after the token embedding (BLOOM)
  // Embeddings multiplied by sqrt(hidden_size), rounded to the activations' dtype (Gemma).
  bool embedding_scaled;
  // RMSNorm multiplies by (1 + w): the checkpoint stores w - 1 (Gemma); held as 1 + w.
  bool norm_adds_one;
  // Each sublayer's output is normed again before the residual add (Gemma 2's
  // post_attention_layernorm and post_feedforward_layernorm; its FFN norm is then
  // pre_feedforward_layernorm).
  bool sublayer_post_norms;
  // Checkpoints may prefix every tensor name with this (GPT-2 and BLOOM state dicts saved through
  // *LMHeadModel / *ForCausalLM add "transformer.", OPT's "model."); tables hold the names
  // without it and lookups accept both spellings.
  std::string_view optional_prefix;
};

// The row of `architecture`.
const ArchTraits& TraitsOf(Architecture architecture);

// The ALiBi slope of every head as BLOOM computes them (HF build_alibi_tensor): the geometric
// sequence 2^(-8/n), 2^(-16/n), ... for the largest power of two n <= num_heads, then for the
// remaining heads the odd powers of the sequence for 2n.
std::vector<float> AlibiSlopes(int64_t num_heads);

}  // namespace manyshot

#include "engine/transformer/forward_pass.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/allocate_all.h"
#include "engine/core/dtype.h"
#include "engine/core/status_macros.h"
#include "engine/transformer/forward_input_checks.h"

namespace manyshot {
namespace {

// Projection weights as held (LayerWeights).
constexpr WeightLayout kHeld = WeightLayout::kOutIn;

// `value` rounded to `dtype` and back: HF multiplies Gemma's embeddings by sqrt(hidden_size) as a
// tensor of the activations' dtype.
float RoundedTo(DType dtype, float value) {
  switch (dtype) {
    case DType::kBF16:
      return BF16ToF32(F32ToBF16(value));
    case DType::kF16:
      return F16ToF32(F32ToF16(value));
    default:
      return value;
  }
}

// cap * tanh(v / cap) on every value (Gemma 2's final_logit_softcapping).
void SoftCap(float cap, std::vector<float>& values) {
  for (float& v : values) v = cap * std::tanh(v / cap);
}

// The position checks of one token: learned tables end at max_position_embeddings, and past the
// sliding window attention would have to hide keys (refused, never silently widened).
absl::Status CheckPosition(const ModelConfig& c, size_t s, size_t i, int32_t p) {
  const bool learned = TraitsOf(c.architecture).position == PositionKind::kLearned;
  if (p < 0 || (learned && p >= c.max_position_embeddings)) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " token ", i, ": position ", p,
                                                   " is outside [0, ", c.max_position_embeddings,
                                                   ") for this model"));
  }
  if (c.sliding_window > 0 && p >= c.sliding_window) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " token ", i, ": position ", p,
                                                   " is outside [0, ", c.sliding_window,
                                                   "), the model's sliding attention window"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FlatBatch> FlattenBatch(absl::Span<const ForwardSequence> sequences,
                                       const ModelConfig& c) {
  FlatBatch batch;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const ForwardSequence& seq = sequences[s];
    if (seq.cache == nullptr) return absl::InvalidArgumentError("sequence without a KV cache");
    if (seq.positions.size() != seq.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": ", seq.tokens.size(),
                                                     " tokens but ", seq.positions.size(),
                                                     " positions"));
    }
    const std::string what = absl::StrCat("sequence ", s);
    if (absl::Status ids_ok = CheckTokenIds(seq.tokens, c.vocab_size, what); !ids_ok.ok()) {
      return ids_ok;
    }
    batch.begins.push_back(batch.tokens());
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      if (absl::Status ok = CheckPosition(c, s, i, seq.positions[i]); !ok.ok()) return ok;
    }
    const absl::Status rows_ok =
        CheckLogitRows(seq.logit_rows, static_cast<int64_t>(seq.tokens.size()), what);
    if (!rows_ok.ok()) return rows_ok;
    for (int64_t r : seq.logit_rows) {
      batch.logit_rows.push_back(static_cast<int32_t>(batch.begins.back() + r));
    }
    batch.ids.insert(batch.ids.end(), seq.tokens.begin(), seq.tokens.end());
    batch.positions.insert(batch.positions.end(), seq.positions.begin(), seq.positions.end());
    auto reserved = seq.cache->Reserve(static_cast<int64_t>(seq.tokens.size()));
    if (!reserved.ok()) return reserved;
  }
  return batch;
}

ForwardPass::ForwardPass(Backend& backend, const ModelConfig& config, const ModelWeights& weights,
                         DType compute_dtype, absl::Span<const ForwardSequence> sequences,
                         const FlatBatch& batch, const ContextKv* context)
    : b_(backend),
      c_(config),
      traits_(TraitsOf(config.architecture)),
      weights_(weights),
      dt_(compute_dtype),
      sequences_(sequences),
      batch_(batch),
      context_(context),
      attn_seqs_(sequences.size()) {}

absl::Status ForwardPass::Allocate() {
  const int64_t T = batch_.tokens(), H = c_.hidden_size, D = c_.head_dim;
  const int64_t I = c_.intermediate_size, heads = c_.num_heads, kv_heads = c_.num_kv_heads;
  const bool gated = IsGated(traits_.activation);
  // Every activation of the pass, allocated up front so out-of-memory fails before any work.
  std::vector<TensorAllocation> shapes = {{&x_, dt_, {T, H}},
                                          {&h_, dt_, {T, H}},
                                          {&qkv_, dt_, {T, (heads + 2 * kv_heads) * D}},
                                          {&q_, dt_, {T, heads, D}},
                                          {&k_, dt_, {T, kv_heads, D}},
                                          {&v_, dt_, {T, kv_heads, D}},
                                          {&attn_, dt_, {T, heads, D}},
                                          {&up_, dt_, {T, gated ? 2 * I : I}},
                                          {&id_t_, DType::kI32, {T}},
                                          {&pos_t_, DType::kI32, {T}}};
  if (gated) shapes.push_back({&act_, dt_, {T, I}});
  // Parallel residual: the MLP's input and output while h holds the attention's output; post
  // norms: a sublayer's normed output.
  if (c_.parallel_residual || traits_.sublayer_post_norms) {
    shapes.push_back({&aux_, dt_, {T, H}});
  }
  const int64_t R = static_cast<int64_t>(batch_.logit_rows.size());
  if (R > 0) {
    shapes.push_back({&rows_t_, DType::kI32, {R}});
    shapes.push_back({&picked_, dt_, {R, H}});
    shapes.push_back({&normed_, dt_, {R, H}});
    shapes.push_back({&logits_, DType::kF32, {R, c_.vocab_size}});
  }
  MANYSHOT_RETURN_IF_ERROR(AllocateAll(b_, shapes));
  if (!gated) act_ = up_;  // the activation runs in place
  return absl::OkStatus();
}

void ForwardPass::UploadIndices() {
  // Index arguments go to the device once per pass.
  b_.CopyFromHost(batch_.ids.data(), id_t_);
  b_.CopyFromHost(batch_.positions.data(), pos_t_);
  if (rows_t_.defined()) b_.CopyFromHost(batch_.logit_rows.data(), rows_t_);
}

void ForwardPass::BuildNorm(const Tensor& in, const Tensor& weight, const Tensor& bias,
                            const Tensor& out) {
  if (traits_.norm == NormKind::kRms) {
    b_.RmsNorm(in, weight, c_.norm_eps, out);
  } else {
    b_.LayerNorm(in, weight, bias, c_.norm_eps, out);
  }
}

void ForwardPass::BuildAddNorm(const Tensor& weight, const Tensor& bias) {
  if (traits_.norm == NormKind::kRms) {
    b_.AddRmsNorm(x_, h_, weight, c_.norm_eps, h_);
  } else {
    b_.AddLayerNorm(x_, h_, weight, bias, c_.norm_eps, h_);
  }
}

void ForwardPass::BuildEmbeddings() {
  b_.Embedding(id_t_, weights_.embed, x_, /*accumulate=*/false);
  if (traits_.embedding_scaled) {
    b_.Scale(x_, RoundedTo(dt_, std::sqrt(static_cast<float>(c_.hidden_size))));
  }
  if (traits_.position == PositionKind::kLearned) {
    b_.Embedding(pos_t_, weights_.positions, x_, /*accumulate=*/true);
  }
  if (traits_.embedding_norm) {
    BuildNorm(x_, weights_.embed_norm_w, weights_.embed_norm_b, h_);
    std::swap(x_, h_);
  }
  if (weights_.alibi_slopes.defined()) {  // the new keys' positions, read by every layer
    for (size_t s = 0; s < sequences_.size(); ++s) {
      const int64_t n = static_cast<int64_t>(sequences_[s].tokens.size());
      sequences_[s].cache->WritePositions(pos_t_.Rows(batch_.begins[s], batch_.begins[s] + n));
    }
  }
}

void ForwardPass::BuildAttention(size_t l, const LayerWeights& w, const Tensor& in,
                                 const Tensor& out) {
  const int64_t T = batch_.tokens(), heads = c_.num_heads, D = c_.head_dim;
  b_.Linear(in, w.qkv_w, kHeld, w.qkv_b, qkv_);
  b_.SplitQkv(qkv_, q_, k_, v_);
  if (traits_.position == PositionKind::kRotary) {
    b_.Rope(q_, pos_t_, weights_.rope);
    b_.Rope(k_, pos_t_, weights_.rope);
  }
  const int64_t layer = static_cast<int64_t>(l);
  for (size_t s = 0; s < sequences_.size(); ++s) {
    const ForwardSequence& seq = sequences_[s];
    const int64_t begin = batch_.begins[s], n = static_cast<int64_t>(seq.tokens.size());
    seq.cache->Write(layer, k_.Rows(begin, begin + n), v_.Rows(begin, begin + n));
    AttentionSequence& a = attn_seqs_[s];
    a.q_begin = begin;
    a.q_len = n;
    a.k = &seq.cache->k(layer);
    a.v = &seq.cache->v(layer);
    a.kv_len = seq.cache->length() + n;
    a.own_log_weight = seq.own_log_weight;
    a.weighted_from = seq.weighted_from;
    a.context_from = seq.context_from;
    a.logit_softcap = c_.attn_logit_softcap;
    if (weights_.alibi_slopes.defined()) {
      a.alibi_slopes = &weights_.alibi_slopes;
      a.positions = &seq.cache->positions();
    }
  }
  AttentionContext ctx;
  if (context_ != nullptr) {
    ctx.k = &context_->k[l];
    ctx.v = &context_->v[l];
    ctx.len = context_->len;
    ctx.log_weight = context_->log_weight;
    if (context_->positions.defined()) ctx.positions = &context_->positions;
  }
  const float scale = 1.0f / std::sqrt(c_.query_pre_attn_scalar > 0.0f ? c_.query_pre_attn_scalar
                                                                       : static_cast<float>(D));
  b_.Attention(q_, attn_seqs_, context_ ? &ctx : nullptr, scale, attn_, Tensor());
  b_.Linear(attn_.Reshape({T, heads * D}), w.o_w, kHeld, w.o_b, out);
}

void ForwardPass::BuildFfn(const LayerWeights& w, const Tensor& in, const Tensor& out) {
  // GELU (tanh) and ReLU run in the up projection's GEMM where the backend can fuse them.
  switch (traits_.activation) {
    case Activation::kSwiGlu:
      b_.Linear(in, w.up_w, kHeld, w.up_b, up_);
      b_.SwiGlu(up_, act_);
      break;
    case Activation::kGeluTanh:
      b_.LinearActivation(in, w.up_w, kHeld, w.up_b, GemmActivation::kGeluTanh, up_);
      break;
    case Activation::kRelu:
      b_.LinearActivation(in, w.up_w, kHeld, w.up_b, GemmActivation::kRelu, up_);
      break;
    case Activation::kGeluErf:
      b_.Linear(in, w.up_w, kHeld, w.up_b, up_);
      b_.GeluErf(up_);
      break;
    case Activation::kGeGlu:
      b_.Linear(in, w.up_w, kHeld, w.up_b, up_);
      b_.GeGlu(up_, act_);
      break;
  }
  b_.Linear(act_, w.down_w, kHeld, w.down_b, out);
}

void ForwardPass::BuildSequentialBlock(size_t l, const LayerWeights& w) {
  if (c_.pre_norm) {
    // Each residual add runs fused with the norm that reads its sum; the block's last add waits
    // for the next block's first norm (or Enqueue's end).
    if (pending_residual_) {
      BuildAddNorm(w.attn_norm_w, w.attn_norm_b);
    } else {
      BuildNorm(x_, w.attn_norm_w, w.attn_norm_b, h_);
    }
    BuildAttention(l, w, h_, h_);
    BuildAddNorm(w.mlp_norm_w, w.mlp_norm_b);
    BuildFfn(w, h_, h_);
    pending_residual_ = true;
    return;
  }
  // Post-LN: the residual sum x is normed into h, which becomes the new x.
  auto post_norm = [&](const Tensor& weight, const Tensor& bias) {
    if (c_.pre_norm) return;
    BuildNorm(x_, weight, bias, h_);
    std::swap(x_, h_);
  };
  if (c_.pre_norm) BuildNorm(x_, w.attn_norm_w, w.attn_norm_b, h_);
  BuildAttention(l, w, c_.pre_norm ? h_ : x_, h_);
  b_.Add(x_, h_);
  post_norm(w.attn_norm_w, w.attn_norm_b);
  if (c_.pre_norm) BuildNorm(x_, w.mlp_norm_w, w.mlp_norm_b, h_);
  BuildFfn(w, c_.pre_norm ? h_ : x_, h_);
  b_.Add(x_, h_);
  post_norm(w.mlp_norm_w, w.mlp_norm_b);
}

void ForwardPass::BuildParallelBlock(size_t l, const LayerWeights& w) {
  // Both sublayers read the block's input x: x + attn(ln1(x)) + mlp(ln2(x)).
  BuildNorm(x_, w.attn_norm_w, w.attn_norm_b, h_);
  BuildAttention(l, w, h_, h_);  // q|k|v has read h before the output projection writes it
  BuildNorm(x_, w.mlp_norm_w, w.mlp_norm_b, aux_);
  BuildFfn(w, aux_, aux_);  // the up projection has read its input before down writes
  b_.Add(x_, h_);
  b_.Add(x_, aux_);
}

void ForwardPass::BuildPostNormBlock(size_t l, const LayerWeights& w) {
  // x + norm(attn(norm(x))), then the same with the MLP (Gemma 2).
  BuildNorm(x_, w.attn_norm_w, w.attn_norm_b, h_);
  BuildAttention(l, w, h_, h_);
  BuildNorm(h_, w.attn_post_norm_w, Tensor(), aux_);
  b_.Add(x_, aux_);
  BuildNorm(x_, w.mlp_norm_w, w.mlp_norm_b, h_);
  BuildFfn(w, h_, h_);
  BuildNorm(h_, w.ffn_post_norm_w, Tensor(), aux_);
  b_.Add(x_, aux_);
}

void ForwardPass::BuildLogits() {
  if (!logits_.defined()) return;
  b_.GatherRows(x_, rows_t_, picked_);
  const Tensor* normed = &picked_;  // post-LN: the last layer's output is normed already
  if (weights_.final_norm_w.defined()) {
    BuildNorm(picked_, weights_.final_norm_w, weights_.final_norm_b, normed_);
    normed = &normed_;
  }
  b_.Linear(*normed, weights_.lm_head, kHeld, Tensor(), logits_);
}

absl::Status ForwardPass::Collect(ForwardResult& result) {
  if (!logits_.defined()) return b_.Synchronize();
  result.logits.resize(static_cast<size_t>(logits_.numel()));
  MANYSHOT_RETURN_IF_ERROR(b_.CopyToHost(logits_, result.logits.data()));
  if (c_.final_logit_softcap > 0.0f) SoftCap(c_.final_logit_softcap, result.logits);
  return absl::OkStatus();
}

void ForwardPass::Enqueue() {
  BuildEmbeddings();
  for (size_t l = 0; l < weights_.layers.size(); ++l) {
    const LayerWeights& w = weights_.layers[l];
    if (c_.parallel_residual) {
      BuildParallelBlock(l, w);
    } else if (traits_.sublayer_post_norms) {
      BuildPostNormBlock(l, w);
    } else {
      BuildSequentialBlock(l, w);
    }
  }
  if (pending_residual_) b_.Add(x_, h_);
  pending_residual_ = false;
  BuildLogits();
}

absl::Status ForwardPass::Run(ForwardResult& result) {
  const bool alibi = weights_.alibi_slopes.defined();
  if (alibi && context_ != nullptr && context_->len > 0 && !context_->positions.defined()) {
    return absl::FailedPreconditionError(
        "this model uses ALiBi, which needs the context keys' position ids, and the context has "
        "none (re-encode it)");
  }
  MANYSHOT_RETURN_IF_ERROR(Allocate());
  UploadIndices();
  Enqueue();
  for (const ForwardSequence& seq : sequences_) {
    seq.cache->Advance(static_cast<int64_t>(seq.tokens.size()));
  }
  return Collect(result);
}

}  // namespace manyshot

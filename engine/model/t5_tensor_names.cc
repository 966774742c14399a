#include "engine/model/t5_tensor_names.h"

namespace manyshot {
namespace {

using R = T5Role;
using S = T5Stack;
using W = T5RowWhen;

// Names from transformers' T5ForConditionalGeneration state dict.
constexpr T5TensorRow kTable[] = {
    {S::kShared, R::kTokenEmbd, false, W::kAlways, "shared.weight"},
    {S::kEncoder, R::kAttnRelBias, false, W::kAlways,
     "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"},
    {S::kEncoder, R::kAttnNorm, true, W::kAlways, "encoder.block.{}.layer.0.layer_norm.weight"},
    {S::kEncoder, R::kAttnQ, true, W::kAlways, "encoder.block.{}.layer.0.SelfAttention.q.weight"},
    {S::kEncoder, R::kAttnK, true, W::kAlways, "encoder.block.{}.layer.0.SelfAttention.k.weight"},
    {S::kEncoder, R::kAttnV, true, W::kAlways, "encoder.block.{}.layer.0.SelfAttention.v.weight"},
    {S::kEncoder, R::kAttnOut, true, W::kAlways, "encoder.block.{}.layer.0.SelfAttention.o.weight"},
    {S::kEncoder, R::kFfnNorm, true, W::kAlways, "encoder.block.{}.layer.1.layer_norm.weight"},
    {S::kEncoder, R::kFfnUp, true, W::kRelu, "encoder.block.{}.layer.1.DenseReluDense.wi.weight"},
    {S::kEncoder, R::kFfnGate, true, W::kGated,
     "encoder.block.{}.layer.1.DenseReluDense.wi_0.weight"},
    {S::kEncoder, R::kFfnUp, true, W::kGated,
     "encoder.block.{}.layer.1.DenseReluDense.wi_1.weight"},
    {S::kEncoder, R::kFfnDown, true, W::kAlways,
     "encoder.block.{}.layer.1.DenseReluDense.wo.weight"},
    {S::kEncoder, R::kOutputNorm, false, W::kAlways, "encoder.final_layer_norm.weight"},
    {S::kDecoder, R::kAttnRelBias, false, W::kAlways,
     "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"},
    {S::kDecoder, R::kAttnNorm, true, W::kAlways, "decoder.block.{}.layer.0.layer_norm.weight"},
    {S::kDecoder, R::kAttnQ, true, W::kAlways, "decoder.block.{}.layer.0.SelfAttention.q.weight"},
    {S::kDecoder, R::kAttnK, true, W::kAlways, "decoder.block.{}.layer.0.SelfAttention.k.weight"},
    {S::kDecoder, R::kAttnV, true, W::kAlways, "decoder.block.{}.layer.0.SelfAttention.v.weight"},
    {S::kDecoder, R::kAttnOut, true, W::kAlways, "decoder.block.{}.layer.0.SelfAttention.o.weight"},
    {S::kDecoder, R::kCrossNorm, true, W::kAlways, "decoder.block.{}.layer.1.layer_norm.weight"},
    {S::kDecoder, R::kCrossQ, true, W::kAlways,
     "decoder.block.{}.layer.1.EncDecAttention.q.weight"},
    {S::kDecoder, R::kCrossK, true, W::kAlways,
     "decoder.block.{}.layer.1.EncDecAttention.k.weight"},
    {S::kDecoder, R::kCrossV, true, W::kAlways,
     "decoder.block.{}.layer.1.EncDecAttention.v.weight"},
    {S::kDecoder, R::kCrossOut, true, W::kAlways,
     "decoder.block.{}.layer.1.EncDecAttention.o.weight"},
    {S::kDecoder, R::kFfnNorm, true, W::kAlways, "decoder.block.{}.layer.2.layer_norm.weight"},
    {S::kDecoder, R::kFfnUp, true, W::kRelu, "decoder.block.{}.layer.2.DenseReluDense.wi.weight"},
    {S::kDecoder, R::kFfnGate, true, W::kGated,
     "decoder.block.{}.layer.2.DenseReluDense.wi_0.weight"},
    {S::kDecoder, R::kFfnUp, true, W::kGated,
     "decoder.block.{}.layer.2.DenseReluDense.wi_1.weight"},
    {S::kDecoder, R::kFfnDown, true, W::kAlways,
     "decoder.block.{}.layer.2.DenseReluDense.wo.weight"},
    {S::kDecoder, R::kOutputNorm, false, W::kAlways, "decoder.final_layer_norm.weight"},
    {S::kShared, R::kOutput, false, W::kUntied, "lm_head.weight"},
};

constexpr std::string_view kTokenEmbeddingNames[] = {"shared.weight", "encoder.embed_tokens.weight",
                                                     "decoder.embed_tokens.weight"};

// The row's name with "{}" replaced by the block index.
std::string BlockName(std::string_view pattern, int64_t block) {
  std::string name(pattern);
  const size_t at = name.find("{}");
  if (at != std::string::npos) name.replace(at, 2, std::to_string(block));
  return name;
}

bool Applies(const T5Config& c, T5RowWhen when) {
  switch (when) {
    case W::kAlways:
      return true;
    case W::kRelu:
      return c.feed_forward == T5FeedForward::kRelu;
    case W::kGated:
      return c.feed_forward == T5FeedForward::kGatedGelu;
    case W::kUntied:
      return !c.tie_word_embeddings;
  }
  return false;
}

std::vector<int64_t> Shape(const T5Config& c, T5Role role) {
  const int64_t d = c.d_model, inner = c.inner_dim();
  switch (role) {
    case R::kTokenEmbd:
    case R::kOutput:
      return {c.vocab_size, d};
    case R::kAttnNorm:
    case R::kCrossNorm:
    case R::kFfnNorm:
    case R::kOutputNorm:
      return {d};
    case R::kAttnQ:
    case R::kAttnK:
    case R::kAttnV:
    case R::kCrossQ:
    case R::kCrossK:
    case R::kCrossV:
      return {inner, d};
    case R::kAttnOut:
    case R::kCrossOut:
      return {d, inner};
    case R::kAttnRelBias:
      return {c.relative_attention_num_buckets, c.num_heads};
    case R::kFfnUp:
    case R::kFfnGate:
      return {c.d_ff, d};
    case R::kFfnDown:
      return {d, c.d_ff};
  }
  return {};
}

}  // namespace

absl::Span<const T5TensorRow> T5TensorTable() { return kTable; }

absl::Span<const std::string_view> T5TokenEmbeddingNames() { return kTokenEmbeddingNames; }

std::vector<T5Tensor> T5ExpectedTensors(const T5Config& c) {
  std::vector<T5Tensor> out;
  for (const T5TensorRow& row : kTable) {
    if (!Applies(c, row.when)) continue;
    if (!row.per_block) {
      out.push_back({std::string(row.name), Shape(c, row.role), row.stack, row.role, -1});
      continue;
    }
    const int64_t blocks = row.stack == S::kEncoder ? c.num_layers : c.num_decoder_layers;
    for (int64_t b = 0; b < blocks; ++b) {
      out.push_back({BlockName(row.name, b), Shape(c, row.role), row.stack, row.role, b});
    }
  }
  return out;
}

}  // namespace manyshot

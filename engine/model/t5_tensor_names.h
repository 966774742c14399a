// T5's checkpoint tensors as one role-keyed table (the style of tensor_names.h): the tiny-model
// writer, the loader (engine/t5/t5_model.cc) and the tests find every name and shape here.
// Roles carry tensor_names.h's names where the concept is the same (kTokenEmbd, kAttnQ, ...);
// the encoder-decoder adds the relative position bias table and cross-attention, and a row's
// stack says whether it belongs to the encoder or the decoder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/t5_config.h"

namespace manyshot {

enum class T5Stack : uint8_t { kShared, kEncoder, kDecoder };

enum class T5Role : uint8_t {
  kTokenEmbd,    // shared.weight [V, d_model], the encoder's and decoder's input embedding
  kAttnNorm,     // T5 LayerNorm (RMS, weight only) before self-attention [d_model]
  kAttnQ,        // [inner, d_model] (inner = num_heads * d_kv)
  kAttnK,        // [inner, d_model]
  kAttnV,        // [inner, d_model]
  kAttnOut,      // [d_model, inner]
  kAttnRelBias,  // relative position bias [num_buckets, num_heads]: block 0 only, all layers use it
  kCrossNorm,    // decoder: before cross-attention [d_model]
  kCrossQ,
  kCrossK,
  kCrossV,
  kCrossOut,
  kFfnNorm,     // before the feed-forward [d_model]
  kFfnUp,       // "relu": wi; "gated-gelu": wi_1 (the linear half) [d_ff, d_model]
  kFfnGate,     // "gated-gelu": wi_0 (through gelu_new) [d_ff, d_model]
  kFfnDown,     // wo [d_model, d_ff]
  kOutputNorm,  // {encoder,decoder}.final_layer_norm.weight [d_model]
  kOutput,      // lm_head.weight [V, d_model]; absent when tied to kTokenEmbd
};

// Which configs have a row's tensor.
enum class T5RowWhen : uint8_t { kAlways, kRelu, kGated, kUntied };

// One row: `name` holds "{}" where the block index goes for per-block tensors.
struct T5TensorRow {
  T5Stack stack;
  T5Role role;
  bool per_block;
  T5RowWhen when;
  std::string_view name;
};

// The table, in checkpoint order.
absl::Span<const T5TensorRow> T5TensorTable();

struct T5Tensor {
  std::string name;
  std::vector<int64_t> shape;
  T5Stack stack = T5Stack::kShared;
  T5Role role = T5Role::kTokenEmbd;
  int64_t block = -1;  // -1 for tensors outside the blocks
};

// Every tensor a checkpoint of `config` must hold, in table order, blocks expanded.
std::vector<T5Tensor> T5ExpectedTensors(const T5Config& config);

// Real checkpoints may spell the token embedding as a stack's own copy (save_pretrained keeps
// one of the tied tensors): the names accepted for kTokenEmbd, preferred first.
absl::Span<const std::string_view> T5TokenEmbeddingNames();

}  // namespace manyshot

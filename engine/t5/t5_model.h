// A T5 encoder-decoder on a Backend: loads a Hugging Face T5 directory (t5_config.h,
// t5_tensor_names.h) and runs the encoder over a batch of inputs, then the decoder, teacher-forced
// or token by token with a self-attention KV cache. Cross-attention keys/values are computed once
// per encoder output (T5EncoderOutput) and reused by every decoder step and every candidate that
// decodes against the same input.
//
// Semantics are transformers' T5ForConditionalGeneration: T5 LayerNorm (RMS, weight only, f32),
// no 1/sqrt(d) in attention, the relative position bias of block 0 shared by every layer of its
// stack (bidirectional in the encoder, causal in the decoder), none in cross-attention; logits
// rescaled by d_model^-0.5 when the head is tied to the embeddings. Attention goes through
// Backend::AttendBiased, whose bias argument is where a block mask (SAICL) fits later.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/backend.h"
#include "engine/model/t5_config.h"
#include "engine/transformer/kv_cache.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

// The encoder's result for a batch of inputs: what the decoder attends to.
struct T5EncoderOutput {
  std::vector<int64_t> begins, lengths;  // each input's rows of `states`
  Tensor states;                         // [T, d_model], after the final layer norm
  // Per decoder layer, the cross-attention keys/values of every row: [T, heads, d_kv].
  std::vector<Tensor> cross_k, cross_v;
  int64_t inputs() const { return static_cast<int64_t>(begins.size()); }
};

// One sequence of a decoder pass: its new tokens (the first pass of a sequence begins with
// decoder_start_token_id), appended to `cache`, attending to input `input` of `encoder`.
struct T5DecoderSequence {
  absl::Span<const int32_t> tokens;
  KvCache* cache = nullptr;
  const T5EncoderOutput* encoder = nullptr;
  int64_t input = 0;
  absl::Span<const int64_t> logit_rows;  // indices into tokens whose logits are wanted
};

// An encoder self-attention other than T5's own (SAICL's block structure, engine/t5/
// saicl_encoder.h): called in every encoder layer with that layer's q, k, v of all the batch's
// rows ([T, heads, d_kv], the inputs' rows back to back); writes (o, lse) of every row to `out`.
class T5EncoderAttention {
 public:
  virtual ~T5EncoderAttention() = default;
  virtual absl::Status Attend(const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionState& out) const = 0;
};

// The first encoder layer's fused q|k|v projection ([rows, 3 * inner]) of some tokens. It depends
// on the token ids only (the first layer reads their embeddings), so a caller that encodes the
// same tokens ahead of every query (a task's demonstrations) computes it once.
struct T5FirstLayerQkv {
  std::vector<int32_t> ids;
  Tensor qkv;
};

struct T5EncodeOptions {
  // nullptr: each input attends to itself with the bidirectional position bias (plain T5).
  const T5EncoderAttention* attention = nullptr;
  // When set, the batch's first ids.size() tokens must be exactly these ids; their first-layer
  // q|k|v are copied from here instead of computed.
  const T5FirstLayerQkv* first_layer = nullptr;
};

class T5Model {
 public:
  // Loads config.json and the safetensors weights (converted to the compute dtype). Errors name
  // the file and the key or tensor; a dtype the backend cannot compute in is INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<T5Model>> Load(const std::filesystem::path& model_dir,
                                                       Backend& backend,
                                                       TransformerOptions options = {});
  ~T5Model();

  const T5Config& config() const { return config_; }
  Backend& backend() const { return *backend_; }
  DType compute_dtype() const { return compute_dtype_; }
  DType kv_dtype() const { return kv_dtype_; }
  // Hex fingerprint of config and weights.
  const std::string& fingerprint() const { return fingerprint_; }

  // Runs the encoder over every input (token ids, each non-empty) and computes the decoder's
  // cross-attention K/V for them. INVALID_ARGUMENT names the input and index of a bad id.
  absl::StatusOr<T5EncoderOutput> Encode(absl::Span<const std::vector<int32_t>> inputs) const;
  // The same with another attention and/or precomputed first-layer q|k|v (see T5EncodeOptions).
  // INVALID_ARGUMENT when options.first_layer does not match the batch's first tokens.
  absl::StatusOr<T5EncoderOutput> Encode(absl::Span<const std::vector<int32_t>> inputs,
                                         const T5EncodeOptions& options) const;
  // The first encoder layer's q|k|v of `ids` (non-empty, in the vocabulary).
  absl::StatusOr<T5FirstLayerQkv> EncoderFirstLayerQkv(absl::Span<const int32_t> ids) const;
  // The encoder's relative position bias table, host [num_buckets, heads].
  absl::Span<const float> encoder_bias_table() const { return encoder_bias_table_; }

  // An empty decoder self-attention cache; `capacity` rows are allocated by the first pass.
  KvCache NewDecoderCache(int64_t capacity) const;

  // Runs every sequence's new tokens through the decoder (positions continue from its cache).
  // Returns the requested rows' logits (f32, [rows, vocab]) after the backend has finished.
  absl::StatusOr<ForwardResult> Decode(absl::Span<const T5DecoderSequence> sequences) const;

  // The encoder states of input `i` on the host, [length, d_model] row-major (tests, tools).
  absl::StatusOr<std::vector<float>> StatesToHost(const T5EncoderOutput& encoded, int64_t i) const;

 private:
  struct Block;
  T5Model() = default;
  absl::Status LoadWeights(const std::filesystem::path& model_dir);
  // The feed-forward sublayer (T5 LayerNorm, relu or gated-gelu MLP, residual add) of a block of
  // either stack.
  // One pass's activation buffers (both stacks use the same shapes), the token embeddings in x.
  struct Rows {
    Tensor x, h, qkv, q, k, v, attn, lse, up, act, ids;
  };
  absl::StatusOr<Rows> EmbedRows(const std::vector<int32_t>& ids) const;
  void FeedForward(const Block& w, const Tensor& x, const Tensor& h, const Tensor& up,
                   const Tensor& act) const;

  // Encode's steps. Flattens the inputs into one batch of ids (recording each input's rows in
  // `out`); INVALID_ARGUMENT names an empty input or a bad id.
  absl::StatusOr<std::vector<int32_t>> GatherEncoderBatch(
      absl::Span<const std::vector<int32_t>> inputs, T5EncoderOutput& out) const;
  // How many leading rows' first-layer q|k|v come from `first` (0 when null); INVALID_ARGUMENT
  // when they are not the batch's first tokens in this model's shape and dtype.
  absl::StatusOr<int64_t> CachedFirstLayerRows(const T5FirstLayerQkv* first,
                                               const std::vector<int32_t>& ids) const;
  // Plain T5 self-attention of every input: its rows of k/v and its length's position bias.
  struct EncoderSelfAttention {
    std::map<int64_t, Tensor> biases;
    std::vector<Tensor> k_rows, v_rows;
    std::vector<BiasedAttentionSequence> sequences;
  };
  absl::Status BuildEncoderSelfAttention(const T5EncoderOutput& out, const Rows& rows,
                                         EncoderSelfAttention& self) const;
  // Every encoder block over the batch, in place on rows.x.
  absl::Status EncoderLayers(const T5EncodeOptions& options, int64_t cached,
                             const EncoderSelfAttention& self, const Rows& rows) const;
  // Each decoder layer's cross-attention K/V of out.states.
  absl::Status CrossAttentionKv(T5EncoderOutput& out) const;

  // Decode's steps. The batch: every sequence's new tokens back to back, each sequence's first
  // row and cached length, and the rows whose logits are wanted.
  struct DecoderBatch {
    std::vector<int32_t> ids;
    std::vector<int64_t> begins, pasts;
    std::vector<int32_t> logit_rows;
  };
  // Checks every sequence (cache, encoder output, token ids, logit rows) and reserves its rows.
  absl::StatusOr<DecoderBatch> GatherDecoderBatch(
      absl::Span<const T5DecoderSequence> sequences) const;
  // One decoder block over the batch: causal self-attention (appending each sequence's K/V to its
  // cache; `self` holds each sequence's bias), cross-attention to its encoder input, feed-forward.
  void DecoderBlock(size_t layer, absl::Span<const T5DecoderSequence> sequences,
                    const DecoderBatch& batch, const Rows& rows,
                    std::vector<BiasedAttentionSequence>& self) const;
  // The final norm and LM head over the batch's logit rows, copied to the host.
  absl::Status DecoderLogits(const Tensor& x, const std::vector<int32_t>& logit_rows,
                             ForwardResult& result) const;

  Backend* backend_ = nullptr;
  T5Config config_;
  std::string fingerprint_;
  DType compute_dtype_ = DType::kF32;
  DType kv_dtype_ = DType::kF32;
  Tensor embed_;               // shared [V, d_model]
  Tensor lm_head_;             // [V, d_model] (== embed_ when tied)
  Tensor encoder_final_norm_;  // [d_model]
  Tensor decoder_final_norm_;  // [d_model]; times d_model^-0.5 when tied (T5's rescale)
  std::vector<float> encoder_bias_table_, decoder_bias_table_;  // host [buckets, heads]
  std::vector<std::unique_ptr<Block>> encoder_, decoder_;
};

}  // namespace manyshot

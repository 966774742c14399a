// Transformer::Forward's steps, the llama.cpp way: a pass over one flattened batch is built from
// shared steps (BuildNorm, BuildAttention, BuildFfn) that a block builder per residual scheme
// (sequential pre- or post-LN, parallel, post-sublayer norms) arranges; which builder and which
// norm, activation and position kind a family gets are rows of the tables in engine/model, never a
// branch on the family itself.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/backend.h"
#include "engine/model/arch_traits.h"
#include "engine/model/model_config.h"
#include "engine/transformer/model_weights.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

// The batch's sequences laid end to end: token ids and positions of every new token, where each
// sequence begins, and the flat rows whose logits are wanted.
struct FlatBatch {
  std::vector<int32_t> ids, positions;
  std::vector<int64_t> begins;
  std::vector<int32_t> logit_rows;
  int64_t tokens() const { return static_cast<int64_t>(ids.size()); }
};

// Validates every sequence (INVALID_ARGUMENT naming the sequence and token), reserves its cache
// rows and flattens the batch.
absl::StatusOr<FlatBatch> FlattenBatch(absl::Span<const ForwardSequence> sequences,
                                       const ModelConfig& config);

// One forward pass of a non-empty FlatBatch; Run queues it all and collects the result.
class ForwardPass {
 public:
  ForwardPass(Backend& backend, const ModelConfig& config, const ModelWeights& weights,
              DType compute_dtype, absl::Span<const ForwardSequence> sequences,
              const FlatBatch& batch, const ContextKv* context);

  // Fills result.logits (result.vocab_size set by the caller); the caches hold the new K/V.
  absl::Status Run(ForwardResult& result);

  // Run's steps, for a pass recorded once and replayed (forward_graphs.h): Allocate every tensor
  // of the pass, UploadIndices (the batch's ids, positions and logit rows to the device), Enqueue
  // the model's ops (no allocation of the pass's own, no host transfer: what a capture records),
  // and Collect the logits to the host (waits).
  absl::Status Allocate();
  void UploadIndices();
  void Enqueue();
  absl::Status Collect(ForwardResult& result);

 private:
  void BuildEmbeddings();
  // RMSNorm or LayerNorm (ArchTraits::norm) of in into out.
  void BuildNorm(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out);
  // x += h, then the norm of x into h: a residual add and the norm that reads its sum, one op.
  void BuildAddNorm(const Tensor& weight, const Tensor& bias);
  // Attention of layer l over in ([T, H]) into out ([T, H]): q|k|v, RoPE, the caches' new rows,
  // attention with the shared context, the output projection.
  void BuildAttention(size_t l, const LayerWeights& w, const Tensor& in, const Tensor& out);
  // The MLP: up (gate | up), activation, down.
  void BuildFfn(const LayerWeights& w, const Tensor& in, const Tensor& out);
  // Block builders (ModelConfig::pre_norm, ::parallel_residual): x becomes the block's output.
  void BuildSequentialBlock(size_t l, const LayerWeights& w);
  void BuildParallelBlock(size_t l, const LayerWeights& w);
  void BuildPostNormBlock(size_t l, const LayerWeights& w);  // ArchTraits::sublayer_post_norms
  // The final norm and the vocabulary projection of the requested rows into logits_ (f32).
  void BuildLogits();

  Backend& b_;
  const ModelConfig& c_;
  const ArchTraits& traits_;
  const ModelWeights& weights_;
  const DType dt_;
  absl::Span<const ForwardSequence> sequences_;
  const FlatBatch& batch_;
  const ContextKv* context_;
  // Activations: x the residual stream, h a sublayer's output; up/act the MLP's (act aliases up
  // when the activation runs in place); aux a second [T, H] for the parallel MLP and post norms.
  Tensor x_, h_, qkv_, q_, k_, v_, attn_, up_, act_, aux_, id_t_, pos_t_;
  // The logit rows: their indices, the rows gathered and normed, their logits.
  Tensor rows_t_, picked_, normed_, logits_;
  std::vector<AttentionSequence> attn_seqs_;
  // A pre-LN block's last residual add (x += h), left for the next block's first norm to fuse.
  bool pending_residual_ = false;
};

}  // namespace manyshot

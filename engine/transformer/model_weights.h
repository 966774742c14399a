// The tensors of a loaded decoder-only model, by role: what LoadModelWeights (weight_loader.h)
// fills and the forward pass (forward_pass.h) reads.
#pragma once

#include <vector>

#include "engine/core/rope_table.h"
#include "engine/core/tensor.h"

namespace manyshot {

// One block. Projection weights are held [out, in] (torch.nn.Linear's layout) for every family;
// GPT-2's Conv1D [in, out] checkpoints are transposed at load. Decode is bound by streaming these
// weights: on GPT-2-small's four shapes the CPU GEMV streamed [out, in] f32 and bf16 weights at
// 52-62 GB/s and [in, out] ones (several partial-sum rows updated per weight row) at 27-41 GB/s,
// with 2 threads on a machine whose plain read reached about 60 (engine/cpu/cpu_gemv.h).
struct LayerWeights {
  Tensor attn_norm_w, attn_norm_b;
  Tensor qkv_w, qkv_b;  // fused q | k | v
  Tensor o_w, o_b;
  Tensor mlp_norm_w, mlp_norm_b;
  Tensor up_w, up_b;  // gated (SwiGLU, GeGLU): fused gate | up; else the up projection alone
  Tensor down_w, down_b;
  // ArchTraits::sublayer_post_norms (RMSNorm, no bias): on each sublayer's output.
  Tensor attn_post_norm_w, ffn_post_norm_w;
};

struct ModelWeights {
  std::vector<LayerWeights> layers;
  Tensor embed;                       // [V, H]
  Tensor positions;                   // learned positions [P, H], row = position id
  Tensor embed_norm_w, embed_norm_b;  // ArchTraits::embedding_norm
  Tensor final_norm_w, final_norm_b;  // undefined for post-LN models
  Tensor lm_head;                     // [V, H] (== embed when tied)
  Tensor alibi_slopes;                // f32 [heads] for ALiBi models, else undefined
  RopeTable rope;                     // RoPE models: from the config's rope_scaling
};

}  // namespace manyshot

// Per-architecture tables of checkpoint tensors, keyed by role (after llama.cpp's llama-arch.cpp):
// the tiny-model writer, the loader (Transformer::LoadWeights) and the tests all find names and
// shapes here, and the forward pass reads weights by role, so a new family is a table, not a new
// code path.
//
// Names are the Hugging Face ones, without the architecture's optional prefix (ArchTraits::
// optional_prefix): openai-community/gpt2's model.safetensors has bare names
// ("h.0.attn.c_attn.weight") while GPT2LMHeadModel state dicts saved by transformers prefix them
// with "transformer."; FindModelTensor accepts either spelling.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"
#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

namespace manyshot {

// What a tensor is for, shared by every family.
enum class TensorRole : uint8_t {
  kTokenEmbd,      // [V, H]
  kPosEmbd,        // learned positions [max_position_embeddings + position_offset, H]
  kTokenEmbdNorm,  // a norm right after the embeddings (BLOOM)
  kAttnNorm,       // before (pre-LN) or after (post-LN) attention
  kAttnQ,
  kAttnK,
  kAttnV,
  kAttnQkv,  // q, k and v in one tensor (ArchTraits::qkv says in which order)
  kAttnOut,
  kAttnPostNorm,  // on the attention's output, before the residual add (Gemma 2)
  kFfnNorm,
  kFfnGate,
  kFfnUp,
  kFfnGateUp,  // gate and up in one tensor, output units gate | up (Phi-3's gate_up_proj)
  kFfnDown,
  kFfnPostNorm,  // on the MLP's output, before the residual add (Gemma 2)
  kOutputNorm,   // the final norm
  kOutput,       // the lm head [V, H]; absent when tied to kTokenEmbd
};

enum class TensorPart : uint8_t { kWeight, kBias };

// One row of an architecture's table. `name` holds "{}" where the layer index goes when the
// tensor is per layer.
struct TensorNameRow {
  TensorRole role;
  TensorPart part;
  std::string_view name;
};

// The table of `arch`, in checkpoint order (globals before the layers, per-layer tensors, globals
// after). It lists every tensor the family may have; HasTensor says which a config has.
absl::Span<const TensorNameRow> TensorTable(Architecture arch);

// Whether a checkpoint of `config` holds the tensor (its table has the row and the config enables
// it: biases, untied head, final norm of pre-LN models).
bool HasTensor(const ModelConfig& config, TensorRole role, TensorPart part);

// Whether the role is a norm's (weight [H], bias [H] for LayerNorm).
bool IsNorm(TensorRole role);

// Whether the role is a projection weight's (q, k, v, fused qkv, attention output, gate, up,
// down): the tensors ArchTraits::layout describes.
bool IsProjection(TensorRole role);

// The tensor's name (layer ignored for global tensors). The role must be in the table.
std::string TensorName(Architecture arch, TensorRole role, TensorPart part, int64_t layer = 0);

// Its shape in the checkpoint: projection weights [out, in] or [in, out] per ArchTraits::layout.
std::vector<int64_t> TensorShape(const ModelConfig& config, TensorRole role, TensorPart part);

struct ExpectedTensor {
  std::string name;  // canonical (without the optional prefix)
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::kTokenEmbd;
  TensorPart part = TensorPart::kWeight;
};

// Every tensor a checkpoint of `config` must hold, in table order (globals, then per layer).
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

// Looks `name` up, also under the alternative spelling the architecture allows.
const TensorInfo* FindModelTensor(const SafetensorsArchive& archive, Architecture arch,
                                  std::string_view name);

// ReadF32 through FindModelTensor's spellings.
absl::Status ReadModelTensorF32(const SafetensorsArchive& archive, Architecture arch,
                                std::string_view name, absl::Span<const int64_t> shape, float* dst);

}  // namespace manyshot

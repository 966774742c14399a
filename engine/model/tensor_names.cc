// Tensor tables; see tensor_names.h.
#include "engine/model/tensor_names.h"

#include <cstdlib>

#include "engine/model/arch_traits.h"

namespace manyshot {
namespace {

using R = TensorRole;
constexpr TensorPart W = TensorPart::kWeight;
constexpr TensorPart B = TensorPart::kBias;

// Llama / Mistral / Qwen2 (modeling_llama.py).
constexpr TensorNameRow kLlamaTable[] = {
    {R::kTokenEmbd, W, "model.embed_tokens.weight"},
    {R::kAttnNorm, W, "model.layers.{}.input_layernorm.weight"},
    {R::kAttnQ, W, "model.layers.{}.self_attn.q_proj.weight"},
    {R::kAttnK, W, "model.layers.{}.self_attn.k_proj.weight"},
    {R::kAttnV, W, "model.layers.{}.self_attn.v_proj.weight"},
    {R::kAttnOut, W, "model.layers.{}.self_attn.o_proj.weight"},
    {R::kAttnQ, B, "model.layers.{}.self_attn.q_proj.bias"},
    {R::kAttnK, B, "model.layers.{}.self_attn.k_proj.bias"},
    {R::kAttnV, B, "model.layers.{}.self_attn.v_proj.bias"},
    {R::kAttnOut, B, "model.layers.{}.self_attn.o_proj.bias"},
    {R::kFfnNorm, W, "model.layers.{}.post_attention_layernorm.weight"},
    {R::kFfnGate, W, "model.layers.{}.mlp.gate_proj.weight"},
    {R::kFfnUp, W, "model.layers.{}.mlp.up_proj.weight"},
    {R::kFfnDown, W, "model.layers.{}.mlp.down_proj.weight"},
    {R::kFfnGate, B, "model.layers.{}.mlp.gate_proj.bias"},
    {R::kFfnUp, B, "model.layers.{}.mlp.up_proj.bias"},
    {R::kFfnDown, B, "model.layers.{}.mlp.down_proj.bias"},
    {R::kOutputNorm, W, "model.norm.weight"},
    {R::kOutput, W, "lm_head.weight"},
};

// GPT-2 (modeling_gpt2.py). Conv1D weights are stored [in, out]; c_attn's output is q | k | v.
constexpr TensorNameRow kGpt2Table[] = {
    {R::kTokenEmbd, W, "wte.weight"},
    {R::kPosEmbd, W, "wpe.weight"},
    {R::kAttnNorm, W, "h.{}.ln_1.weight"},
    {R::kAttnNorm, B, "h.{}.ln_1.bias"},
    {R::kAttnQkv, W, "h.{}.attn.c_attn.weight"},
    {R::kAttnQkv, B, "h.{}.attn.c_attn.bias"},
    {R::kAttnOut, W, "h.{}.attn.c_proj.weight"},
    {R::kAttnOut, B, "h.{}.attn.c_proj.bias"},
    {R::kFfnNorm, W, "h.{}.ln_2.weight"},
    {R::kFfnNorm, B, "h.{}.ln_2.bias"},
    {R::kFfnUp, W, "h.{}.mlp.c_fc.weight"},
    {R::kFfnUp, B, "h.{}.mlp.c_fc.bias"},
    {R::kFfnDown, W, "h.{}.mlp.c_proj.weight"},
    {R::kFfnDown, B, "h.{}.mlp.c_proj.bias"},
    {R::kOutputNorm, W, "ln_f.weight"},
    {R::kOutputNorm, B, "ln_f.bias"},
};

// BLOOM (modeling_bloom.py). query_key_value's output units are per head [q_h | k_h | v_h].
constexpr TensorNameRow kBloomTable[] = {
    {R::kTokenEmbd, W, "word_embeddings.weight"},
    {R::kTokenEmbdNorm, W, "word_embeddings_layernorm.weight"},
    {R::kTokenEmbdNorm, B, "word_embeddings_layernorm.bias"},
    {R::kAttnNorm, W, "h.{}.input_layernorm.weight"},
    {R::kAttnNorm, B, "h.{}.input_layernorm.bias"},
    {R::kAttnQkv, W, "h.{}.self_attention.query_key_value.weight"},
    {R::kAttnQkv, B, "h.{}.self_attention.query_key_value.bias"},
    {R::kAttnOut, W, "h.{}.self_attention.dense.weight"},
    {R::kAttnOut, B, "h.{}.self_attention.dense.bias"},
    {R::kFfnNorm, W, "h.{}.post_attention_layernorm.weight"},
    {R::kFfnNorm, B, "h.{}.post_attention_layernorm.bias"},
    {R::kFfnUp, W, "h.{}.mlp.dense_h_to_4h.weight"},
    {R::kFfnUp, B, "h.{}.mlp.dense_h_to_4h.bias"},
    {R::kFfnDown, W, "h.{}.mlp.dense_4h_to_h.weight"},
    {R::kFfnDown, B, "h.{}.mlp.dense_4h_to_h.bias"},
    {R::kOutputNorm, W, "ln_f.weight"},
    {R::kOutputNorm, B, "ln_f.bias"},
    {R::kOutput, W, "lm_head.weight"},
};

// OPT (modeling_opt.py), word_embed_proj_dim == hidden_size (no project_in/out). Each layer's
// "final_layer_norm" is the norm of its MLP; the decoder's is the model's final norm (pre-LN only).
constexpr TensorNameRow kOptTable[] = {
    {R::kTokenEmbd, W, "decoder.embed_tokens.weight"},
    {R::kPosEmbd, W, "decoder.embed_positions.weight"},
    {R::kAttnNorm, W, "decoder.layers.{}.self_attn_layer_norm.weight"},
    {R::kAttnNorm, B, "decoder.layers.{}.self_attn_layer_norm.bias"},
    {R::kAttnQ, W, "decoder.layers.{}.self_attn.q_proj.weight"},
    {R::kAttnQ, B, "decoder.layers.{}.self_attn.q_proj.bias"},
    {R::kAttnK, W, "decoder.layers.{}.self_attn.k_proj.weight"},
    {R::kAttnK, B, "decoder.layers.{}.self_attn.k_proj.bias"},
    {R::kAttnV, W, "decoder.layers.{}.self_attn.v_proj.weight"},
    {R::kAttnV, B, "decoder.layers.{}.self_attn.v_proj.bias"},
    {R::kAttnOut, W, "decoder.layers.{}.self_attn.out_proj.weight"},
    {R::kAttnOut, B, "decoder.layers.{}.self_attn.out_proj.bias"},
    {R::kFfnNorm, W, "decoder.layers.{}.final_layer_norm.weight"},
    {R::kFfnNorm, B, "decoder.layers.{}.final_layer_norm.bias"},
    {R::kFfnUp, W, "decoder.layers.{}.fc1.weight"},
    {R::kFfnUp, B, "decoder.layers.{}.fc1.bias"},
    {R::kFfnDown, W, "decoder.layers.{}.fc2.weight"},
    {R::kFfnDown, B, "decoder.layers.{}.fc2.bias"},
    {R::kOutputNorm, W, "decoder.final_layer_norm.weight"},
    {R::kOutputNorm, B, "decoder.final_layer_norm.bias"},
    {R::kOutput, W, "lm_head.weight"},
};

// GPT-NeoX / Pythia (modeling_gpt_neox.py), GPTNeoXForCausalLM's names. query_key_value's output
// units are per head [q_h | k_h | v_h], as BLOOM's.
constexpr TensorNameRow kGptNeoxTable[] = {
    {R::kTokenEmbd, W, "gpt_neox.embed_in.weight"},
    {R::kAttnNorm, W, "gpt_neox.layers.{}.input_layernorm.weight"},
    {R::kAttnNorm, B, "gpt_neox.layers.{}.input_layernorm.bias"},
    {R::kAttnQkv, W, "gpt_neox.layers.{}.attention.query_key_value.weight"},
    {R::kAttnQkv, B, "gpt_neox.layers.{}.attention.query_key_value.bias"},
    {R::kAttnOut, W, "gpt_neox.layers.{}.attention.dense.weight"},
    {R::kAttnOut, B, "gpt_neox.layers.{}.attention.dense.bias"},
    {R::kFfnNorm, W, "gpt_neox.layers.{}.post_attention_layernorm.weight"},
    {R::kFfnNorm, B, "gpt_neox.layers.{}.post_attention_layernorm.bias"},
    {R::kFfnUp, W, "gpt_neox.layers.{}.mlp.dense_h_to_4h.weight"},
    {R::kFfnUp, B, "gpt_neox.layers.{}.mlp.dense_h_to_4h.bias"},
    {R::kFfnDown, W, "gpt_neox.layers.{}.mlp.dense_4h_to_h.weight"},
    {R::kFfnDown, B, "gpt_neox.layers.{}.mlp.dense_4h_to_h.bias"},
    {R::kOutputNorm, W, "gpt_neox.final_layer_norm.weight"},
    {R::kOutputNorm, B, "gpt_neox.final_layer_norm.bias"},
    {R::kOutput, W, "embed_out.weight"},
};

// Phi-3 (modeling_phi3.py): Llama's names with qkv_proj (q | k | v) and gate_up_proj (gate | up).
constexpr TensorNameRow kPhi3Table[] = {
    {R::kTokenEmbd, W, "model.embed_tokens.weight"},
    {R::kAttnNorm, W, "model.layers.{}.input_layernorm.weight"},
    {R::kAttnQkv, W, "model.layers.{}.self_attn.qkv_proj.weight"},
    {R::kAttnOut, W, "model.layers.{}.self_attn.o_proj.weight"},
    {R::kFfnNorm, W, "model.layers.{}.post_attention_layernorm.weight"},
    {R::kFfnGateUp, W, "model.layers.{}.mlp.gate_up_proj.weight"},
    {R::kFfnDown, W, "model.layers.{}.mlp.down_proj.weight"},
    {R::kOutputNorm, W, "model.norm.weight"},
    {R::kOutput, W, "lm_head.weight"},
};

// Gemma (modeling_gemma.py): Llama's names; no biases, the head tied in every published
// checkpoint.
constexpr TensorNameRow kGemmaTable[] = {
    {R::kTokenEmbd, W, "model.embed_tokens.weight"},
    {R::kAttnNorm, W, "model.layers.{}.input_layernorm.weight"},
    {R::kAttnQ, W, "model.layers.{}.self_attn.q_proj.weight"},
    {R::kAttnK, W, "model.layers.{}.self_attn.k_proj.weight"},
    {R::kAttnV, W, "model.layers.{}.self_attn.v_proj.weight"},
    {R::kAttnOut, W, "model.layers.{}.self_attn.o_proj.weight"},
    {R::kAttnQ, B, "model.layers.{}.self_attn.q_proj.bias"},
    {R::kAttnK, B, "model.layers.{}.self_attn.k_proj.bias"},
    {R::kAttnV, B, "model.layers.{}.self_attn.v_proj.bias"},
    {R::kAttnOut, B, "model.layers.{}.self_attn.o_proj.bias"},
    {R::kFfnNorm, W, "model.layers.{}.post_attention_layernorm.weight"},
    {R::kFfnGate, W, "model.layers.{}.mlp.gate_proj.weight"},
    {R::kFfnUp, W, "model.layers.{}.mlp.up_proj.weight"},
    {R::kFfnDown, W, "model.layers.{}.mlp.down_proj.weight"},
    {R::kOutputNorm, W, "model.norm.weight"},
    {R::kOutput, W, "lm_head.weight"},
};

// Gemma 2 (modeling_gemma2.py): post_attention_layernorm is the attention output's norm there, and
// pre_feedforward_layernorm the MLP's input norm.
constexpr TensorNameRow kGemma2Table[] = {
    {R::kTokenEmbd, W, "model.embed_tokens.weight"},
    {R::kAttnNorm, W, "model.layers.{}.input_layernorm.weight"},
    {R::kAttnQ, W, "model.layers.{}.self_attn.q_proj.weight"},
    {R::kAttnK, W, "model.layers.{}.self_attn.k_proj.weight"},
    {R::kAttnV, W, "model.layers.{}.self_attn.v_proj.weight"},
    {R::kAttnOut, W, "model.layers.{}.self_attn.o_proj.weight"},
    {R::kAttnQ, B, "model.layers.{}.self_attn.q_proj.bias"},
    {R::kAttnK, B, "model.layers.{}.self_attn.k_proj.bias"},
    {R::kAttnV, B, "model.layers.{}.self_attn.v_proj.bias"},
    {R::kAttnOut, B, "model.layers.{}.self_attn.o_proj.bias"},
    {R::kAttnPostNorm, W, "model.layers.{}.post_attention_layernorm.weight"},
    {R::kFfnNorm, W, "model.layers.{}.pre_feedforward_layernorm.weight"},
    {R::kFfnGate, W, "model.layers.{}.mlp.gate_proj.weight"},
    {R::kFfnUp, W, "model.layers.{}.mlp.up_proj.weight"},
    {R::kFfnDown, W, "model.layers.{}.mlp.down_proj.weight"},
    {R::kFfnPostNorm, W, "model.layers.{}.post_feedforward_layernorm.weight"},
    {R::kOutputNorm, W, "model.norm.weight"},
    {R::kOutput, W, "lm_head.weight"},
};

bool PerLayer(const TensorNameRow& row) { return row.name.find("{}") != std::string_view::npos; }

const TensorNameRow* FindRow(Architecture arch, TensorRole role, TensorPart part) {
  for (const TensorNameRow& row : TensorTable(arch)) {
    if (row.role == role && row.part == part) return &row;
  }
  return nullptr;
}

}  // namespace

bool IsNorm(TensorRole role) {
  return role == R::kTokenEmbdNorm || role == R::kAttnNorm || role == R::kAttnPostNorm ||
         role == R::kFfnNorm || role == R::kFfnPostNorm || role == R::kOutputNorm;
}

absl::Span<const TensorNameRow> TensorTable(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return kLlamaTable;
    case Architecture::kGpt2:
      return kGpt2Table;
    case Architecture::kBloom:
      return kBloomTable;
    case Architecture::kOpt:
      return kOptTable;
    case Architecture::kGptNeox:
      return kGptNeoxTable;
    case Architecture::kPhi3:
      return kPhi3Table;
    case Architecture::kGemma:
      return kGemmaTable;
    case Architecture::kGemma2:
      return kGemma2Table;
  }
  std::abort();  // every enumerator is handled above (-Wswitch checks)
}

bool HasTensor(const ModelConfig& c, TensorRole role, TensorPart part) {
  if (FindRow(c.architecture, role, part) == nullptr) return false;
  if (role == R::kOutput && c.tie_word_embeddings) return false;
  if (role == R::kOutputNorm && !c.pre_norm) return false;  // post-LN ends in a norm already
  if (part == W) return true;
  if (IsNorm(role)) return TraitsOf(c.architecture).norm == NormKind::kLayer;
  switch (role) {
    case R::kAttnQ:
    case R::kAttnK:
    case R::kAttnV:
    case R::kAttnQkv:
      return c.attention_bias;
    case R::kAttnOut:
      return c.attention_out_bias;
    case R::kFfnGate:
    case R::kFfnUp:
    case R::kFfnGateUp:
    case R::kFfnDown:
      return c.mlp_bias;
    default:
      return false;
  }
}

bool IsProjection(TensorRole role) {
  switch (role) {
    case R::kAttnQ:
    case R::kAttnK:
    case R::kAttnV:
    case R::kAttnQkv:
    case R::kAttnOut:
    case R::kFfnGate:
    case R::kFfnUp:
    case R::kFfnGateUp:
    case R::kFfnDown:
      return true;
    default:
      return false;
  }
}

std::string TensorName(Architecture arch, TensorRole role, TensorPart part, int64_t layer) {
  const TensorNameRow* row = FindRow(arch, role, part);
  if (row == nullptr) std::abort();  // a caller bug: HasTensor first
  if (!PerLayer(*row)) return std::string(row->name);
  std::string name(row->name);
  return name.replace(name.find("{}"), 2, std::to_string(layer));
}

std::vector<int64_t> TensorShape(const ModelConfig& c, TensorRole role, TensorPart part) {
  const ArchTraits& traits = TraitsOf(c.architecture);
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  if (IsNorm(role)) return {h};
  int64_t out = 0, in = h;
  switch (role) {
    case R::kTokenEmbd:
    case R::kOutput:
      return {c.vocab_size, h};
    case R::kPosEmbd:
      return {c.max_position_embeddings + traits.position_offset, h};
    case R::kAttnQ:
      out = q;
      break;
    case R::kAttnK:
    case R::kAttnV:
      out = kv;
      break;
    case R::kAttnQkv:
      out = q + 2 * kv;
      break;
    case R::kAttnOut:
      out = h;
      in = q;
      break;
    case R::kFfnGate:
    case R::kFfnUp:
      out = i;
      break;
    case R::kFfnGateUp:
      out = 2 * i;
      break;
    case R::kFfnDown:
      out = h;
      in = i;
      break;
    default:
      break;
  }
  if (part == B) return {out};
  return traits.layout == WeightLayout::kOutIn ? std::vector<int64_t>{out, in}
                                               : std::vector<int64_t>{in, out};
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  const absl::Span<const TensorNameRow> table = TensorTable(c.architecture);
  std::vector<ExpectedTensor> out;
  auto add = [&](const TensorNameRow& row, int64_t layer) {
    if (!HasTensor(c, row.role, row.part)) return;
    out.push_back({TensorName(c.architecture, row.role, row.part, layer),
                   TensorShape(c, row.role, row.part), row.role, row.part});
  };
  size_t r = 0;
  for (; r < table.size() && !PerLayer(table[r]); ++r) add(table[r], 0);
  const size_t layer_begin = r;
  while (r < table.size() && PerLayer(table[r])) ++r;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (size_t k = layer_begin; k < r; ++k) add(table[k], l);
  }
  for (; r < table.size(); ++r) add(table[r], 0);
  return out;
}

const TensorInfo* FindModelTensor(const SafetensorsArchive& archive, Architecture arch,
                                  std::string_view name) {
  if (const TensorInfo* t = archive.Find(name)) return t;
  const std::string_view prefix = TraitsOf(arch).optional_prefix;
  if (prefix.empty()) return nullptr;
  return archive.Find(std::string(prefix) + std::string(name));
}

absl::Status ReadModelTensorF32(const SafetensorsArchive& archive, Architecture arch,
                                std::string_view name, absl::Span<const int64_t> shape,
                                float* dst) {
  const TensorInfo* t = FindModelTensor(archive, arch, name);
  // Falls through to ReadF32 on the canonical name for absent tensors, for its error message.
  return archive.ReadF32(t != nullptr ? std::string_view(t->name) : name, shape, dst);
}

}  // namespace manyshot

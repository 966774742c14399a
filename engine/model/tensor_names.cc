// Tensor-name tables; see tensor_names.h.
#include "engine/model/tensor_names.h"

#include "absl/strings/str_cat.h"

namespace manyshot {

LlamaLayerNames LlamaLayer(int64_t layer) {
  const std::string p = absl::StrCat("model.layers.", layer, ".");
  LlamaLayerNames n;
  n.attn_norm = p + "input_layernorm.weight";
  n.q = p + "self_attn.q_proj.weight";
  n.k = p + "self_attn.k_proj.weight";
  n.v = p + "self_attn.v_proj.weight";
  n.o = p + "self_attn.o_proj.weight";
  n.q_bias = p + "self_attn.q_proj.bias";
  n.k_bias = p + "self_attn.k_proj.bias";
  n.v_bias = p + "self_attn.v_proj.bias";
  n.o_bias = p + "self_attn.o_proj.bias";
  n.mlp_norm = p + "post_attention_layernorm.weight";
  n.gate = p + "mlp.gate_proj.weight";
  n.up = p + "mlp.up_proj.weight";
  n.down = p + "mlp.down_proj.weight";
  n.gate_bias = p + "mlp.gate_proj.bias";
  n.up_bias = p + "mlp.up_proj.bias";
  n.down_bias = p + "mlp.down_proj.bias";
  return n;
}

Gpt2LayerNames Gpt2Layer(int64_t layer) {
  const std::string p = absl::StrCat("h.", layer, ".");
  Gpt2LayerNames n;
  n.ln_1_weight = p + "ln_1.weight";
  n.ln_1_bias = p + "ln_1.bias";
  n.c_attn_weight = p + "attn.c_attn.weight";
  n.c_attn_bias = p + "attn.c_attn.bias";
  n.attn_proj_weight = p + "attn.c_proj.weight";
  n.attn_proj_bias = p + "attn.c_proj.bias";
  n.ln_2_weight = p + "ln_2.weight";
  n.ln_2_bias = p + "ln_2.bias";
  n.c_fc_weight = p + "mlp.c_fc.weight";
  n.c_fc_bias = p + "mlp.c_fc.bias";
  n.mlp_proj_weight = p + "mlp.c_proj.weight";
  n.mlp_proj_bias = p + "mlp.c_proj.bias";
  return n;
}

namespace {

void AddLlama(const ModelConfig& c, std::vector<ExpectedTensor>& out) {
  const int64_t h = c.hidden_size, v = c.vocab_size, i = c.intermediate_size;
  const int64_t q_out = c.num_heads * c.head_dim, kv_out = c.num_kv_heads * c.head_dim;
  out.push_back({std::string(kLlamaEmbed), {v, h}});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const LlamaLayerNames n = LlamaLayer(l);
    out.push_back({n.attn_norm, {h}});
    out.push_back({n.q, {q_out, h}});
    out.push_back({n.k, {kv_out, h}});
    out.push_back({n.v, {kv_out, h}});
    out.push_back({n.o, {h, q_out}});
    if (c.attention_bias) {
      out.push_back({n.q_bias, {q_out}});
      out.push_back({n.k_bias, {kv_out}});
      out.push_back({n.v_bias, {kv_out}});
    }
    if (c.attention_out_bias) out.push_back({n.o_bias, {h}});
    out.push_back({n.mlp_norm, {h}});
    out.push_back({n.gate, {i, h}});
    out.push_back({n.up, {i, h}});
    out.push_back({n.down, {h, i}});
    if (c.mlp_bias) {
      out.push_back({n.gate_bias, {i}});
      out.push_back({n.up_bias, {i}});
      out.push_back({n.down_bias, {h}});
    }
  }
  out.push_back({std::string(kLlamaFinalNorm), {h}});
  if (!c.tie_word_embeddings) out.push_back({std::string(kLlamaLmHead), {v, h}});
}

void AddGpt2(const ModelConfig& c, std::vector<ExpectedTensor>& out) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  out.push_back({std::string(kGpt2Wte), {c.vocab_size, h}});
  out.push_back({std::string(kGpt2Wpe), {c.max_position_embeddings, h}});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const Gpt2LayerNames n = Gpt2Layer(l);
    out.push_back({n.ln_1_weight, {h}});
    out.push_back({n.ln_1_bias, {h}});
    out.push_back({n.c_attn_weight, {h, 3 * h}});
    out.push_back({n.c_attn_bias, {3 * h}});
    out.push_back({n.attn_proj_weight, {h, h}});
    out.push_back({n.attn_proj_bias, {h}});
    out.push_back({n.ln_2_weight, {h}});
    out.push_back({n.ln_2_bias, {h}});
    out.push_back({n.c_fc_weight, {h, i}});
    out.push_back({n.c_fc_bias, {i}});
    out.push_back({n.mlp_proj_weight, {i, h}});
    out.push_back({n.mlp_proj_bias, {h}});
  }
  out.push_back({std::string(kGpt2FinalNormWeight), {h}});
  out.push_back({std::string(kGpt2FinalNormBias), {h}});
}

}  // namespace

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config) {
  std::vector<ExpectedTensor> out;
  if (config.architecture == Architecture::kGpt2) {
    AddGpt2(config, out);
  } else {
    AddLlama(config, out);
  }
  return out;
}

const TensorInfo* FindModelTensor(const SafetensorsArchive& archive, Architecture arch,
                                  std::string_view name) {
  if (const TensorInfo* t = archive.Find(name)) return t;
  if (arch == Architecture::kGpt2) {
    return archive.Find(std::string("transformer.") + std::string(name));
  }
  return nullptr;
}

absl::Status ReadModelTensorF32(const SafetensorsArchive& archive, Architecture arch,
                                std::string_view name, absl::Span<const int64_t> shape,
                                float* dst) {
  const TensorInfo* t = FindModelTensor(archive, arch, name);
  // Falls through to ReadF32 on the canonical name for absent tensors, for its error message.
  return archive.ReadF32(t != nullptr ? std::string_view(t->name) : name, shape, dst);
}

}  // namespace manyshot

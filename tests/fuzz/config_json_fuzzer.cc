// Fuzzes config.json parsing (ParseModelConfig reads a path, so the bytes go to a scratch file).
// An accepted config must describe a model the rest of the engine can size without overflow or
// division by zero (the tensor table is computed from it), and must survive a round trip through
// ModelConfigToJson unchanged.
#include <string>

#include "engine/model/model_config.h"
#include "engine/model/tensor_names.h"
#include "tests/fuzz/fuzz_support.h"

namespace manyshot::fuzz {
namespace {

bool SameConfig(const ModelConfig& a, const ModelConfig& b) {
  return a.architecture == b.architecture && a.model_type == b.model_type &&
         a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
         a.intermediate_size == b.intermediate_size && a.num_layers == b.num_layers &&
         a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads &&
         a.head_dim == b.head_dim && a.max_position_embeddings == b.max_position_embeddings &&
         a.norm_eps == b.norm_eps && a.rope_theta == b.rope_theta &&
         a.tie_word_embeddings == b.tie_word_embeddings && a.attention_bias == b.attention_bias &&
         a.attention_out_bias == b.attention_out_bias && a.mlp_bias == b.mlp_bias &&
         a.bos_token_id == b.bos_token_id && a.eos_token_id == b.eos_token_id &&
         a.hidden_act == b.hidden_act && a.pre_norm == b.pre_norm;
}

}  // namespace
}  // namespace manyshot::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace manyshot;
  auto path = fuzz::WriteScratchFile("config.json", {reinterpret_cast<const char*>(data), size});
  auto config = ParseModelConfig(path);
  fuzz::Report(config.status());
  if (!config.ok()) return 0;
  if (config->vocab_size <= 0 || config->hidden_size <= 0 || config->num_layers <= 0 ||
      config->num_heads <= 0 || config->num_kv_heads <= 0 || config->head_dim <= 0) {
    fuzz::Fail("an accepted config has a non-positive dimension");
  }
  // Only small models: the table's shapes are materialised, one entry per tensor.
  if (config->num_layers <= 64) {
    for (const ExpectedTensor& t : ExpectedTensors(*config)) {
      for (int64_t d : t.shape) {
        if (d <= 0) fuzz::Fail("an accepted config yields a tensor with a non-positive dimension");
      }
    }
  }
  auto again = ParseModelConfig(fuzz::WriteScratchFile("again.json", ModelConfigToJson(*config)));
  if (!again.ok()) fuzz::Fail("ModelConfigToJson wrote a config ParseModelConfig rejects");
  if (!fuzz::SameConfig(*config, *again)) fuzz::Fail("a config changed in a round trip");
  return 0;
}

// make-tiny-model: writes a small Hugging Face model directory with deterministic random weights.
//
//   make-tiny-model --family=llama --out=/tmp/tiny --tokenizer_dir=DIR --seed=2 --dtype=bf16
//
// The defaults give a 2-layer, 64-wide model. The same flags always give byte-identical files.
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "engine/model/synthetic/tiny_model.h"
#include "tools/stored_dtype_flag.h"

ABSL_FLAG(std::string, family, "llama",
          "gpt2, llama, mistral, qwen2, phi3, gemma, gemma2, bloom, opt or gpt_neox");
ABSL_FLAG(std::string, out, "", "output directory (created if missing)");
ABSL_FLAG(std::string, tokenizer_dir, "",
          "directory whose tokenizer files are copied into the model (optional)");
ABSL_FLAG(uint64_t, seed, 0, "PRNG seed for the weights");
ABSL_FLAG(int64_t, vocab_size, 0,
          "vocabulary size; 0 = 50257 for gpt2, 50272 for opt, 32000 otherwise");
ABSL_FLAG(int64_t, hidden_size, 64, "hidden size");
ABSL_FLAG(int64_t, intermediate_size, 0,
          "MLP width; 0 = 4*hidden for gpt2, bloom and opt, 160 otherwise");
ABSL_FLAG(int64_t, layers, 2, "number of layers");
ABSL_FLAG(int64_t, heads, 4, "attention heads");
ABSL_FLAG(int64_t, kv_heads, 0, "key/value heads; 0 = heads");
ABSL_FLAG(int64_t, max_position_embeddings, 0, "0 = 1024 for gpt2, 2048 otherwise");
ABSL_FLAG(std::string, tie, "auto",
          "tie lm_head to the embeddings: true, false or auto "
          "(gpt2, qwen2, bloom, opt: true; llama, mistral: false)");
ABSL_FLAG(std::string, attention_bias, "auto",
          "q/k/v bias: true, false or auto "
          "(gpt2, qwen2, bloom, opt: true; llama, mistral: false)");
ABSL_FLAG(std::string, dtype, "f32", "stored dtype: f32, f16 or bf16");
ABSL_FLAG(int, shards, 1, "number of safetensors shards (>1 writes an index)");
ABSL_FLAG(double, rope_theta, 10000, "RoPE base (llama family)");
ABSL_FLAG(int64_t, head_dim, 0, "gemma, gemma2: head_dim (0: hidden_size / heads)");
ABSL_FLAG(bool, pre_norm, true,
          "norms before each sublayer; false: post-LN (opt only, do_layer_norm_before: false)");

namespace {

bool ParseTriBool(const std::string& flag, const std::string& value, bool automatic, bool* out) {
  if (value == "auto") {
    *out = automatic;
  } else if (value == "true" || value == "1") {
    *out = true;
  } else if (value == "false" || value == "0") {
    *out = false;
  } else {
    std::cerr << "--" << flag << " must be true, false or auto, got " << value << "\n";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Writes a tiny random Hugging Face model directory.");
  absl::ParseCommandLine(argc, argv);
  manyshot::TinyModelSpec spec;
  spec.family = absl::GetFlag(FLAGS_family);
  const bool gpt2 = spec.family == "gpt2";
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::cerr << "--out is required\n";
    return 2;
  }
  spec.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  const bool opt = spec.family == "opt";
  if (spec.vocab_size == 0) spec.vocab_size = gpt2 ? 50257 : opt ? 50272 : 32000;
  spec.hidden_size = absl::GetFlag(FLAGS_hidden_size);
  spec.intermediate_size = absl::GetFlag(FLAGS_intermediate_size);
  const bool four_h = gpt2 || opt || spec.family == "bloom";  // their MLPs are 4 * hidden wide
  if (spec.intermediate_size == 0) spec.intermediate_size = four_h ? 4 * spec.hidden_size : 160;
  spec.num_layers = absl::GetFlag(FLAGS_layers);
  spec.num_heads = absl::GetFlag(FLAGS_heads);
  spec.num_kv_heads = absl::GetFlag(FLAGS_kv_heads);
  if (spec.num_kv_heads == 0) spec.num_kv_heads = spec.num_heads;
  spec.max_position_embeddings = absl::GetFlag(FLAGS_max_position_embeddings);
  if (spec.max_position_embeddings == 0) spec.max_position_embeddings = gpt2 ? 1024 : 2048;
  const bool auto_true =
      gpt2 || spec.family == "qwen2" || spec.family == "bloom" || spec.family == "opt";
  const bool gemma = spec.family == "gemma" || spec.family == "gemma2";  // tied, no biases
  if (!ParseTriBool("tie", absl::GetFlag(FLAGS_tie), auto_true || gemma,
                    &spec.tie_word_embeddings) ||
      !ParseTriBool("attention_bias", absl::GetFlag(FLAGS_attention_bias), auto_true,
                    &spec.attention_bias)) {
    return 2;
  }
  if (!manyshot::ParseStoredDTypeFlag(absl::GetFlag(FLAGS_dtype), &spec.dtype)) return 2;
  spec.shards = absl::GetFlag(FLAGS_shards);
  spec.seed = absl::GetFlag(FLAGS_seed);
  spec.rope_theta = static_cast<float>(absl::GetFlag(FLAGS_rope_theta));
  spec.pre_norm = absl::GetFlag(FLAGS_pre_norm);
  spec.head_dim = absl::GetFlag(FLAGS_head_dim);

  absl::Status st = manyshot::WriteTinyModel(spec, absl::GetFlag(FLAGS_tokenizer_dir), out);
  if (!st.ok()) {
    std::cerr << "make-tiny-model: " << st << "\n";
    return 1;
  }
  return 0;
}

// make-tiny-t5: writes a small Hugging Face T5 directory with deterministic random weights.
//
//   make-tiny-t5 --out=/tmp/t5 --feed_forward_proj=gated-gelu --tie=false --seed=7
//
// The same flags always give byte-identical files (tools/reference/make_t5_goldens.py relies on
// it; the tests regenerate the models from the spec in each golden).
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "engine/model/synthetic/tiny_t5_model.h"
#include "tools/stored_dtype_flag.h"

ABSL_FLAG(std::string, out, "", "output directory (created if missing)");
ABSL_FLAG(uint64_t, seed, 0, "PRNG seed for the weights");
ABSL_FLAG(int64_t, vocab_size, 512, "vocabulary size");
ABSL_FLAG(int64_t, d_model, 64, "model width");
ABSL_FLAG(int64_t, d_kv, 16, "width of one attention head");
ABSL_FLAG(int64_t, d_ff, 128, "feed-forward width");
ABSL_FLAG(int64_t, layers, 2, "encoder blocks");
ABSL_FLAG(int64_t, decoder_layers, 0, "decoder blocks; 0 = --layers");
ABSL_FLAG(int64_t, heads, 4, "attention heads");
ABSL_FLAG(int64_t, buckets, 32, "relative_attention_num_buckets");
ABSL_FLAG(int64_t, max_distance, 128, "relative_attention_max_distance");
ABSL_FLAG(std::string, feed_forward_proj, "relu", "relu (T5 v1.0) or gated-gelu (v1.1)");
ABSL_FLAG(bool, tie, true, "tie lm_head to the embeddings (v1.0: true, v1.1: false)");
ABSL_FLAG(std::string, dtype, "f32", "stored dtype: f32, f16 or bf16");
ABSL_FLAG(int, shards, 1, "number of safetensors shards (>1 writes an index)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Writes a tiny random Hugging Face T5 model directory.");
  absl::ParseCommandLine(argc, argv);
  manyshot::TinyT5Spec spec;
  manyshot::T5Config& c = spec.config;
  c.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  c.d_model = absl::GetFlag(FLAGS_d_model);
  c.d_kv = absl::GetFlag(FLAGS_d_kv);
  c.d_ff = absl::GetFlag(FLAGS_d_ff);
  c.num_layers = absl::GetFlag(FLAGS_layers);
  c.num_decoder_layers = absl::GetFlag(FLAGS_decoder_layers);
  if (c.num_decoder_layers == 0) c.num_decoder_layers = c.num_layers;
  c.num_heads = absl::GetFlag(FLAGS_heads);
  c.relative_attention_num_buckets = absl::GetFlag(FLAGS_buckets);
  c.relative_attention_max_distance = absl::GetFlag(FLAGS_max_distance);
  c.tie_word_embeddings = absl::GetFlag(FLAGS_tie);
  const std::string ff = absl::GetFlag(FLAGS_feed_forward_proj);
  if (ff == "relu") {
    c.feed_forward = manyshot::T5FeedForward::kRelu;
  } else if (ff == "gated-gelu") {
    c.feed_forward = manyshot::T5FeedForward::kGatedGelu;
  } else {
    std::cerr << "--feed_forward_proj must be relu or gated-gelu, got " << ff << "\n";
    return 2;
  }
  if (!manyshot::ParseStoredDTypeFlag(absl::GetFlag(FLAGS_dtype), &spec.dtype)) return 2;
  spec.shards = absl::GetFlag(FLAGS_shards);
  spec.seed = absl::GetFlag(FLAGS_seed);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::cerr << "--out is required\n";
    return 2;
  }
  absl::Status status = manyshot::WriteTinyT5Model(spec, out);
  if (!status.ok()) {
    std::cerr << status << "\n";
    return 1;
  }
  return 0;
}

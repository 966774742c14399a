// Benchmark decoder models; see decoder_models.h.
#include "bench/decoder_models.h"

#include <cstdio>
#include <cstdlib>

#include "engine/model/arch_traits.h"

namespace manyshot::bench {

TinyModelSpec SmallDecoderSpec(const std::string& family) {
  TinyModelSpec spec;
  spec.family = family;
  spec.vocab_size = 50257;
  spec.hidden_size = 768;
  const bool gemma = family == "gemma" || family == "gemma2";
  const bool gated = family == "llama" || family == "phi3" || gemma;
  spec.intermediate_size = gated ? 2048 : 3072;
  spec.num_layers = 12;
  spec.num_heads = 12;
  spec.num_kv_heads = 12;
  spec.max_position_embeddings = family == "gpt2" ? 1024 : 2048;
  spec.tie_word_embeddings = true;
  spec.attention_bias = !gated;
  spec.seed = 7;
  return spec;
}

std::filesystem::path EnsureSmallDecoderModel(const std::string& family,
                                              const std::filesystem::path& dir,
                                              const std::filesystem::path& tokenizer_dir) {
  if (!std::filesystem::exists(dir / "config.json")) {
    std::filesystem::path tokenizer = tokenizer_dir;
    if (tokenizer.empty()) {
      tokenizer = dir.parent_path() / "no-tokenizer";
      std::filesystem::create_directories(tokenizer);
    }
    auto status = WriteTinyModel(SmallDecoderSpec(family), tokenizer, dir);
    if (!status.ok()) {
      std::fprintf(stderr, "manyshot-bench: cannot write model: %s\n", status.ToString().c_str());
      std::exit(1);
    }
  }
  return dir;
}

double DecoderForwardFlops(const ModelConfig& c, double tokens, double past, double logit_rows) {
  const double H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const double q = c.num_heads * D, kv = c.num_kv_heads * D;
  const double mlp_matrices = IsGated(TraitsOf(c.architecture).activation) ? 3 : 2;
  double per_token = 2 * (H * (q + 2 * kv) + q * H + mlp_matrices * H * I);
  // Keys each new token attends to: past + its index + 1.
  double attended = tokens * past + tokens * (tokens + 1) / 2;
  double attention = 2 * 2 * attended * c.num_heads * D;
  return c.num_layers * (per_token * tokens + attention) + 2 * H * c.vocab_size * logit_rows;
}

PrefillRun::PrefillRun(const Transformer& model, int64_t tokens)
    : model_(model), last_{tokens - 1}, cache_(model.NewCache(tokens + 64)) {
  const int64_t vocab = model.config().vocab_size;
  for (int64_t i = 0; i < tokens; ++i) {
    tokens_.push_back(static_cast<int32_t>((i * 7919) % vocab));
    positions_.push_back(static_cast<int32_t>(i));
  }
}

void PrefillRun::Run() {
  cache_.Truncate(0);
  ForwardSequence seq{tokens_, positions_, &cache_, last_};
  auto result = model_.Forward({&seq, 1});
  if (!result.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", result.status().ToString().c_str());
    std::abort();
  }
}

}  // namespace manyshot::bench

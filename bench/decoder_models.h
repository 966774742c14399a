// The decoder models the benchmarks run: one GPT-2-small shape (12 layers, hidden 768, 12 heads,
// vocabulary 50257, random weights) in every decoder family, so that their figures compare
// directly, and the pieces of a prefill measurement they share.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/model/synthetic/tiny_model.h"
#include "engine/transformer/transformer.h"

namespace manyshot::bench {

// gpt2, llama, phi3, bloom, opt or gpt_neox at the GPT-2-small shape. The MLP is 3072 wide (llama
// and phi3: a SwiGLU of 2048, about the same FLOPs); they keep the 12 heads as kv heads (no GQA),
// and every family ties its head.
TinyModelSpec SmallDecoderSpec(const std::string& family);

// Writes SmallDecoderSpec(family) into `dir` unless it is there; exits on failure. With a
// `tokenizer_dir`, its tokenizer files are copied in too, so that a server can load the directory.
std::filesystem::path EnsureSmallDecoderModel(const std::string& family,
                                              const std::filesystem::path& dir,
                                              const std::filesystem::path& tokenizer_dir = {});

// Matrix FLOPs of a forward pass over `tokens` new tokens after `past` cached ones, with logits
// for `logit_rows` rows: projections, causal attention (QK^T and PV), vocabulary head.
double DecoderForwardFlops(const ModelConfig& c, double tokens, double past, double logit_rows);

// One sequence of `tokens` tokens at positions 0.. with the last row's logits, run again and
// again on one model (the cache is rewound each time).
class PrefillRun {
 public:
  PrefillRun(const Transformer& model, int64_t tokens);
  void Run();  // aborts on an engine error: a benchmark of a failing pass means nothing
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const std::vector<int32_t>& positions() const { return positions_; }

 private:
  const Transformer& model_;
  std::vector<int32_t> tokens_, positions_;
  std::vector<int64_t> last_;
  KvCache cache_;
};

}  // namespace manyshot::bench

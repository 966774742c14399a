// manyshot-bench prefill --family=t5: the encoder of a T5-base-shaped model (12 blocks, d_model
// 768, 12 heads of 64, d_ff 3072, relu, vocab 32128, random weights; one decoder block, whose
// cross-attention K/V the encoder pass also computes) and GPT-2 small (whose matrices have these
// shapes, decoder_models.h) in the same run on the CPU backend: encoder prefill of one --tokens
// (1024) input as tokens/s and as a fraction of the OpenBLAS sgemm measured in the same run, and
// that fraction over GPT-2's prefill fraction (target: within 10%, >= 0.9). The two models
// alternate round by round and each figure is its best round, so load from other processes on a
// shared machine falls on both alike.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "bench/bench_common.h"
#include "bench/decoder_models.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/synthetic/tiny_t5_model.h"
#include "engine/t5/t5_model.h"

namespace manyshot::bench {

TinyT5Spec T5BaseEncoderSpec() {
  TinyT5Spec spec;
  T5Config& c = spec.config;
  c.vocab_size = 32128;
  c.d_model = 768;
  c.d_kv = 64;
  c.d_ff = 3072;
  c.num_layers = 12;
  c.num_decoder_layers = 1;
  c.num_heads = 12;
  c.feed_forward = T5FeedForward::kRelu;
  c.tie_word_embeddings = true;
  spec.seed = 7;
  return spec;
}

namespace {

// Matrix FLOPs of the encoder over one input of `tokens`: q/k/v/o and feed-forward projections,
// bidirectional attention (every token against every token: QK^T and PV), and the decoder's
// cross-attention K and V of every row.
double EncoderFlops(const T5Config& c, double tokens) {
  const double d = c.d_model, inner = c.inner_dim(), ff = c.d_ff;
  const double per_token = 2 * (4 * d * inner + 2 * d * ff);
  const double attention = 2 * 2 * tokens * tokens * inner;
  const double cross_kv = c.num_decoder_layers * 2 * 2 * d * inner * tokens;
  return c.num_layers * (per_token * tokens + attention) + cross_kv;
}

}  // namespace

int RunT5PrefillBench(const BenchOptions& options) {
  Report report("prefill", options.json);
  const int threads = options.threads;
  report.AddText("family", "t5");
  report.AddText("blas_kernel", BlasKernelDescription());
  report.Add("threads", threads);
  // The same reference as the GPT-2 figure: the MLP's GEMM shape and a square one.
  const double peak =
      std::max(SgemmGflops(1024, 3072, 768, threads, 5), SgemmGflops(2048, 2048, 2048, threads, 3));
  report.Add("sgemm_peak_gflops", peak, "GFLOP/s");

  const std::filesystem::path dir = options.work_dir / "t5-base-encoder-random";
  const TinyT5Spec spec = T5BaseEncoderSpec();
  if (!std::filesystem::exists(dir / "config.json")) {
    auto status = WriteTinyT5Model(spec, dir);
    if (!status.ok()) {
      std::fprintf(stderr, "manyshot-bench: cannot write model: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  CpuBackend backend(threads);
  auto model = T5Model::Load(dir, backend);
  if (!model.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  auto gpt2 = Transformer::Load(
      EnsureSmallDecoderModel("gpt2", options.work_dir / "gpt2-small-random"), backend);
  if (!gpt2.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", gpt2.status().ToString().c_str());
    return 1;
  }
  const T5Config& c = (*model)->config();
  const int64_t T = options.tokens;
  std::vector<std::vector<int32_t>> input(1, std::vector<int32_t>(static_cast<size_t>(T)));
  for (int64_t i = 0; i < T; ++i) input[0][i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
  auto encode = [&] {
    auto encoded = (*model)->Encode(input);
    if (!encoded.ok()) {
      std::fprintf(stderr, "manyshot-bench: %s\n", encoded.status().ToString().c_str());
      std::exit(1);
    }
  };
  PrefillRun gpt2_run(**gpt2, T);
  encode();  // warm-up: first touch of weights and buffers
  gpt2_run.Run();
  double best_t5 = 1e30, best_gpt2 = 1e30;
  const int rounds = std::max(3, options.repeats);
  for (int round = 0; round < rounds; ++round) {
    auto start = std::chrono::steady_clock::now();
    encode();
    best_t5 = std::min(best_t5, Seconds(std::chrono::steady_clock::now() - start));
    start = std::chrono::steady_clock::now();
    gpt2_run.Run();
    best_gpt2 = std::min(best_gpt2, Seconds(std::chrono::steady_clock::now() - start));
  }
  const double t5_gflops = EncoderFlops(c, static_cast<double>(T)) / best_t5 / 1e9;
  const double gpt2_gflops = DecoderForwardFlops((*gpt2)->config(), T, 0, 1) / best_gpt2 / 1e9;
  report.Add("encoder_tokens", static_cast<double>(T));
  report.Add("rounds", rounds);
  report.Add("t5_encoder_prefill_seconds", best_t5, "s");
  report.Add("t5_encoder_prefill_tokens_per_second", T / best_t5, "tok/s");
  report.Add("t5_encoder_prefill_gflops", t5_gflops, "GFLOP/s");
  report.Add("t5_encoder_prefill_fraction_of_sgemm_peak", t5_gflops / peak);
  report.Add("gpt2_prefill_seconds", best_gpt2, "s");
  report.Add("gpt2_prefill_gflops", gpt2_gflops, "GFLOP/s");
  report.Add("gpt2_prefill_fraction_of_sgemm_peak", gpt2_gflops / peak);
  report.Add("t5_fraction_over_gpt2", t5_gflops / gpt2_gflops, "(target >= 0.9)");
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

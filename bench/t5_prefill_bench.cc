// manyshot-bench prefill --family=t5: the encoder of a T5-base-shaped model (12 blocks, d_model
// 768, 12 heads of 64, d_ff 3072, relu, vocab 32128, random weights; one decoder block, whose
// cross-attention K/V the encoder pass also computes) on the CPU backend. Encoder prefill of one
// --tokens (1024) input, as tokens/s and as a fraction of the OpenBLAS sgemm figure measured in
// the same run, the same figure `prefill` gives for GPT-2 small (whose matrices have these
// shapes), so the two compare directly.
#include <cstdio>
#include <filesystem>
#include <vector>

#include "bench/bench_common.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/tiny_t5_model.h"
#include "engine/t5/t5_model.h"

namespace manyshot::bench {
namespace {

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
  const T5Config& c = (*model)->config();
  const int64_t T = options.tokens;
  std::vector<std::vector<int32_t>> input(1, std::vector<int32_t>(static_cast<size_t>(T)));
  for (int64_t i = 0; i < T; ++i) input[0][i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
  const double seconds = MedianSeconds(
      [&] {
        auto encoded = (*model)->Encode(input);
        if (!encoded.ok()) {
          std::fprintf(stderr, "manyshot-bench: %s\n", encoded.status().ToString().c_str());
          std::exit(1);
        }
      },
      options.repeats);
  const double flops = EncoderFlops(c, static_cast<double>(T));
  report.Add("encoder_tokens", static_cast<double>(T));
  report.Add("encoder_prefill_seconds", seconds, "s");
  report.Add("encoder_prefill_tokens_per_second", T / seconds, "tok/s");
  report.Add("encoder_prefill_gflops", flops / seconds / 1e9, "GFLOP/s");
  report.Add("encoder_prefill_fraction_of_sgemm_peak", flops / seconds / 1e9 / peak,
             "(compare: prefill_fraction_of_sgemm_peak of --family=gpt2)");
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

// manyshot-bench prefill --family=llama|phi3|bloom|opt|gpt_neox|gemma|gemma2: the
// GPT-2-small-shaped model of
// that family
// (decoder_models.h) and GPT-2 small itself, in the same run on the CPU backend: prefill of one
// --tokens (1024) sequence as tokens/s and as a fraction of an OpenBLAS sgemm measured in the same
// run, and the family's fraction over GPT-2's (target: within 10%, i.e. >= 0.9). The two
// models alternate round by round and each figure is its best round, so load from other processes
// on a shared machine falls on both alike.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/bench_common.h"
#include "bench/decoder_models.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"

namespace manyshot::bench {

int RunFamilyPrefillBench(const BenchOptions& options) {
  const std::string& family = options.family;
  if (family != "llama" && family != "phi3" && family != "bloom" && family != "opt" &&
      family != "gpt_neox" && family != "gemma" && family != "gemma2") {
    std::fprintf(
        stderr,
        "manyshot-bench prefill: --family must be gpt2, llama, phi3, bloom, opt, gpt_neox, "
        "gemma, gemma2 or t5\n");
    return 2;
  }
  Report report("prefill", options.json);
  const int threads = options.threads;
  report.AddText("family", family);
  report.AddText("blas_kernel", BlasKernelDescription());
  report.Add("threads", threads);
  // The same reference as the GPT-2 figure: the MLP's GEMM shape and a square one.
  const double peak =
      std::max(SgemmGflops(1024, 3072, 768, threads, 5), SgemmGflops(2048, 2048, 2048, threads, 3));
  report.Add("sgemm_peak_gflops", peak, "GFLOP/s");

  CpuBackend backend(threads);
  const std::string names[2] = {"gpt2", family};
  std::unique_ptr<Transformer> models[2];
  for (int m = 0; m < 2; ++m) {
    auto dir = EnsureSmallDecoderModel(names[m], options.work_dir / (names[m] + "-small-random"));
    auto loaded = Transformer::Load(dir, backend);
    if (!loaded.ok()) {
      std::fprintf(stderr, "manyshot-bench: %s\n", loaded.status().ToString().c_str());
      return 1;
    }
    models[m] = *std::move(loaded);
  }
  const int64_t T = options.tokens;
  PrefillRun runs[2] = {PrefillRun(*models[0], T), PrefillRun(*models[1], T)};
  for (PrefillRun& run : runs) run.Run();  // warm-up: first-touch of weights and buffers
  double best[2] = {1e30, 1e30};
  const int rounds = std::max(3, options.repeats);
  for (int round = 0; round < rounds; ++round) {
    for (int m = 0; m < 2; ++m) {
      const auto start = std::chrono::steady_clock::now();
      runs[m].Run();
      best[m] = std::min(best[m], Seconds(std::chrono::steady_clock::now() - start));
    }
  }
  report.Add("prefill_tokens", static_cast<double>(T));
  report.Add("rounds", rounds);
  double fraction[2];
  for (int m = 0; m < 2; ++m) {
    const double gflops = DecoderForwardFlops(models[m]->config(), T, 0, 1) / best[m] / 1e9;
    fraction[m] = gflops / peak;
    report.Add(names[m] + "_prefill_seconds", best[m], "s");
    report.Add(names[m] + "_prefill_tokens_per_second", T / best[m], "tok/s");
    report.Add(names[m] + "_prefill_gflops", gflops, "GFLOP/s");
    report.Add(names[m] + "_prefill_fraction_of_sgemm_peak", fraction[m]);
  }
  report.Add(family + "_fraction_over_gpt2", fraction[1] / fraction[0], "(target >= 0.9)");
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

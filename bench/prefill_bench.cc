// manyshot-bench prefill: a GPT-2-small-shaped model (12 layers, hidden 768, 12 heads, vocab
// 50257, random weights) on the CPU backend. Prefill of one 1024-token sequence and single-token
// decode, as tokens/s and as a fraction of an OpenBLAS sgemm measured in the same run; decode's
// weight bytes per second also as a fraction of a same-run memory read bandwidth (decode at batch
// 1 reads every weight once per token: it is bound by memory, not by FLOPs), with the matrix
// weights held in f32 and in bf16 (TransformerOptions::weights: half the bytes).
// --family=llama|bloom|opt: family_prefill_bench.cc; --family=t5: t5_prefill_bench.cc.
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "bench/decoder_models.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/tiny_model.h"
#include "engine/transformer/transformer.h"

namespace manyshot::bench {
namespace {

// Read bandwidth with `threads` threads: each sums its share of a buffer larger than the model's
// weights (integer adds, which vectorize, so the loop is bound by the loads). The buffer is
// allocated and touched once; each Measure() is one timed pass.
class MemoryReadReference {
 public:
  MemoryReadReference(int threads, size_t bytes)
      : threads_(threads), data_(bytes / sizeof(uint64_t), 1) {}

  double Measure() const {
    const size_t per = data_.size() / static_cast<size_t>(threads_);
    std::vector<uint64_t> sums(static_cast<size_t>(threads_));
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads_; ++t) {
      pool.emplace_back([&, t] {
        const uint64_t* p = data_.data() + static_cast<size_t>(t) * per;
        uint64_t sum = 0;
        for (size_t i = 0; i < per; ++i) sum += p[i];
        sums[static_cast<size_t>(t)] = sum;
      });
    }
    for (auto& t : pool) t.join();
    const double s = Seconds(std::chrono::steady_clock::now() - start);
    if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) != per * threads_) return 0;
    return static_cast<double>(per * threads_ * sizeof(uint64_t)) / s / 1e9;
  }

 private:
  int threads_;
  std::vector<uint64_t> data_;
};

// Seconds per token of `steps` single-token decode steps after a prefill of the first
// tokens.size() - steps tokens (the prefill is not timed).
double DecodeSecondsPerToken(const Transformer& model, absl::Span<const int32_t> tokens,
                             absl::Span<const int32_t> positions, int64_t steps) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  KvCache cache = model.NewCache(T + 64);
  ForwardSequence prefix{tokens.subspan(0, T - steps), positions.subspan(0, T - steps), &cache, {}};
  if (!model.Forward({&prefix, 1}).ok()) std::abort();
  const std::vector<int64_t> row0 = {0};
  auto start = std::chrono::steady_clock::now();
  for (int64_t at = T - steps; at < T; ++at) {
    ForwardSequence seq{tokens.subspan(at, 1), positions.subspan(at, 1), &cache, row0};
    if (!model.Forward({&seq, 1}).ok()) std::abort();
  }
  return Seconds(std::chrono::steady_clock::now() - start) / static_cast<double>(steps);
}

}  // namespace

std::filesystem::path EnsureGpt2SmallModel(const std::filesystem::path& dir) {
  return EnsureSmallDecoderModel("gpt2", dir);
}

int RunPrefillBench(const BenchOptions& options) {
  if (options.family == "t5") return RunT5PrefillBench(options);
  if (options.family != "gpt2") return RunFamilyPrefillBench(options);
  Report report("prefill", options.json);
  const int threads = options.threads;
  report.AddText("blas_kernel", BlasKernelDescription());
  report.Add("threads", threads);
  // The reference: OpenBLAS with its own threads on the MLP's GEMM shape and a square one.
  double peak =
      std::max(SgemmGflops(1024, 3072, 768, threads, 5), SgemmGflops(2048, 2048, 2048, threads, 3));
  report.Add("sgemm_peak_gflops", peak, "GFLOP/s");

  auto model_dir = EnsureGpt2SmallModel(options.work_dir / "gpt2-small-random");
  CpuBackend backend(threads);
  auto model = Transformer::Load(model_dir, backend);
  if (!model.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& c = (*model)->config();
  const int64_t T = options.tokens;
  PrefillRun prefill(**model, T);
  const std::vector<int32_t>& tokens = prefill.tokens();
  const std::vector<int32_t>& positions = prefill.positions();
  double prefill_s = MedianSeconds([&] { prefill.Run(); }, options.repeats);
  double prefill_flops = DecoderForwardFlops(c, T, 0, 1);
  report.Add("prefill_tokens", static_cast<double>(T));
  report.Add("prefill_seconds", prefill_s, "s");
  report.Add("prefill_tokens_per_second", T / prefill_s, "tok/s");
  report.Add("prefill_gflops", prefill_flops / prefill_s / 1e9, "GFLOP/s");
  report.Add("prefill_fraction_of_sgemm_peak", prefill_flops / prefill_s / 1e9 / peak,
             "(target >= 0.6)");

  // Decode: one token at a time after a context of `T - steps` tokens, with matrix weights held
  // in f32 and in bf16, and the memory read reference: interleaved round by round, each figure
  // the best of its rounds, so load from other processes on a shared machine falls on all three
  // alike instead of on whichever happened to run during it.
  const int64_t steps = 16;
  TransformerOptions bf16_weights;
  bf16_weights.weights = DType::kBF16;
  auto model_bf16 = Transformer::Load(model_dir, backend, bf16_weights);
  if (!model_bf16.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", model_bf16.status().ToString().c_str());
    return 1;
  }
  const MemoryReadReference memory(threads, size_t{1} << 30);
  const int rounds = std::max(5, options.repeats);
  double read_gbps = 0, f32_s = 1e30, bf16_s = 1e30;
  for (int round = 0; round < rounds; ++round) {
    read_gbps = std::max(read_gbps, memory.Measure());
    f32_s = std::min(f32_s, DecodeSecondsPerToken(**model, tokens, positions, steps));
    bf16_s = std::min(bf16_s, DecodeSecondsPerToken(**model_bf16, tokens, positions, steps));
  }
  // Matrix weights read per token (biases and norms are under 0.1% of them).
  const double matrices =
      c.num_layers * (12.0 * c.hidden_size * c.hidden_size) + c.vocab_size * c.hidden_size;
  report.Add("decode_context_tokens", static_cast<double>(T - steps));
  report.Add("decode_rounds", rounds);
  report.Add("memory_read_gbytes_per_second", read_gbps, "GB/s (same-run reference)");
  report.Add("decode_seconds_per_token", f32_s, "s (f32 weights)");
  report.Add("decode_tokens_per_second", 1.0 / f32_s, "tok/s (f32 weights)");
  report.Add("decode_weight_gbytes_per_second", 4 * matrices / f32_s / 1e9, "GB/s (f32 weights)");
  report.Add("decode_fraction_of_memory_read", 4 * matrices / f32_s / 1e9 / read_gbps,
             "(f32 weights; target >= 0.8)");
  report.Add("decode_gflops", DecoderForwardFlops(c, 1, T - steps, 1) / f32_s / 1e9, "GFLOP/s");
  report.Add("decode_bf16_weights_seconds_per_token", bf16_s, "s");
  report.Add("decode_bf16_weights_tokens_per_second", 1.0 / bf16_s, "tok/s");
  report.Add("decode_bf16_weights_gbytes_per_second", 2 * matrices / bf16_s / 1e9, "GB/s");
  report.Add("decode_bf16_weights_fraction_of_memory_read", 2 * matrices / bf16_s / 1e9 / read_gbps,
             "(target >= 0.8)");
  report.Add("decode_bf16_weights_speedup", f32_s / bf16_s, "x over f32 weights");
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

// manyshot-bench prefill: a GPT-2-small-shaped model (12 layers, hidden 768, 12 heads, vocab
// 50257, random weights) on the CPU backend. Prefill of one 1024-token sequence and single-token
// decode, as tokens/s and as a fraction of an OpenBLAS sgemm measured in the same run; decode's
// weight bytes per second also as a fraction of a same-run memory read bandwidth (decode at batch
// 1 reads every weight once per token: it is bound by memory, not by FLOPs), with the matrix
// weights held in f32 and in bf16 (TransformerOptions::weights: half the bytes), and the same
// with the K/V bytes that decode's attention reads besides the weights; decode after a context of
// --tokens minus 16 tokens and after one of 16.
// --family=llama|bloom|opt: family_prefill_bench.cc; --family=t5: t5_prefill_bench.cc.
#include <sys/mman.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "bench/decoder_models.h"
#include "bench/subcommands.h"
#include "engine/core/dtype.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/synthetic/tiny_model.h"
#include "engine/transformer/transformer.h"

namespace manyshot::bench {
namespace {

// Read bandwidth with `threads` threads over a buffer larger than the model's weights, each
// thread reading its own contiguous share once per Measure(), by two kernels: a plain loop of
// integer adds (the compiler vectorises it) and an AVX-512 load-only sum (four independent
// 64-byte loads and adds per step). The reference is the faster of the two in the same round, so
// a kernel that happens to suit this machine's memory system better cannot be beaten by decode
// unnoticed. The buffer is allocated (2 MiB-aligned, transparent huge pages, as the backend's
// weights) and touched once.
class MemoryReadReference {
 public:
  MemoryReadReference(int threads, size_t bytes)
      : threads_(threads), words_(bytes / sizeof(uint64_t)) {
    constexpr size_t kHugePage = size_t{2} << 20;
    const size_t alloc = (words_ * sizeof(uint64_t) + kHugePage - 1) / kHugePage * kHugePage;
    data_ = static_cast<uint64_t*>(std::aligned_alloc(kHugePage, alloc));
    if (data_ == nullptr) std::abort();
    madvise(data_, alloc, MADV_HUGEPAGE);
    std::fill(data_, data_ + words_, uint64_t{1});
  }
  ~MemoryReadReference() { std::free(data_); }
  MemoryReadReference(const MemoryReadReference&) = delete;
  MemoryReadReference& operator=(const MemoryReadReference&) = delete;

  // GB/s of the integer-sum loop and of the AVX-512 load-only sum (0 where the CPU has no
  // AVX-512: the binary carries it whatever it was compiled for, as the kernels do).
  double IntegerSum() const { return Measure(&SumWords); }
  double Avx512Sum() const {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) return Measure(&SumWordsAvx512);
#endif
    return 0;
  }

 private:
  static uint64_t SumWords(const uint64_t* p, size_t n) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; ++i) sum += p[i];
    return sum;
  }
#if defined(__x86_64__)
  // n a multiple of 32; p 64-byte aligned.
  __attribute__((target("avx512f"))) static uint64_t SumWordsAvx512(const uint64_t* p, size_t n) {
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 32) {
      a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
      a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 8));
      a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 16));
      a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 24));
    }
    alignas(64) uint64_t lanes[8];
    _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
    return std::accumulate(lanes, lanes + 8, uint64_t{0});
  }
#endif

  double Measure(uint64_t (*sum_words)(const uint64_t*, size_t)) const {
    const size_t per = words_ / static_cast<size_t>(threads_) / 32 * 32;
    std::vector<uint64_t> sums(static_cast<size_t>(threads_));
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads_; ++t) {
      pool.emplace_back([&, t] {
        sums[static_cast<size_t>(t)] = sum_words(data_ + static_cast<size_t>(t) * per, per);
      });
    }
    for (auto& t : pool) t.join();
    const double s = Seconds(std::chrono::steady_clock::now() - start);
    if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) != per * threads_) return 0;
    return static_cast<double>(per * threads_ * sizeof(uint64_t)) / s / 1e9;
  }

  int threads_;
  size_t words_;
  uint64_t* data_ = nullptr;
};

// Bytes one decode step reads from memory: every weight once (matrices in the weight dtype,
// which the loader also uses for the embedding table and so for a tied LM head; norm weights and
// biases in the compute dtype) and the K and V of `context` keys in every layer.
struct DecodeBytes {
  double weights = 0, kv = 0;
};

DecodeBytes DecodeStepBytes(const Transformer& model, double context) {
  const ModelConfig& c = model.config();
  const double H = static_cast<double>(c.hidden_size), I = static_cast<double>(c.intermediate_size);
  const double w = static_cast<double>(DTypeSize(model.weight_dtype()));
  const double v = static_cast<double>(DTypeSize(model.compute_dtype()));
  const double kv_row = static_cast<double>(c.num_kv_heads * c.head_dim);
  // Per layer (GPT-2): q|k|v and output projections, up and down; two norms (weight and bias),
  // and the biases of the four projections.
  const double matrices = c.num_layers * (H * (H + 2 * kv_row) + H * H + 2 * H * I) +
                          static_cast<double>(c.vocab_size) * H;
  const double vectors = c.num_layers * (4 * H + (H + 2 * kv_row) + H + I + H) + 2 * H;
  DecodeBytes bytes;
  bytes.weights = w * matrices + v * vectors;
  bytes.kv =
      2.0 * c.num_layers * context * kv_row * static_cast<double>(DTypeSize(model.kv_dtype()));
  return bytes;
}

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
  // Also after a short context (kShortContext tokens), where the weights are nearly all a step
  // reads, as in llama.cpp's generation benchmark, which starts from an empty context.
  constexpr int64_t kShortContext = 16;
  const auto short_tokens = absl::MakeConstSpan(tokens).subspan(0, kShortContext + steps);
  const auto short_positions = absl::MakeConstSpan(positions).subspan(0, kShortContext + steps);
  const MemoryReadReference memory(threads, size_t{1} << 30);
  const int rounds = std::max(5, options.repeats);
  double int_gbps = 0, avx_gbps = 0, f32_s = 1e30, bf16_s = 1e30, f32_short_s = 1e30,
         bf16_short_s = 1e30;
  for (int round = 0; round < rounds; ++round) {
    int_gbps = std::max(int_gbps, memory.IntegerSum());
    avx_gbps = std::max(avx_gbps, memory.Avx512Sum());
    f32_s = std::min(f32_s, DecodeSecondsPerToken(**model, tokens, positions, steps));
    bf16_s = std::min(bf16_s, DecodeSecondsPerToken(**model_bf16, tokens, positions, steps));
    f32_short_s =
        std::min(f32_short_s, DecodeSecondsPerToken(**model, short_tokens, short_positions, steps));
    bf16_short_s = std::min(
        bf16_short_s, DecodeSecondsPerToken(**model_bf16, short_tokens, short_positions, steps));
  }
  const double read_gbps = std::max(int_gbps, avx_gbps);
  // Steps after a context of n tokens attend to n + 1 .. n + steps keys (their own included): the
  // mean.
  auto mean_keys = [&](int64_t n) { return static_cast<double>(2 * n + steps + 1) / 2; };
  const DecodeBytes f32_bytes = DecodeStepBytes(**model, mean_keys(T - steps));
  const DecodeBytes bf16_bytes = DecodeStepBytes(**model_bf16, mean_keys(T - steps));
  report.Add("decode_context_tokens", static_cast<double>(T - steps));
  report.Add("decode_short_context_tokens", static_cast<double>(kShortContext));
  report.Add("decode_rounds", rounds);
  report.Add("memory_read_gbytes_per_second", read_gbps,
             "GB/s (same-run reference: the faster of the two kernels below)");
  report.Add("memory_read_integer_sum_gbytes_per_second", int_gbps, "GB/s");
  report.Add("memory_read_avx512_sum_gbytes_per_second", avx_gbps, "GB/s");
  // f32 weights; then bf16. "weight" figures count the weights alone (what the target is set on),
  // "read" figures the weights and the K/V that attention reads on top of them.
  auto add_decode = [&](const std::string& prefix, const std::string& what, double seconds,
                        const DecodeBytes& bytes) {
    report.Add(prefix + "seconds_per_token", seconds, "s (" + what + ")");
    report.Add(prefix + "tokens_per_second", 1.0 / seconds, "tok/s (" + what + ")");
    report.Add(prefix + "weight_bytes_per_token", bytes.weights, "B (" + what + ")");
    report.Add(prefix + "kv_bytes_per_token", bytes.kv, "B (" + what + ")");
    report.Add(prefix + "weight_gbytes_per_second", bytes.weights / seconds / 1e9,
               "GB/s (" + what + ")");
    report.Add(prefix + "fraction_of_memory_read", bytes.weights / seconds / 1e9 / read_gbps,
               "(" + what + ", weight bytes; target >= 0.8)");
    report.Add(prefix + "read_fraction_of_memory_read",
               (bytes.weights + bytes.kv) / seconds / 1e9 / read_gbps,
               "(" + what + ", weight and K/V bytes)");
  };
  add_decode("decode_", "f32 weights", f32_s, f32_bytes);
  report.Add("decode_gflops", DecoderForwardFlops(c, 1, T - steps, 1) / f32_s / 1e9, "GFLOP/s");
  add_decode("decode_bf16_weights_", "bf16 weights", bf16_s, bf16_bytes);
  report.Add("decode_bf16_weights_speedup", f32_s / bf16_s, "x over f32 weights");
  add_decode("decode_short_context_", "f32 weights, short context", f32_short_s,
             DecodeStepBytes(**model, mean_keys(kShortContext)));
  add_decode("decode_short_context_bf16_weights_", "bf16 weights, short context", bf16_short_s,
             DecodeStepBytes(**model_bf16, mean_keys(kShortContext)));
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

// manyshot-bench structured: a 1000-shot SST-2 task on the GPT-2-small-shaped model (random
// weights, real GPT-2 tokenizer). Encode time and cache size; query throughput at batch 1, 8 and
// 32 with achieved FLOP/s against a same-run sgemm; CONVENTIONAL mode re-encoding its window per
// query as a ratio; and encode / query cost at 100, 300, 1000 and 3000 shots (linear growth).
// Each batch size is timed in rounds interleaved with the sgemm reference, best of each: on a
// shared machine another process's load then falls on the figure and its reference alike.
#include <cstdio>

#include "bench/bench_common.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"

namespace manyshot::bench {
namespace {

// Matrix FLOPs of classifying one query of `tokens` tokens (bos included) against `context`
// tokens: projections for every token, attention to the context and to its own tokens, and the
// vocabulary head at the last token (GPT-2 SST-2 labels are single tokens).
double QueryFlops(const ModelConfig& c, double tokens, double context) {
  const double H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const double q = c.num_heads * D, kv = c.num_kv_heads * D;
  const double projections = 2 * (H * (q + 2 * kv) + q * H + 2 * H * I);
  const double attended = tokens * context + tokens * (tokens + 1) / 2;
  return c.num_layers * (projections * tokens + 4 * attended * c.num_heads * D) +
         2 * H * c.vocab_size;
}

struct Timed {
  double seconds;
  double tokens;  // query tokens classified, bos included
};

// Classifies `queries` in batches of `batch`.
Timed ClassifyAll(IclTask& task, const EncodedContext* context, const std::vector<Example>& queries,
                  size_t batch, const QueryOverrides& overrides = {}) {
  double tokens = 0;
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < queries.size(); i += batch) {
    std::vector<Example> chunk(queries.begin() + i,
                               queries.begin() + std::min(queries.size(), i + batch));
    auto r = task.Classify(context, chunk, overrides);
    if (!r.ok()) {
      std::fprintf(stderr, "manyshot-bench: classify: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    for (const auto& result : *r) tokens += static_cast<double>(result.input_tokens + 1);
  }
  return {Seconds(std::chrono::steady_clock::now() - start), tokens};
}

}  // namespace

int RunStructuredBench(const BenchOptions& options) {
  Report report("structured", options.json);
  report.AddText("blas_kernel", BlasKernelDescription());
  report.Add("threads", options.threads);
  // The reference: OpenBLAS with its own threads on the MLP's GEMM shape and a square one; it is
  // measured again between the query rounds below and the best of all is reported.
  auto measure_sgemm = [&] {
    return std::max(SgemmGflops(1024, 3072, 768, options.threads, 3),
                    SgemmGflops(2048, 2048, 2048, options.threads, 2));
  };
  double peak = measure_sgemm();

  auto tokenizer = LoadTokenizer(options.tokenizer_dir);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", tokenizer.status().ToString().c_str());
    return 1;
  }
  CpuBackend backend(options.threads);
  auto model =
      Transformer::Load(EnsureGpt2SmallModel(options.work_dir / "gpt2-small-random"), backend);
  if (!model.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const ModelConfig& config = (*model)->config();
  auto dir = Sst2Dir(options.data_dir);
  auto train = LoadSst2(dir / "stsa.binary.train", 3000);
  auto test = LoadSst2(dir / "stsa.binary.test", 64);
  if (!train.ok() || !test.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n",
                 (!train.ok() ? train.status() : test.status()).ToString().c_str());
    return 1;
  }

  // The 1000-shot task.
  std::vector<Example> shots(train->begin(), train->begin() + 1000);
  auto task = IclTask::Prepare(**model, **tokenizer, Sst2TaskOptions(), shots);
  if (!task.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", task.status().ToString().c_str());
    return 1;
  }
  auto start = std::chrono::steady_clock::now();
  auto encoded = (*task)->EncodeContext();
  if (!encoded.ok()) return 1;
  const double encode_s = Seconds(std::chrono::steady_clock::now() - start);
  const EncodedContext& ctx = *encoded;
  report.Add("shots", 1000);
  report.Add("group_length", static_cast<double>(ctx.group_length));
  report.Add("groups", static_cast<double>(ctx.groups));
  report.Add("context_tokens", static_cast<double>(ctx.tokens));
  report.Add("cache_bytes", static_cast<double>(ctx.bytes()), "bytes");
  report.Add("encode_seconds", encode_s, "s");
  report.Add("encode_tokens_per_second", static_cast<double>(ctx.tokens) / encode_s, "tok/s");

  double per_query_batch32 = 0;
  constexpr int kRounds = 3;
  struct BatchFigure {
    size_t batch;
    double flops;
    double seconds;  // best round
    size_t queries;
  };
  std::vector<BatchFigure> figures;
  for (size_t batch : {1u, 8u, 32u}) {
    std::vector<Example> queries(test->begin(), test->begin() + (batch == 1 ? 8 : 2 * batch));
    // Warm-up on one batch, then rounds of the sgemm reference and the timed queries.
    ClassifyAll(**task, &ctx, std::vector<Example>(queries.begin(), queries.begin() + batch),
                batch);
    BatchFigure f{batch, 0, 1e30, queries.size()};
    for (int round = 0; round < kRounds; ++round) {
      peak = std::max(peak, measure_sgemm());
      Timed t = ClassifyAll(**task, &ctx, queries, batch);
      const double avg_tokens = t.tokens / static_cast<double>(queries.size());
      f.flops = QueryFlops(config, avg_tokens, static_cast<double>(ctx.tokens)) *
                static_cast<double>(queries.size());
      f.seconds = std::min(f.seconds, t.seconds);
    }
    figures.push_back(f);
  }
  report.Add("sgemm_peak_gflops", peak, "GFLOP/s (same-run reference, best of all rounds)");
  report.Add("query_rounds", kRounds);
  for (const BatchFigure& f : figures) {
    const std::string b = std::to_string(f.batch);
    report.Add("batch" + b + "_queries_per_second", static_cast<double>(f.queries) / f.seconds,
               "q/s");
    report.Add("batch" + b + "_gflops", f.flops / f.seconds / 1e9, "GFLOP/s");
    report.Add("batch" + b + "_fraction_of_sgemm_peak", f.flops / f.seconds / 1e9 / peak,
               f.batch == 1 ? "(target >= 0.5)" : (f.batch == 32 ? "(target >= 0.75)" : ""));
    if (f.batch == 32) per_query_batch32 = f.seconds / static_cast<double>(f.queries);
  }

  // CONVENTIONAL: re-encode the window for every query (no prefix cache), as the baseline does.
  {
    QueryOverrides conventional;
    conventional.mode = PromptMode::kConventional;
    const size_t n = 4;
    auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) {
      auto fresh = IclTask::Prepare(**model, **tokenizer, Sst2TaskOptions(), shots);
      if (!fresh.ok()) return 1;
      auto r = (*fresh)->Classify(nullptr, {(*test)[i]}, conventional);
      if (!r.ok()) return 1;
    }
    const double conv_per_query = Seconds(std::chrono::steady_clock::now() - t0) / n;
    report.Add("conventional_reencode_seconds_per_query", conv_per_query, "s");
    report.Add("structured_batch32_seconds_per_query", per_query_batch32, "s");
    report.Add("conventional_over_structured_per_query", conv_per_query / per_query_batch32, "x");
  }

  // Scaling with the number of shots.
  std::vector<Example> scaling_queries(test->begin(), test->begin() + 16);
  for (size_t n : {100u, 300u, 1000u, 3000u}) {
    if (options.quick) break;
    std::vector<Example> demos(train->begin(), train->begin() + n);
    auto t = IclTask::Prepare(**model, **tokenizer, Sst2TaskOptions(), demos);
    if (!t.ok()) return 1;
    auto e0 = std::chrono::steady_clock::now();
    auto scaled = (*t)->EncodeContext();
    if (!scaled.ok()) return 1;
    const double enc = Seconds(std::chrono::steady_clock::now() - e0);
    Timed q = ClassifyAll(**t, &*scaled, scaling_queries, 16);
    const double per_query = q.seconds / static_cast<double>(scaling_queries.size());
    const std::string s = std::to_string(n);
    report.Add("shots" + s + "_context_tokens", static_cast<double>(scaled->tokens));
    report.Add("shots" + s + "_encode_seconds", enc, "s");
    report.Add("shots" + s + "_encode_ms_per_demonstration", enc / n * 1e3, "ms");
    report.Add("shots" + s + "_query_seconds", per_query, "s (batch 16)");
    report.Add("shots" + s + "_query_us_per_demonstration", per_query / n * 1e6, "us");
  }
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

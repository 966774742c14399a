// manyshot-bench saicl: the SAICL paper's Figure 2 on this machine. Encoder time of one query
// (EncodeT5Prompts: the per-query work; the task's segments and first-layer q|k|v are prepared
// once, outside the timing) for k demonstrations of exactly S tokens and a test input of S
// tokens, SAICL against full attention (CONVENTIONAL: the same batch and first-layer cache, the
// segments concatenated into one input), on the CPU backend with the T5-base-shaped random model
// of `prefill --family=t5`. Reported: both times per (S, k), the speed-up (a same-run ratio),
// SAICL's time per demonstration from k = 32 on as its largest over its smallest (linear cost:
// the target is at most 1.15), and SAICL over a linear reference measured beside it: T5's
// own encoder over the same k + 1 segments as separate inputs (the same tokens, no attention
// between segments), whose ratio stays flat when SAICL's cost is linear even where the machine's
// load is not. Each time is the best of --repeats rounds; every round runs every k and mode in
// turn, so that load from other processes falls on all of them alike.
//
// Default: S = 64 and 128, k = 8 .. 256 for SAICL, full attention up to k = 128 (above it, one
// input of 16k+ tokens costs minutes of CPU per round). --quick: S = 64, full attention up to
// k = 64.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/synthetic/tiny_t5_model.h"
#include "engine/t5/prompt_modes.h"

namespace manyshot::bench {

int RunSaiclBench(const BenchOptions& options) {
  Report report("saicl", options.json);
  report.AddText("blas_kernel", BlasKernelDescription());
  report.Add("threads", options.threads);
  const std::filesystem::path dir = options.work_dir / "t5-base-encoder-random";
  if (!std::filesystem::exists(dir / "config.json")) {
    auto status = WriteTinyT5Model(T5BaseEncoderSpec(), dir);
    if (!status.ok()) {
      std::fprintf(stderr, "manyshot-bench: cannot write model: %s\n", status.ToString().c_str());
      return 1;
    }
  }
  // The CPU backend (CUDA's AttendBiased kernel has not been run on a GPU here yet).
  CpuBackend backend(options.threads);
  auto model = T5Model::Load(dir, backend);
  if (!model.ok()) {
    std::fprintf(stderr, "manyshot-bench: %s\n", model.status().ToString().c_str());
    return 1;
  }
  const int64_t vocab = (*model)->config().vocab_size;
  const std::vector<int64_t> lengths =
      options.quick ? std::vector<int64_t>{64} : std::vector<int64_t>{64, 128};
  const std::vector<int64_t> shots = {8, 16, 32, 64, 128, 256};
  const int64_t full_up_to = options.quick ? 64 : 128;
  const int rounds = std::max(1, options.repeats);
  report.Add("rounds", rounds);
  auto fail = [](const absl::Status& status) {
    std::fprintf(stderr, "manyshot-bench: %s\n", status.ToString().c_str());
    return 1;
  };
  for (int64_t S : lengths) {
    auto tokens = [&](int64_t seed) {
      std::vector<int32_t> ids(static_cast<size_t>(S));
      for (int64_t i = 0; i < S; ++i) ids[i] = static_cast<int32_t>((seed * 7919 + i * 31) % vocab);
      return ids;
    };
    const std::vector<int32_t> test = tokens(1000003);
    std::vector<T5DemonstrationSet> sets;
    std::vector<std::vector<std::vector<int32_t>>> separate;  // the reference's inputs
    for (int64_t k : shots) {
      std::vector<std::vector<int32_t>> demos;
      for (int64_t i = 0; i < k; ++i) demos.push_back(tokens(i + 1));
      T5SegmentOptions segments;
      segments.segment_length = S;
      auto set = PrepareT5Demonstrations(**model, demos, segments);
      if (!set.ok()) return fail(set.status());
      sets.push_back(*std::move(set));
      demos.push_back(test);
      separate.push_back(std::move(demos));
    }
    auto time = [&](size_t i, T5PromptMode mode) -> absl::StatusOr<double> {
      T5ModeOptions mode_options;
      mode_options.mode = mode;
      const auto start = std::chrono::steady_clock::now();
      auto encoding = EncodeT5Prompts(**model, sets[i], mode_options, test);
      if (!encoding.ok()) return encoding.status();
      return Seconds(std::chrono::steady_clock::now() - start);
    };
    // Round by round over every k, so that a load change falls on all of them alike.
    const size_t n = shots.size();
    std::vector<double> saicl(n, 1e30), full(n, 1e30), independent(n, 1e30);
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < n; ++i) {
        auto t = time(i, T5PromptMode::kSaicl);
        if (!t.ok()) return fail(t.status());
        saicl[i] = std::min(saicl[i], *t);
        const auto start = std::chrono::steady_clock::now();
        auto encoded = (*model)->Encode(separate[i]);
        if (!encoded.ok()) return fail(encoded.status());
        independent[i] =
            std::min(independent[i], Seconds(std::chrono::steady_clock::now() - start));
        if (shots[i] > full_up_to) continue;
        t = time(i, T5PromptMode::kConventional);
        if (!t.ok()) return fail(t.status());
        full[i] = std::min(full[i], *t);
      }
    }
    double per_demo_min = 1e30, per_demo_max = 0, ratio_min = 1e30, ratio_max = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t k = shots[i];
      const std::string at = "_s" + std::to_string(S) + "_k" + std::to_string(k);
      report.Add("saicl_ms" + at, saicl[i] * 1e3, "ms");
      report.Add("independent_ms" + at, independent[i] * 1e3, "ms");
      report.Add("saicl_over_independent" + at, saicl[i] / independent[i]);
      if (k <= full_up_to) {
        report.Add("full_ms" + at, full[i] * 1e3, "ms");
        report.Add("speedup" + at, full[i] / saicl[i], "x (full / SAICL)");
      }
      if (k >= 32) {
        per_demo_min = std::min(per_demo_min, saicl[i] / static_cast<double>(k));
        per_demo_max = std::max(per_demo_max, saicl[i] / static_cast<double>(k));
        ratio_min = std::min(ratio_min, saicl[i] / independent[i]);
        ratio_max = std::max(ratio_max, saicl[i] / independent[i]);
      }
    }
    const std::string s = "_s" + std::to_string(S);
    report.Add("saicl_ms_per_demonstration_max_over_min_k32_to_256" + s,
               per_demo_max / per_demo_min, "(target <= 1.15)");
    report.Add("saicl_over_independent_max_over_min_k32_to_256" + s, ratio_max / ratio_min);
  }
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

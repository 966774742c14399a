// The manyshot-bench subcommands and their shared options.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace manyshot {
struct TinyT5Spec;
}  // namespace manyshot

namespace manyshot::bench {

struct BenchOptions {
  bool json = false;
  int threads = 2;
  int repeats = 3;
  int64_t tokens = 1024;
  // prefill: the model family: gpt2; llama, bloom, opt (family_prefill_bench.cc, each beside
  // gpt2); t5 (its encoder, t5_prefill_bench.cc)
  std::string family = "gpt2";
  bool quick = false;  // structured: skip the 100..3000-shot scaling section
  // cluster: the model the replicas serve: "gpt2-small" (GPT-2-small shape, random weights) or
  // "tiny" (the server's generated default model); empty: gpt2-small, tiny with --quick.
  std::string shape;
  size_t shots = 0;  // cluster: demonstrations of the SST-2 task; 0: 1000 (64 with --quick)
  std::filesystem::path work_dir;  // generated models are kept here between runs
  std::filesystem::path data_dir;  // SST-2 files; default ../shared/datasets/sst2_cbu
  std::filesystem::path tokenizer_dir = "/usr/local/share/manyshot/gpt2";
  // service: the manyshot-server binary (default <dir of manyshot-bench>/../server/), Classify
  // requests per client and inputs per request (0: both 1 and 4).
  std::filesystem::path server_binary;
  int requests = 20;
  int batch = 0;
  // attention: "cpu" or "cuda" (empty: cuda when a GPU can be used, else cpu), the context length
  // (0: the 1000-shot SST-2 task's 30,569 tokens; 4096 with --quick) and the PyTorch peer script.
  std::string backend;
  int64_t context_tokens = 0;
  std::filesystem::path torch_peer;
  // soak: StreamClassify streams, seconds of load then of idle, seconds between samples, requests
  // per stream before it is closed and reopened, and an already running server (--target=HOST:PORT,
  // with --target_pid for RSS/threads from /proc and --target_metrics_port for /metrics).
  int streams = 64;
  double duration_seconds = 600;
  double idle_seconds = 60;
  double sample_seconds = 5;
  int stream_requests = 1000;
  std::string target;
  int target_pid = 0;
  int target_metrics_port = 0;
};

int RunPrefillBench(const BenchOptions& options);
int RunT5PrefillBench(const BenchOptions& options);
int RunFamilyPrefillBench(const BenchOptions& options);
int RunStructuredBench(const BenchOptions& options);
int RunCacheBench(const BenchOptions& options);
int RunServiceBench(const BenchOptions& options);
int RunAttentionBench(const BenchOptions& options);
int RunSoakBench(const BenchOptions& options);
int RunAccuracyBench(const BenchOptions& options);
int RunSaiclBench(const BenchOptions& options);
int RunClusterBench(const BenchOptions& options);

// Writes (once) the random GPT-2-small-shaped model used by the benchmarks into `dir`.
std::filesystem::path EnsureGpt2SmallModel(const std::filesystem::path& dir);

// The T5-base-shaped random model of `prefill --family=t5` and `saicl` (t5_prefill_bench.cc).
TinyT5Spec T5BaseEncoderSpec();

}  // namespace manyshot::bench

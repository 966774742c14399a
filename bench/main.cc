// manyshot-bench: performance figures, each with a same-run reference. Every subcommand takes
// --json and then prints one JSON object with all its figures.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "bench/subcommands.h"

namespace {

constexpr char kUsage[] =
    "usage: manyshot-bench SUBCOMMAND [--json] [--threads=N] [--repeats=N] [--tokens=N] "
    "[--family=F] [--shape=S] [--shots=N] "
    "[--work_dir=DIR] [--data_dir=DIR] [--tokenizer_dir=DIR] [--quick] [--server_binary=PATH] "
    "[--requests=N] [--batch=N] [--backend=cpu|cuda] [--context_tokens=N] [--torch_peer=PATH]\n"
    "       soak: [--streams=N] [--duration=S] [--idle=S] [--sample=S] [--stream_requests=N] "
    "[--target=HOST:PORT [--target_pid=PID] [--target_metrics_port=N]]\n"
    "subcommands:\n"
    "  prefill     GPT-2-small-shaped prefill and decode vs a same-run OpenBLAS sgemm\n"
    "              (--family=llama|phi3|bloom|opt|gpt_neox|gemma|gemma2: that family at the same "
    "shape\n"
    "              beside GPT-2;\n"
    "              --family=t5: a T5-base-shaped encoder's prefill, likewise beside GPT-2)\n"
    "  saicl       T5-base-shaped encoder per query, SAICL vs full attention, k = 8..256\n"
    "              demonstrations of S = 64 and 128 tokens (--quick: S = 64, full up to 64)\n"
    "  structured  1000-shot SST-2: encode, query throughput, CONVENTIONAL ratio, scaling\n"
    "  cache       1000-shot SST-2 KV: restore from RocksDB vs re-encode vs a plain read "
    "(--backend=cuda: into GPU memory)\n"
    "  service     gRPC Classify from 32 clients via manyshot-server vs the in-process engine\n"
    "  attention   context attention, query batches vs same-run copy/GEMM and PyTorch\n"
    "  soak        64 StreamClassify streams for 10 min, then idle: errors, p50/p99, server RSS\n"
    "              and threads over time, and whether they level off\n"
    "  accuracy    SST-2 accuracy vs shots (structured, parallel, conventional; mean and std\n"
    "              over 3 samples, 200 test inputs; --quick: 4 and 64 shots, 2 samples, 50\n"
    "              inputs) vs the test inputs' majority-class rate; --target=HOST:PORT: a\n"
    "              running server instead of the default model\n"
    "  cluster     two replicas on one --shared_dir: first answer restored from the shared tier\n"
    "              vs encoded (1000-shot SST-2, f32 and bf16), per-request revalidation vs a\n"
    "              batch-1 request, HAProxy vs direct at batch 1; --shape=gpt2-small (default:\n"
    "              GPT-2-small shape, random weights) or tiny (the server's default model);\n"
    "              --quick: tiny, 64 shots; --shots=N: N shots\n"
    "options: --data_dir=DIR (SST-2 files), --tokenizer_dir=DIR (GPT-2 vocab.json+merges.txt)\n";

bool Flag(const char* arg, const char* name, std::string* value) {
  size_t n = std::strlen(name);
  if (std::strncmp(arg, name, n) != 0 || arg[n] != '=') return false;
  *value = arg + n + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  manyshot::bench::BenchOptions options;
  options.threads = std::max(1u, std::thread::hardware_concurrency());
  options.work_dir = std::filesystem::temp_directory_path() / "manyshot-bench";
  std::string value;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0) {
      options.json = true;
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      options.quick = true;
    } else if (Flag(argv[i], "--threads", &value)) {
      options.threads = std::stoi(value);
    } else if (Flag(argv[i], "--repeats", &value)) {
      options.repeats = std::stoi(value);
    } else if (Flag(argv[i], "--tokens", &value)) {
      options.tokens = std::stoll(value);
    } else if (Flag(argv[i], "--shape", &value)) {
      options.shape = value;
    } else if (Flag(argv[i], "--shots", &value)) {
      options.shots = std::stoul(value);
    } else if (Flag(argv[i], "--family", &value)) {
      options.family = value;
    } else if (Flag(argv[i], "--data_dir", &value)) {
      options.data_dir = value;
    } else if (Flag(argv[i], "--tokenizer_dir", &value)) {
      options.tokenizer_dir = value;
    } else if (Flag(argv[i], "--server_binary", &value)) {
      options.server_binary = value;
    } else if (Flag(argv[i], "--requests", &value)) {
      options.requests = std::stoi(value);
    } else if (Flag(argv[i], "--batch", &value)) {
      options.batch = std::stoi(value);
    } else if (Flag(argv[i], "--backend", &value)) {
      options.backend = value;
    } else if (Flag(argv[i], "--context_tokens", &value)) {
      options.context_tokens = std::stoll(value);
    } else if (Flag(argv[i], "--torch_peer", &value)) {
      options.torch_peer = value;
    } else if (Flag(argv[i], "--streams", &value)) {
      options.streams = std::stoi(value);
    } else if (Flag(argv[i], "--duration", &value)) {
      options.duration_seconds = std::stod(value);
    } else if (Flag(argv[i], "--idle", &value)) {
      options.idle_seconds = std::stod(value);
    } else if (Flag(argv[i], "--sample", &value)) {
      options.sample_seconds = std::stod(value);
    } else if (Flag(argv[i], "--stream_requests", &value)) {
      options.stream_requests = std::stoi(value);
    } else if (Flag(argv[i], "--target", &value)) {
      options.target = value;
    } else if (Flag(argv[i], "--target_pid", &value)) {
      options.target_pid = std::stoi(value);
    } else if (Flag(argv[i], "--target_metrics_port", &value)) {
      options.target_metrics_port = std::stoi(value);
    } else if (Flag(argv[i], "--work_dir", &value)) {
      options.work_dir = value;
    } else {
      std::fprintf(stderr, "manyshot-bench: unknown argument %s\n%s", argv[i], kUsage);
      return 2;
    }
  }
  std::filesystem::create_directories(options.work_dir);
  std::string sub = argv[1];
  if (sub == "prefill") return manyshot::bench::RunPrefillBench(options);
  if (sub == "structured") return manyshot::bench::RunStructuredBench(options);
  if (sub == "cache") return manyshot::bench::RunCacheBench(options);
  if (sub == "service") return manyshot::bench::RunServiceBench(options);
  if (sub == "attention") return manyshot::bench::RunAttentionBench(options);
  if (sub == "soak") return manyshot::bench::RunSoakBench(options);
  if (sub == "accuracy") return manyshot::bench::RunAccuracyBench(options);
  if (sub == "saicl") return manyshot::bench::RunSaiclBench(options);
  if (sub == "cluster") return manyshot::bench::RunClusterBench(options);
  std::fprintf(stderr, "manyshot-bench: unknown subcommand %s\n%s", sub.c_str(), kUsage);
  return 2;
}

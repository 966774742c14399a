// manyshot-bench cluster: what the shared tier (--shared_dir) costs and saves, against real
// manyshot-server replicas started here on 127.0.0.1, same-run ratios. The replicas serve
// --shape: gpt2-small (default: the GPT-2-small shape with random weights, in the real format,
// from bench/decoder_models.h) or tiny (the server's generated default model; --quick, with 64
// shots instead of 1000).
// - restore vs encode: replica A creates the SST-2 task (encode, store, publish) and answers it;
//   replica B, which does not hold it, answers its first request by restoring the KV from the
//   shared tier. Once per --kv_dtype (f32, bf16), each with its own shared directory.
// - consistency: the per-request revalidation (ManifestStore::IsCurrent, one lookup), timed in
//   this process on the same directory, against B's median batch-1 Classify latency.
// - proxy: median batch-1 Classify latency through HAProxy (deploy/proxy/haproxy.cfg.template)
//   against the same calls straight to the replica HAProxy sends the task to, in alternating
//   rounds (--repeats; skipped without haproxy). HAProxy is ready once a health check went
//   through it; a proxied call that still fails fails the bench, with HAProxy's log.
// The latency figures come from the f32 pair, which is stopped before the bf16 pair starts.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_common.h"
#include "bench/bench_haproxy.h"
#include "bench/bench_server.h"
#include "bench/decoder_models.h"
#include "bench/percentile.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "cache/shared/manifests.h"
#include "cache/shared/shared_directory.h"
#include "grpcpp/grpcpp.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr uint32_t kGroupLength = 256;

// The model the replicas serve and the task's size.
struct ClusterShape {
  std::string name;
  std::string description;
  std::filesystem::path model_dir;  // empty: the server's generated default model
  size_t shots = 1000;
};

absl::StatusOr<ClusterShape> ResolveShape(const BenchOptions& options) {
  const std::string name =
      options.shape.empty() ? (options.quick ? "tiny" : "gpt2-small") : options.shape;
  ClusterShape shape;
  shape.name = name;
  shape.shots = options.shots > 0 ? options.shots : options.quick ? 64 : 1000;
  if (name == "tiny") {
    shape.description = "the generated default model (GPT-2 architecture, tiny, random weights)";
    return shape;
  }
  if (name == "gpt2-small") {
    shape.description = "GPT-2-small shape (12 layers, hidden 768, 12 heads), random weights";
    // The servers load it as a model directory: it carries the tokenizer.
    shape.model_dir = EnsureSmallDecoderModel("gpt2", options.work_dir / "gpt2-small-served",
                                              options.tokenizer_dir);
    return shape;
  }
  return absl::InvalidArgumentError("--shape must be gpt2-small or tiny, got " + name);
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "manyshot-bench cluster: %s\n", message.c_str());
  return 1;
}

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

// One batch-1 Classify of `text`; its wall time in seconds, or -1 on failure.
double TimedClassify(v1::ManyShot::Stub& stub, const std::string& text) {
  grpc::ClientContext context;
  context.AddMetadata("x-manyshot-task", "sst2");
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
  v1::ClassifyRequest request;
  request.set_task_id("sst2");
  request.add_inputs()->set_text(text);
  v1::ClassifyResponse response;
  const auto start = Clock::now();
  const grpc::Status status = stub.Classify(&context, request, &response);
  return status.ok() ? Seconds(Clock::now() - start) : -1;
}

// Median batch-1 latency over the inputs (seconds); -1 when a call failed.
double MedianLatency(v1::ManyShot::Stub& stub, const std::vector<Example>& inputs) {
  std::vector<double> times;
  for (const Example& e : inputs) {
    const double t = TimedClassify(stub, e.text);
    if (t < 0) return -1;
    times.push_back(t);
  }
  return Percentile(times, 0.5);
}

struct Pair {
  BenchServer a, b;
  ~Pair() {
    if (a.pid > 0) StopBenchServer(a);
    if (b.pid > 0) StopBenchServer(b);
  }
};

struct DtypeFigures {
  double encode_s = 0;   // CreateTask on A + its first answer
  double restore_s = 0;  // B's first answer (restore from the shared tier)
};

// Replicas A and B on a fresh shared directory with `kv_dtype`; fills `figures`, leaves the
// pair running in `pair`.
absl::Status RunPair(const BenchOptions& options, const ClusterShape& shape, const fs::path& binary,
                     const fs::path& root, const std::string& kv_dtype,
                     const std::vector<Example>& train, const std::vector<Example>& test,
                     Pair& pair, DtypeFigures& figures) {
  const fs::path shared = root / "shared";
  std::vector<std::string> common = {"--shared_dir=" + shared.string(), "--kv_dtype=" + kv_dtype};
  if (!shape.model_dir.empty()) common.push_back("--model_dir=" + shape.model_dir.string());
  auto a = StartBenchServer(binary, root / "a", options.threads, common);
  if (!a.ok()) return a.status();
  pair.a = *a;
  std::vector<std::string> flags_b = common;
  if (shape.model_dir.empty()) {  // A generated the default model: B serves the same files
    flags_b.push_back("--model_dir=" +
                      (root / "a" / "data" / "models" / "default-gpt2-tiny").string());
  }
  auto b = StartBenchServer(binary, root / "b", options.threads, flags_b);
  if (!b.ok()) return b.status();
  pair.b = *b;
  auto channel_a = ChannelTo(absl::StrCat("127.0.0.1:", a->grpc_port));
  auto channel_b = ChannelTo(absl::StrCat("127.0.0.1:", b->grpc_port));
  auto stub_a = v1::ManyShot::NewStub(channel_a);
  auto stub_b = v1::ManyShot::NewStub(channel_b);
  const auto start = Clock::now();
  if (absl::Status s = RegisterTask(channel_a, "sst2", Sst2GrpcSpec(kGroupLength), train);
      !s.ok()) {
    return s;
  }
  if (TimedClassify(*stub_a, test[0].text) < 0) return absl::InternalError("classify on A");
  figures.encode_s = Seconds(Clock::now() - start);
  figures.restore_s = TimedClassify(*stub_b, test[0].text);
  if (figures.restore_s < 0) return absl::InternalError("classify on B");
  const double encodes =
      MetricValue(ScrapeMetrics(b->metrics_port), "manyshot_cache_encodes_total");
  const double restores =
      MetricValue(ScrapeMetrics(b->metrics_port), "manyshot_shared_restores_total");
  if (encodes != 0 || restores != 1) {
    return absl::InternalError(absl::StrCat("replica B encoded ", encodes, " and restored ",
                                            restores, " times; expected 0 and 1"));
  }
  return absl::OkStatus();
}

// Microseconds per IsCurrent of the task's newest version in `shared` (median of 5 x 2000).
double RevalidationMicros(const fs::path& shared) {
  auto dir = shared::SharedDirectory::Open(shared, "bench");
  if (!dir.ok()) return -1;
  const shared::ManifestStore store(&*dir);
  auto names = store.ListAll();
  if (!names.ok() || names->empty() || (*names)[0].versions.empty()) return -1;
  auto bytes = shared::SharedDirectory::ReadWhole((*names)[0].versions.back().path);
  auto manifest = bytes.ok() ? shared::ParseManifest(*bytes) : bytes.status();
  if (!manifest.ok()) return -1;
  constexpr int kCalls = 2000;
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    const auto start = Clock::now();
    for (int i = 0; i < kCalls; ++i) {
      if (!store.IsCurrent(manifest->tenant, manifest->id, manifest->version).value_or(false)) {
        return -1;
      }
    }
    rounds.push_back(Seconds(Clock::now() - start) / kCalls * 1e6);
  }
  return Percentile(rounds, 0.5);
}

// Classify calls a replica answered OK so far (its manyshot_requests_total series).
double ClassifyCallsServed(const BenchServer& server) {
  std::istringstream lines(ScrapeMetrics(server.metrics_port));
  double total = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("manyshot_requests_total{", 0) == 0 &&
        line.find("method=\"Classify\"") != std::string::npos &&
        line.find("code=\"OK\"") != std::string::npos) {
      total += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return total;
}

// Batch-1 latency and the revalidation it includes, on a running pair.
void AddConsistencyFigures(const fs::path& root, const Pair& pair, const std::vector<Example>& test,
                           Report& report) {
  auto stub_b = v1::ManyShot::NewStub(ChannelTo(absl::StrCat("127.0.0.1:", pair.b.grpc_port)));
  const double request_s = MedianLatency(*stub_b, test);
  const double revalidation_us = RevalidationMicros(root / "shared");
  report.Add("batch1_request_ms", request_s * 1e3, "ms");
  report.Add("revalidation_us", revalidation_us, "us");
  if (request_s > 0 && revalidation_us > 0) {
    report.Add("revalidation_share_of_request", revalidation_us * 1e-6 / request_s);
  }
}

// Batch-1 latency through HAProxy against the same calls straight to the replica it picks, in
// alternating rounds. An error when no call gets through.
absl::Status AddProxyFigures(const BenchOptions& options, const fs::path& root, const Pair& pair,
                             const std::vector<Example>& test, Report& report) {
  if (access("/usr/sbin/haproxy", X_OK) != 0) {
    report.AddText("proxy", "skipped: /usr/sbin/haproxy is not installed");
    return absl::OkStatus();
  }
  auto proxy = BenchHaproxy::Start(
      root / "haproxy",
      {absl::StrCat("127.0.0.1:", pair.a.grpc_port), absl::StrCat("127.0.0.1:", pair.b.grpc_port)},
      std::chrono::seconds(60));
  if (!proxy.ok()) return proxy.status();
  auto via = v1::ManyShot::NewStub(ProxyClientChannel((*proxy)->address()));
  // The proxy keeps the task on one replica (hashing on its id): compared with calls straight to
  // that replica, so that the two replicas' different loads (B may still be writing its local
  // copy) do not pass for a proxy cost.
  const double a_before = ClassifyCallsServed(pair.a);
  if (TimedClassify(*via, test[0].text) < 0) {
    return absl::UnavailableError("a Classify through HAProxy failed\n--- haproxy.log:\n" +
                                  (*proxy)->Log());
  }
  const bool via_a = ClassifyCallsServed(pair.a) > a_before;
  const BenchServer& served = via_a ? pair.a : pair.b;
  auto direct_stub = v1::ManyShot::NewStub(ChannelTo(absl::StrCat("127.0.0.1:", served.grpc_port)));
  std::vector<double> direct_rounds, proxy_rounds, ratios;
  for (int round = 0; round < std::max(1, options.repeats); ++round) {
    direct_rounds.push_back(MedianLatency(*direct_stub, test));
    proxy_rounds.push_back(MedianLatency(*via, test));
    if (direct_rounds.back() > 0 && proxy_rounds.back() > 0) {
      ratios.push_back(proxy_rounds.back() / direct_rounds.back());
    }
  }
  if (ratios.empty()) {
    return absl::UnavailableError("no round of calls, direct and through HAProxy, succeeded\n" +
                                  std::string("--- haproxy.log:\n") + (*proxy)->Log());
  }
  report.AddText("proxy_replica", via_a ? "a" : "b");
  report.Add("batch1_direct_ms", Percentile(direct_rounds, 0.5) * 1e3, "ms");
  report.Add("batch1_proxy_ms", Percentile(proxy_rounds, 0.5) * 1e3, "ms");
  // Each round's ratio (direct, then proxied, medians of --requests calls): the median of them,
  // and the extremes, which show how much the machine's load moved between the two halves.
  report.Add("proxy_over_direct", Percentile(ratios, 0.5), "x");
  report.Add("proxy_over_direct_min", *std::min_element(ratios.begin(), ratios.end()), "x");
  report.Add("proxy_over_direct_max", *std::max_element(ratios.begin(), ratios.end()), "x");
  return absl::OkStatus();
}

}  // namespace

int RunClusterBench(const BenchOptions& options) {
  Report report("cluster", options.json);
  report.EchoToStderr();
  auto shape = ResolveShape(options);
  if (!shape.ok()) return Fail(shape.status().ToString());
  const auto dir = Sst2Dir(options.data_dir);
  auto train = LoadSst2(dir / "stsa.binary.train", shape->shots);
  auto test =
      LoadSst2(dir / "stsa.binary.test", static_cast<size_t>(std::max(8, options.requests)));
  if (!train.ok()) return Fail(train.status().ToString());
  if (!test.ok()) return Fail(test.status().ToString());
  const fs::path binary =
      options.server_binary.empty() ? DefaultServerBinary() : options.server_binary;
  if (!fs::exists(binary)) return Fail("no server binary at " + binary.string());
  const fs::path tmp = options.work_dir / ("cluster-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  report.Add("shots", static_cast<double>(train->size()));
  report.Add("threads", options.threads);
  report.AddText("shape", shape->name);
  report.AddText("model", shape->description);

  for (const std::string dtype : {"f32", "bf16"}) {
    DtypeFigures f;
    fs::create_directories(tmp / dtype);
    {
      Pair pair;
      if (absl::Status s =
              RunPair(options, *shape, binary, tmp / dtype, dtype, *train, *test, pair, f);
          !s.ok()) {
        return Fail(absl::StrCat(dtype, ": ", s.ToString()));
      }
      report.Add(dtype + "_encode_first_answer_seconds", f.encode_s, "s");
      report.Add(dtype + "_restore_first_answer_seconds", f.restore_s, "s");
      report.Add(dtype + "_restore_speedup", f.encode_s / f.restore_s, "x");
      if (dtype == "f32") {
        AddConsistencyFigures(tmp / dtype, pair, *test, report);
        if (absl::Status s = AddProxyFigures(options, tmp / dtype, pair, *test, report); !s.ok()) {
          return Fail("proxy: " + s.ToString());
        }
      }
    }  // the pair stops here: a GPT-2-small pair holds gigabytes of KV
    fs::remove_all(tmp / dtype);
  }
  fs::remove_all(tmp);
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

// manyshot-bench service: end-to-end Classify throughput and latency through gRPC against the
// real manyshot-server binary (started here on 127.0.0.1 with ephemeral ports and a temporary data
// directory), with 32 concurrent clients each sending requests of a fixed batch of inputs. The
// same-run reference: the in-process engine on the same generated default model, the same 64-shot
// SST-2 task and the same inputs, classified in engine batches of 32 inputs (the scheduler's
// largest) and in batches as large as the server's scheduler actually formed (its mean, from
// /metrics). Each of --repeats rounds runs gRPC and then both references back to back; reported
// are medians over rounds: q/s, p50/p99 request latency, overhead = in-process q/s / gRPC q/s.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_common.h"
#include "bench/bench_server.h"
#include "bench/percentile.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"
#include "grpcpp/grpcpp.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "server/api_to_engine.h"
#include "server/server_config.h"

namespace manyshot::bench {
namespace {

namespace fs = std::filesystem;
constexpr int kClients = 32;
constexpr size_t kShots = 64;
constexpr uint32_t kGroupLength = 256;
constexpr size_t kEngineBatch = 32;  // the server's --max_batch_size default

int Fail(const std::string& message) {
  std::fprintf(stderr, "manyshot-bench service: %s\n", message.c_str());
  return 1;
}

v1::TaskSpec Sst2Spec() { return Sst2GrpcSpec(kGroupLength); }

struct GrpcFigures {
  double qps = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

// The server's manyshot_batch_inputs histogram {sum, count} from /metrics, or {0, 0}.
std::pair<double, double> EngineBatchTotals(int metrics_port) {
  const std::string body = ScrapeMetrics(metrics_port);
  const double sum = MetricValue(body, "manyshot_batch_inputs_sum");
  const double count = MetricValue(body, "manyshot_batch_inputs_count");
  if (sum < 0 || count < 0) return {0, 0};
  return {sum, count};
}

// kClients threads, each sending `requests` Classify calls of `batch` inputs after one warm-up.
absl::StatusOr<GrpcFigures> RunClients(const std::shared_ptr<grpc::Channel>& channel,
                                       const std::vector<Example>& inputs, size_t batch,
                                       int requests) {
  std::vector<std::vector<double>> latencies(kClients);
  std::atomic<int> failures{0};
  std::string first_error;
  std::mutex error_mutex;
  std::barrier sync(kClients + 1);
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto stub = v1::ManyShot::NewStub(channel);
      auto call = [&](int r) {
        v1::ClassifyRequest request;
        request.set_task_id("sst2");
        for (size_t j = 0; j < batch; ++j) {
          size_t index = (static_cast<size_t>(c * requests + r) * batch + j) % inputs.size();
          request.add_inputs()->set_text(inputs[index].text);
        }
        v1::ClassifyResponse response;
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
        grpc::Status status = stub->Classify(&context, request, &response);
        if (!status.ok() || static_cast<size_t>(response.results_size()) != batch) {
          failures++;
          std::lock_guard<std::mutex> lock(error_mutex);
          if (first_error.empty()) first_error = status.error_message();
        }
      };
      call(0);  // warm-up
      sync.arrive_and_wait();
      for (int r = 0; r < requests; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        call(r);
        latencies[c].push_back(Seconds(std::chrono::steady_clock::now() - t0));
      }
    });
  }
  sync.arrive_and_wait();
  auto start = std::chrono::steady_clock::now();
  for (auto& t : threads) t.join();
  const double wall = Seconds(std::chrono::steady_clock::now() - start);
  if (failures > 0) {
    return absl::InternalError(
        absl::StrCat(failures.load(), " Classify calls failed: ", first_error));
  }
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  GrpcFigures f;
  f.qps = static_cast<double>(kClients) * requests * static_cast<double>(batch) / wall;
  f.p50_ms = Percentile(all, 0.50) * 1e3;
  f.p99_ms = Percentile(all, 0.99) * 1e3;
  return f;
}

}  // namespace

int RunServiceBench(const BenchOptions& options) {
  Report report("service", options.json);
  const int requests = std::max(1, options.requests);
  std::vector<size_t> batches = {1, 4};
  if (options.batch > 0) batches = {static_cast<size_t>(options.batch)};
  auto dir = Sst2Dir(options.data_dir);
  auto train = LoadSst2(dir / "stsa.binary.train", kShots);
  auto test = LoadSst2(dir / "stsa.binary.test", 512);
  if (!train.ok()) return Fail(train.status().ToString());
  if (!test.ok()) return Fail(test.status().ToString());

  const fs::path binary =
      options.server_binary.empty() ? DefaultServerBinary() : options.server_binary;
  if (!fs::exists(binary)) return Fail("no server binary at " + binary.string());
  const fs::path tmp = options.work_dir / ("service-" + std::to_string(getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  report.Add("threads", options.threads);
  report.Add("clients", kClients);
  report.Add("requests_per_client", requests);
  report.Add("shots", static_cast<double>(kShots));
  report.Add("group_length", kGroupLength);
  // What each side of the overhead ratio does, so a reader of --json knows what it divides.
  report.AddText("grpc_batching",
                 absl::StrCat(kClients,
                              " clients each with one Classify call of --batch inputs in "
                              "flight; the server's scheduler forms engine batches (default "
                              "--max_batch_size ",
                              kEngineBatch,
                              ", --batch_window_ms 2); "
                              "rendering and tokenizing run on its preparation pool"));
  report.AddText(
      "in_process_batching",
      absl::StrCat("the same model, task and inputs in this process: IclTask::Classify "
                   "(render and tokenize, then compute on --threads engine threads) in "
                   "engine batches of ",
                   kEngineBatch,
                   " (overhead_ratio) or of the server's mean engine batch from /metrics "
                   "(overhead_ratio_same_batching)"));

  // 1. Through gRPC.
  auto started = StartBenchServer(binary, tmp, options.threads);
  if (!started.ok()) return Fail(started.status().ToString());
  const int port = started->grpc_port;
  const int metrics_port = started->metrics_port;
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                           grpc::InsecureChannelCredentials(), channel_args);
  std::string error;
  auto stop_server = [&]() -> bool { return StopBenchServer(*started); };
  if (absl::Status s = RegisterTask(channel, "sst2", Sst2Spec(), *train); !s.ok()) {
    error = std::string(s.message());
  }
  if (!error.empty()) {
    stop_server();
    return Fail(error);
  }

  // 2. In process: the model the server generated, the same task and inputs. Loaded while the
  // (idle) server runs, so each gRPC round is followed at once by its in-process reference and
  // the ratio compares runs seconds apart: on a shared machine the load drifts over minutes.
  const fs::path model_dir = tmp / "data" / "models" / "default-gpt2-tiny";
  CpuBackend backend(options.threads);
  auto model = Transformer::Load(model_dir, backend);
  auto tokenizer = model.ok() ? LoadTokenizer(model_dir) : model.status();
  server::ServerConfig config;
  v1::CreateTaskRequest same;
  for (const Example& e : *train) {
    auto* d = same.add_demonstrations();
    d->set_text(e.text);
    d->set_label(e.label);
  }
  auto task_options = server::ToTaskOptions(Sst2Spec(), config);
  auto demos = server::ToDemonstrations(same.demonstrations(), Sst2Spec(), config);
  absl::StatusOr<std::unique_ptr<IclTask>> task = absl::UnknownError("not prepared");
  if (!model.ok()) {
    error = model.status().ToString();
  } else if (!tokenizer.ok()) {
    error = tokenizer.status().ToString();
  } else if (!task_options.ok()) {
    error = task_options.status().ToString();
  } else if (!demos.ok()) {
    error = demos.status().ToString();
  } else {
    task = IclTask::Prepare(**model, **tokenizer, *task_options, *demos);
    if (!task.ok()) error = task.status().ToString();
  }
  auto encoded = task.ok() ? (*task)->EncodeContext() : task.status();
  if (error.empty() && !encoded.ok()) error = encoded.status().ToString();
  if (!error.empty()) {
    stop_server();
    return Fail(error);
  }
  report.Add("context_tokens", static_cast<double>(encoded->tokens));

  // q/s classifying `inputs` in engine batches of `chunk` inputs (median of repeats).
  auto in_process_qps = [&](const std::vector<Example>& inputs, size_t chunk) -> double {
    bool ok = true;
    double seconds = MedianSeconds(
        [&] {
          for (size_t i = 0; i < inputs.size(); i += chunk) {
            std::vector<Example> part(
                inputs.begin() + static_cast<std::ptrdiff_t>(i),
                inputs.begin() + static_cast<std::ptrdiff_t>(std::min(inputs.size(), i + chunk)));
            ok &= (*task)->Classify(&*encoded, part).ok();
          }
        },
        std::max(1, options.repeats));
    return ok ? static_cast<double>(inputs.size()) / seconds : 0.0;
  };

  const int rounds = std::max(1, options.repeats);
  report.Add("rounds", rounds);
  for (size_t batch : batches) {
    // The inputs the clients send, in the order they are built (client-major).
    std::vector<Example> inputs;
    for (int c = 0; c < kClients; ++c) {
      for (int r = 0; r < requests; ++r) {
        for (size_t j = 0; j < batch; ++j) {
          inputs.push_back(
              (*test)[(static_cast<size_t>(c * requests + r) * batch + j) % test->size()]);
        }
      }
    }
    std::vector<double> grpc_qps, full_qps, same_qps, ratios, same_ratios, p50s, p99s, engine;
    for (int round = 0; round < rounds && error.empty(); ++round) {
      const auto before = EngineBatchTotals(metrics_port);
      auto f = RunClients(channel, *test, batch, requests);
      if (!f.ok()) {
        error = std::string(f.status().message());
        break;
      }
      const auto after = EngineBatchTotals(metrics_port);
      double mean_batch = static_cast<double>(kEngineBatch);
      if (after.second > before.second) {
        mean_batch = (after.first - before.first) / (after.second - before.second);
      }
      // The reference in the engine's best batches, and in batches as large as the server's
      // scheduler actually formed (the same batching, so the ratio is the service's own cost).
      const double full = in_process_qps(inputs, kEngineBatch);
      const double same_batching =
          in_process_qps(inputs, std::max<size_t>(1, static_cast<size_t>(std::lround(mean_batch))));
      if (full <= 0 || same_batching <= 0) {
        error = "in-process Classify failed";
        break;
      }
      grpc_qps.push_back(f->qps);
      p50s.push_back(f->p50_ms);
      p99s.push_back(f->p99_ms);
      engine.push_back(mean_batch);
      full_qps.push_back(full);
      same_qps.push_back(same_batching);
      ratios.push_back(full / f->qps);
      same_ratios.push_back(same_batching / f->qps);
    }
    if (!error.empty()) break;
    const std::string p = "batch" + std::to_string(batch) + "_";
    const std::string target = batch == 1 ? "1.1" : "1.05";
    report.Add(p + "grpc_queries_per_second", Percentile(grpc_qps, 0.5), "q/s (median of rounds)");
    report.Add(p + "grpc_latency_p50_ms", Percentile(p50s, 0.5), "ms (median of rounds)");
    report.Add(p + "grpc_latency_p99_ms", Percentile(p99s, 0.5), "ms (median of rounds)");
    report.Add(p + "grpc_mean_engine_batch", Percentile(engine, 0.5),
               "inputs per batch the server's scheduler ran (from /metrics)");
    report.Add(p + "in_process_queries_per_second", Percentile(full_qps, 0.5),
               "q/s in engine batches of 32");
    report.Add(p + "in_process_same_batching_queries_per_second", Percentile(same_qps, 0.5),
               "q/s in engine batches of the server's mean batch");
    report.Add(p + "overhead_ratio", Percentile(ratios, 0.5),
               "x (in-process in batches of 32 / gRPC, median of per-round ratios; target <= " +
                   target + ")");
    report.Add(p + "overhead_ratio_same_batching", Percentile(same_ratios, 0.5),
               "x (in-process in the server's batch sizes / gRPC, median of per-round ratios)");
    // Every round's figures, so the spread (the machine's drift between back-to-back runs) is
    // visible beside the medians: when the server's mean batch is 32, both references do the
    // same work and differ only by that drift.
    report.AddJson(p + "rounds", {{"grpc_queries_per_second", grpc_qps},
                                  {"in_process_queries_per_second", full_qps},
                                  {"in_process_same_batching_queries_per_second", same_qps},
                                  {"grpc_mean_engine_batch", engine},
                                  {"grpc_latency_p99_ms", p99s}});
  }
  if (!stop_server() && error.empty()) error = "the server did not exit 0 after SIGTERM";
  if (!error.empty()) return Fail(error);
  fs::remove_all(tmp);
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

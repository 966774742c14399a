// manyshot-bench service: end-to-end Classify throughput and latency through gRPC against the
// real manyshot-server binary (started here on 127.0.0.1 with ephemeral ports and a temporary data
// directory), with 32 concurrent clients each sending requests of a fixed batch of inputs. The
// same-run reference: the in-process engine on the same generated default model, the same 64-shot
// SST-2 task and the same inputs, classified in the scheduler's batches of up to 32 inputs.
// Reported: q/s both ways, p50/p99 request latency, overhead = in-process q/s / gRPC q/s.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_common.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"
#include "grpcpp/grpcpp.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "server/server_config.h"
#include "server/task_spec.h"

extern char** environ;

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

fs::path DefaultServerBinary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / ".." / "server" / "manyshot-server").lexically_normal();
}

// Starts the server; returns its pid (or -1).
pid_t StartServer(const fs::path& binary, const fs::path& dir, int threads) {
  std::vector<std::string> args = {binary.string(),
                                   "--listen_address=127.0.0.1:0",
                                   "--metrics_address=127.0.0.1:0",
                                   "--port_file=" + (dir / "ports").string(),
                                   "--data_dir=" + (dir / "data").string(),
                                   "--default_tokenizer_dir=/usr/local/share/manyshot/gpt2",
                                   "--threads=" + std::to_string(threads),
                                   "--log_level=warn"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  return pid;
}

// Waits (up to 180 s: the first start generates the default model) for the port file.
int WaitForGrpcPort(const fs::path& port_file, pid_t pid) {
  for (int i = 0; i < 1800; ++i) {
    std::ifstream in(port_file);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("grpc=", 0) == 0) return std::stoi(line.substr(5));
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

v1::TaskSpec Sst2Spec() {
  v1::TaskSpec spec;
  spec.set_input_template("Sentence: {text}\nLabel:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_group_length(kGroupLength);
  return spec;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

struct GrpcFigures {
  double qps = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

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

  // 1. Through gRPC.
  pid_t pid = StartServer(binary, tmp, options.threads);
  if (pid < 0) return Fail("cannot start " + binary.string());
  int port = WaitForGrpcPort(tmp / "ports", pid);
  if (port < 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return Fail("the server did not start (no port file)");
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", port),
                                           grpc::InsecureChannelCredentials(), channel_args);
  std::vector<GrpcFigures> grpc_figures;
  std::string error;
  {
    auto stub = v1::ManyShot::NewStub(channel);
    grpc::ClientContext context;
    auto stream = stub->CreateTask(&context);
    v1::CreateTaskRequest request;
    request.set_task_id("sst2");
    *request.mutable_spec() = Sst2Spec();
    for (const Example& e : *train) {
      auto* d = request.add_demonstrations();
      d->set_text(e.text);
      d->set_label(e.label);
    }
    stream->Write(request);
    stream->WritesDone();
    v1::CreateTaskResponse response;
    bool created = false;
    while (stream->Read(&response)) created |= response.has_result();
    grpc::Status status = stream->Finish();
    if (!status.ok() || !created) error = "CreateTask: " + status.error_message();
  }
  for (size_t batch : batches) {
    if (!error.empty()) break;
    auto f = RunClients(channel, *test, batch, requests);
    if (!f.ok()) {
      error = std::string(f.status().message());
      break;
    }
    grpc_figures.push_back(*f);
  }
  kill(pid, SIGTERM);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (!error.empty()) return Fail(error);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return Fail("the server did not exit 0 after SIGTERM");
  }

  // 2. In process: the model the server generated, the same task and inputs, batches of <= 32.
  const fs::path model_dir = tmp / "data" / "models" / "default-gpt2-tiny";
  CpuBackend backend(options.threads);
  auto model = Transformer::Load(model_dir, backend);
  if (!model.ok()) return Fail(model.status().ToString());
  auto tokenizer = LoadTokenizer(model_dir);
  if (!tokenizer.ok()) return Fail(tokenizer.status().ToString());
  server::ServerConfig config;
  v1::CreateTaskRequest same;
  for (const Example& e : *train) {
    auto* d = same.add_demonstrations();
    d->set_text(e.text);
    d->set_label(e.label);
  }
  auto task_options = server::ToTaskOptions(Sst2Spec(), config);
  if (!task_options.ok()) return Fail(task_options.status().ToString());
  auto demos = server::ToDemonstrations(same.demonstrations(), Sst2Spec(), config);
  if (!demos.ok()) return Fail(demos.status().ToString());
  auto task = IclTask::Prepare(**model, **tokenizer, *task_options, *demos);
  if (!task.ok()) return Fail(task.status().ToString());
  auto encoded = (*task)->EncodeContext();
  if (!encoded.ok()) return Fail(encoded.status().ToString());
  report.Add("context_tokens", static_cast<double>(encoded->tokens));

  for (size_t b = 0; b < grpc_figures.size(); ++b) {
    const size_t batch = batches[b];
    // The inputs the clients sent, in the order they were built (client-major).
    std::vector<Example> inputs;
    for (int c = 0; c < kClients; ++c) {
      for (int r = 0; r < requests; ++r) {
        for (size_t j = 0; j < batch; ++j) {
          inputs.push_back(
              (*test)[(static_cast<size_t>(c * requests + r) * batch + j) % test->size()]);
        }
      }
    }
    auto classify_all = [&]() -> bool {
      for (size_t i = 0; i < inputs.size(); i += kEngineBatch) {
        std::vector<Example> chunk(inputs.begin() + static_cast<std::ptrdiff_t>(i),
                                   inputs.begin() + static_cast<std::ptrdiff_t>(
                                                        std::min(inputs.size(), i + kEngineBatch)));
        if (!(*task)->Classify(&*encoded, chunk).ok()) return false;
      }
      return true;
    };
    bool ok = true;
    double seconds = MedianSeconds([&] { ok &= classify_all(); }, std::max(1, options.repeats));
    if (!ok) return Fail("in-process Classify failed");
    const double in_process_qps = static_cast<double>(inputs.size()) / seconds;
    const GrpcFigures& g = grpc_figures[b];
    const std::string p = "batch" + std::to_string(batch) + "_";
    report.Add(p + "grpc_queries_per_second", g.qps, "q/s");
    report.Add(p + "grpc_latency_p50_ms", g.p50_ms, "ms");
    report.Add(p + "grpc_latency_p99_ms", g.p99_ms, "ms");
    report.Add(p + "in_process_queries_per_second", in_process_qps, "q/s");
    report.Add(p + "overhead_ratio", in_process_qps / g.qps,
               "x (in-process / gRPC; target <= 1.2)");
  }
  fs::remove_all(tmp);
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

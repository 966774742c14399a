// manyshot-bench soak: --streams StreamClassify streams (default 64) against one server for
// --duration seconds (default 600), then --idle seconds (default 60) with no load, sampling every
// --sample seconds: requests answered and errors in the window, the window's p50/p99 latency, the
// server's RSS and thread count (/proc/PID/status) and its queue depth (manyshot_queue_inputs on
// /metrics). The verdict says whether RSS and threads level off (soak_series.h has the criterion)
// and whether any request failed. The server is started here on the generated default model with a
// 64-shot SST-2 task (like `service`), or is --target (with --target_pid for /proc and
// --target_metrics_port for /metrics; the task "sst2" is registered there too).
//
// Each stream sends one request (--batch inputs, default 1) at a time and waits for its answer, so
// latency is the server's, not a client queue's; a stream is closed and reopened every
// --stream_requests requests, so per-call setup and teardown run thousands of times as well.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_common.h"
#include "bench/bench_server.h"
#include "bench/percentile.h"
#include "bench/soak_series.h"
#include "bench/sst2_data.h"
#include "bench/subcommands.h"
#include "grpcpp/grpcpp.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr size_t kShots = 64;
constexpr uint32_t kGroupLength = 256;  // as the service bench

int Fail(const std::string& message) {
  std::fprintf(stderr, "manyshot-bench soak: %s\n", message.c_str());
  return 1;
}

// What the streams did since the last sample.
class Window {
 public:
  void Record(double seconds, bool ok, const std::string& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ok) {
      latencies_.push_back(seconds);
    } else {
      ++errors_;
      ++total_errors_;
      if (first_error_.empty()) first_error_ = error;
    }
  }
  // Fills the window's figures into *s and starts a new window.
  void Take(SoakSample* s) {
    std::vector<double> latencies;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      latencies.swap(latencies_);
      s->errors = errors_;
      errors_ = 0;
    }
    s->requests = static_cast<long>(latencies.size());
    s->p50_ms = Percentile(latencies, 0.50) * 1e3;
    s->p99_ms = Percentile(latencies, 0.99) * 1e3;
  }
  long total_errors() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return total_errors_;
  }
  std::string first_error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return first_error_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<double> latencies_;
  long errors_ = 0;
  long total_errors_ = 0;
  std::string first_error_;
};

// One stream: request, answer, request, ... until `stop`; reopened every `per_stream` requests.
void RunStream(const std::shared_ptr<grpc::Channel>& channel, const std::vector<Example>& inputs,
               size_t batch, int per_stream, size_t offset, const std::atomic<bool>& stop,
               Window& window) {
  auto stub = v1::ManyShot::NewStub(channel);
  size_t next = offset;
  long id = 0;
  while (!stop.load()) {
    grpc::ClientContext context;
    auto stream = stub->StreamClassify(&context);
    bool broken = false;
    for (int n = 0; (per_stream <= 0 || n < per_stream) && !stop.load(); ++n) {
      v1::ClassifyRequest request;
      request.set_task_id("sst2");
      request.set_request_id(std::to_string(++id));
      for (size_t j = 0; j < batch; ++j) {
        request.add_inputs()->set_text(inputs[next++ % inputs.size()].text);
      }
      const auto t0 = Clock::now();
      v1::ClassifyResponse response;
      if (!stream->Write(request) || !stream->Read(&response)) {
        broken = true;
        break;
      }
      const double seconds = Seconds(Clock::now() - t0);
      if (response.has_error() && response.error().code() != 0) {
        window.Record(seconds, false, response.error().message());
      } else if (response.request_id() != request.request_id() ||
                 static_cast<size_t>(response.results_size()) != batch) {
        window.Record(seconds, false, "an answer for another request or with missing results");
      } else {
        window.Record(seconds, true, "");
      }
    }
    stream->WritesDone();
    grpc::Status status = stream->Finish();
    if (broken || !status.ok()) {
      window.Record(0, false, "StreamClassify: " + status.error_message());
      if (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

void PrintTable(const std::vector<SoakSample>& samples) {
  std::printf("%8s %5s %8s %6s %9s %9s %9s %7s %6s\n", "t_s", "phase", "requests", "errors",
              "p50_ms", "p99_ms", "rss_mib", "threads", "queue");
  for (const SoakSample& s : samples) {
    std::printf("%8.1f %5s %8ld %6ld %9.2f %9.2f %9.1f %7d %6.0f\n", s.t_seconds,
                PhaseName(s.phase), s.requests, s.errors, s.p50_ms, s.p99_ms, s.rss_mib, s.threads,
                s.queue_inputs);
  }
}

}  // namespace

int RunSoakBench(const BenchOptions& options) {
  Report report("soak", options.json);
  const size_t batch = options.batch > 0 ? static_cast<size_t>(options.batch) : 1;
  auto dir = Sst2Dir(options.data_dir);
  auto train = LoadSst2(dir / "stsa.binary.train", kShots);
  auto test = LoadSst2(dir / "stsa.binary.test", 1000);
  if (!train.ok()) return Fail(train.status().ToString());
  if (!test.ok()) return Fail(test.status().ToString());

  // The server: started here, or --target.
  std::optional<BenchServer> own;
  const fs::path tmp = options.work_dir / ("soak-" + std::to_string(getpid()));
  std::string address = options.target;
  pid_t pid = options.target_pid;
  int metrics_port = options.target_metrics_port;
  if (address.empty()) {
    const fs::path binary =
        options.server_binary.empty() ? DefaultServerBinary() : options.server_binary;
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    auto started = StartBenchServer(binary, tmp, options.threads);
    if (!started.ok()) return Fail(started.status().ToString());
    own = *started;
    address = absl::StrCat("127.0.0.1:", own->grpc_port);
    pid = own->pid;
    metrics_port = own->metrics_port;
  }
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  if (absl::Status s = RegisterTask(channel, "sst2", Sst2GrpcSpec(kGroupLength), *train); !s.ok()) {
    if (own) StopBenchServer(*own);
    return Fail(std::string(s.message()));
  }

  // Sampling: the window's figures, then the server's process and queue.
  std::vector<SoakSample> samples;
  Window window;
  const auto start = Clock::now();
  auto sample = [&](SoakSample::Phase phase) {
    SoakSample s;
    s.t_seconds = Seconds(Clock::now() - start);
    s.phase = phase;
    window.Take(&s);
    if (pid > 0) ReadProcStatus(pid, &s.rss_mib, &s.threads);
    if (metrics_port > 0) {
      const std::string body = ScrapeMetrics(metrics_port);
      s.queue_inputs = MetricValue(body, "manyshot_queue_inputs");
      if (pid <= 0) {
        const double rss = MetricValue(body, "process_resident_memory_bytes");
        if (rss >= 0) s.rss_mib = rss / (1024.0 * 1024.0);
      }
    }
    samples.push_back(s);
    if (!options.json) {
      std::fprintf(
          stderr, "soak %6.0f s %s: %ld requests, %ld errors, p99 %.1f ms, %.1f MiB, %d threads\n",
          s.t_seconds, PhaseName(phase), s.requests, s.errors, s.p99_ms, s.rss_mib, s.threads);
    }
  };
  const auto period = std::chrono::duration<double>(std::max(0.1, options.sample_seconds));
  auto sample_until = [&](double until_seconds, SoakSample::Phase phase) {
    // The next multiple of the period after now (the drain sample falls between two).
    const double periods = std::floor(Seconds(Clock::now() - start) / period.count()) + 1;
    auto next = start + std::chrono::duration_cast<Clock::duration>(period * periods);
    const auto end = start + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(until_seconds));
    while (next <= end) {
      std::this_thread::sleep_until(next);
      sample(phase);
      next += std::chrono::duration_cast<Clock::duration>(period);
    }
  };

  std::atomic<bool> stop{false};
  std::vector<std::thread> streams;
  for (int i = 0; i < options.streams; ++i) {
    streams.emplace_back([&, i] {
      RunStream(channel, *test, batch, options.stream_requests, static_cast<size_t>(i) * 997, stop,
                window);
    });
  }
  sample_until(options.duration_seconds, SoakSample::Phase::kLoad);
  stop = true;
  for (auto& t : streams) t.join();
  sample(SoakSample::Phase::kDrain);  // the requests answered after the last load sample
  sample_until(options.duration_seconds + options.idle_seconds, SoakSample::Phase::kIdle);

  const SoakVerdict v = JudgeSoak(samples, options.duration_seconds);
  long requests = 0;
  for (const SoakSample& s : samples) requests += s.requests;
  // Early and late latency: the first and the last third of the load.
  std::vector<double> p50_early, p99_early, p50_late, p99_late;
  for (const SoakSample& s : samples) {
    if (s.phase != SoakSample::Phase::kLoad || s.requests == 0) continue;
    if (s.t_seconds <= options.duration_seconds / 3) {
      p50_early.push_back(s.p50_ms);
      p99_early.push_back(s.p99_ms);
    } else if (s.t_seconds > 2 * options.duration_seconds / 3) {
      p50_late.push_back(s.p50_ms);
      p99_late.push_back(s.p99_ms);
    }
  }
  report.Add("streams", options.streams);
  report.Add("inputs_per_request", static_cast<double>(batch));
  report.Add("duration_seconds", options.duration_seconds, "s of load");
  report.Add("idle_seconds", options.idle_seconds, "s idle after");
  report.Add("requests", static_cast<double>(requests));
  report.Add("requests_per_second", static_cast<double>(requests) / options.duration_seconds,
             "req/s");
  report.Add("errors", static_cast<double>(window.total_errors()));
  if (window.total_errors() > 0) report.AddText("first_error", window.first_error());
  report.Add("p50_ms_first_third", Percentile(p50_early, 0.5), "ms (median of windows)");
  report.Add("p99_ms_first_third", Percentile(p99_early, 0.5), "ms (median of windows)");
  report.Add("p50_ms_last_third", Percentile(p50_late, 0.5), "ms (median of windows)");
  report.Add("p99_ms_last_third", Percentile(p99_late, 0.5), "ms (median of windows)");
  report.Add("rss_first_sample_mib", samples.empty() ? -1 : samples.front().rss_mib, "MiB");
  report.Add("rss_middle_third_mean_mib", v.rss_middle_mib, "MiB");
  report.Add("rss_last_third_mean_mib", v.rss_last_mib, "MiB");
  report.Add("rss_growth_mib", v.rss_growth_mib,
             absl::StrCat("MiB (allowed ", v.rss_allowed_growth_mib, ")"));
  report.Add("rss_slope_mib_per_min", v.rss_slope_mib_per_min, "MiB/min (last two thirds)");
  report.Add("rss_load_max_mib", v.rss_load_max_mib, "MiB");
  report.Add("rss_idle_end_mib", v.rss_idle_end_mib, "MiB");
  report.Add("threads_first_sample", samples.empty() ? -1 : samples.front().threads);
  report.Add("threads_middle_third_max", v.threads_middle_max);
  report.Add("threads_last_third_max", v.threads_last_max);
  report.Add("threads_drain", v.threads_drain, "(as the streams closed)");
  report.Add("threads_idle_end", v.threads_idle_end);
  report.Add("levels_off", v.levels_off() ? 1 : 0, v.enough_samples ? "" : "(too few samples)");
  report.AddText("criterion", SoakVerdict::Criterion());
  report.AddJson("samples", SamplesJson(samples));
  if (!options.json) PrintTable(samples);
  if (own && !StopBenchServer(*own)) return Fail("the server did not exit 0 after SIGTERM");
  if (own) fs::remove_all(tmp);
  report.Print();
  return 0;
}

}  // namespace manyshot::bench

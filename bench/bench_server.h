// The manyshot-server a benchmark starts (127.0.0.1, ephemeral gRPC and metrics ports, a data
// directory of its own) and its Prometheus /metrics: shared by the service and soak subcommands.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/prompting/icl_task.h"
#include "grpcpp/channel.h"
#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::bench {

struct BenchServer {
  pid_t pid = -1;
  int grpc_port = -1;
  int metrics_port = -1;
};

// <dir of manyshot-bench>/../server/manyshot-server.
std::filesystem::path DefaultServerBinary();

// Starts `binary` with --data_dir=dir/data, --threads and `extra_flags`, and waits (up to 180 s:
// the first start generates the default model) until it has written its ports.
absl::StatusOr<BenchServer> StartBenchServer(const std::filesystem::path& binary,
                                             const std::filesystem::path& dir, int threads,
                                             const std::vector<std::string>& extra_flags = {});

// The SST-2 task as the service registers it: "Sentence: {text}\nLabel:", negative/positive.
v1::TaskSpec Sst2GrpcSpec(uint32_t group_length);

// CreateTask `task_id` with `spec` and `examples` (label text) in one message; OK once stored.
absl::Status RegisterTask(const std::shared_ptr<grpc::Channel>& channel, const std::string& task_id,
                          const v1::TaskSpec& spec, const std::vector<Example>& examples);

// SIGTERM, then waits; true when the server exited 0.
bool StopBenchServer(const BenchServer& server);

// The body of GET /metrics on 127.0.0.1:port ("" on failure).
std::string ScrapeMetrics(int port);

// The value of the first sample named exactly `name` (no labels) in a /metrics body, or -1.
double MetricValue(const std::string& body, const std::string& name);

}  // namespace manyshot::bench

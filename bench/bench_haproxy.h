// HAProxy in front of bench replicas: deploy/proxy/haproxy.cfg.template rendered by
// render-haproxy-cfg.sh, started on loopback ports of its own, and ready only once a call has
// gone through it to a replica.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"

namespace manyshot::bench {

class BenchHaproxy {
 public:
  // Renders the configuration into `dir`, starts /usr/sbin/haproxy and waits (up to `limit`)
  // until a gRPC health check through it reaches a replica. A start whose port another process
  // took in between is tried again. The error names what failed and ends with HAProxy's log.
  static absl::StatusOr<std::unique_ptr<BenchHaproxy>> Start(
      const std::filesystem::path& dir, const std::vector<std::string>& replicas,
      std::chrono::seconds limit);
  ~BenchHaproxy();  // SIGTERM to its process group, SIGKILL after 5 s
  BenchHaproxy(const BenchHaproxy&) = delete;
  BenchHaproxy& operator=(const BenchHaproxy&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // The last 4 KiB of its log (stdout and stderr).
  std::string Log() const;

 private:
  BenchHaproxy(std::filesystem::path dir, int port) : dir_(std::move(dir)), port_(port) {}
  absl::Status Spawn(int metrics_port, const std::vector<std::string>& replicas);
  absl::Status AwaitReady(std::chrono::steady_clock::time_point deadline);
  void Stop();

  std::filesystem::path dir_;
  int port_;
  pid_t pid_ = -1;
};

// A channel as the documented clients make one: the retry policy of
// deploy/proxy/grpc_service_config.json (UNAVAILABLE is retried), and reconnects within 1 s.
std::shared_ptr<grpc::Channel> ProxyClientChannel(const std::string& address);

}  // namespace manyshot::bench

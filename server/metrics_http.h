// The HTTP side of /metrics: a small cpp-httplib server that answers GET (and HEAD) /metrics in
// Prometheus's text format and every other path with 404. Scrapers, browsers, blackbox probes and
// mistyped probe paths all reach it, so nothing a client sends may take the process down.
//
// Why not prometheus-cpp's Exposer: it serves through civetweb, whose workers run on fixed
// 100 KiB stacks, and glibc carves the static TLS of the libraries linked into the server
// (OpenBLAS's ~60 KiB) out of every thread's stack. What was left was enough for /metrics but not
// for civetweb's error pages: any other path crashed the server. cpp-httplib's workers are
// std::threads with the process's default stack size.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/metric_family.h"

namespace httplib {
class Server;
}

namespace manyshot::server {

class MetricsHttpServer {
 public:
  // What one scrape reports; called on a worker thread, once per GET /metrics.
  using Collect = std::function<std::vector<prometheus::MetricFamily>()>;

  // Worker threads: scrapes are rare and cheap, and a handful of slow or idle clients must not
  // keep Prometheus waiting.
  static constexpr int kWorkerThreads = 4;
  // A request's line and headers are read within this time or the connection is closed.
  static constexpr int kReadTimeoutSeconds = 5;
  // An idle keep-alive connection is closed after this long (it holds a worker meanwhile).
  static constexpr int kKeepAliveSeconds = 2;

  // Binds `address` ("host:port", "[v6]:port"; port 0 picks a free one) and starts serving.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address,
                                                                  Collect collect);
  // Stops accepting, finishes the requests in flight and joins every thread.
  ~MetricsHttpServer();

  int port() const { return port_; }

 private:
  MetricsHttpServer();
  void Serve();

  std::unique_ptr<httplib::Server> http_;
  int listening_fd_ = -1;  // owned by http_
  std::thread listener_;
  std::atomic<bool> listener_finished_{false};
  int port_ = 0;
};

}  // namespace manyshot::server

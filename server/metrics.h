// The Prometheus registry and its HTTP endpoint. Every metric the server exports is created here
// (or registered into `registry()`), named manyshot_* in base units.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/registry.h"

namespace manyshot::server {

class MetricsHttpServer;
class ProcessMetrics;

class Metrics {
 public:
  // Starts serving /metrics on `address` (host:port, port 0 = ephemeral); "" serves nothing.
  static absl::StatusOr<std::unique_ptr<Metrics>> Start(const std::string& address);
  ~Metrics();

  prometheus::Registry& registry() { return *registry_; }
  // Adds a scrape-time collector to /metrics. Only a weak pointer is kept: a collector that is
  // gone is skipped.
  void Register(std::shared_ptr<prometheus::Collectable> collectable);
  // manyshot_backend_info{backend, device, compute_dtype, kv_dtype} 1: what is running (the build
  // info says what was built).
  void SetBackend(const std::string& backend, const std::string& device,
                  const std::string& compute_dtype, const std::string& kv_dtype);
  // manyshot_model_info{model_type, architecture} 1: the served model ("t5", "encoder-decoder").
  void SetModel(const std::string& model_type, const std::string& architecture);
  // The bound port, or 0 when not serving.
  int port() const { return port_; }

 private:
  Metrics();
  // Every registered collectable's families, for one scrape.
  std::vector<prometheus::MetricFamily> Collect();

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<ProcessMetrics> process_;
  std::mutex collectables_mutex_;
  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  // Declared last: stopped first, before what its scrapes read.
  std::unique_ptr<MetricsHttpServer> http_;
  int port_ = 0;
};

}  // namespace manyshot::server

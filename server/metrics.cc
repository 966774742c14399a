#include "server/metrics.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "prometheus/gauge.h"
#include "server/build_info.h"
#include "server/process_metrics.h"

namespace manyshot::server {

void Metrics::SetBackend(const std::string& backend, const std::string& device,
                         const std::string& compute_dtype, const std::string& kv_dtype) {
  prometheus::BuildGauge()
      .Name("manyshot_backend_info")
      .Help("Always 1; labels describe the compute backend this server runs on.")
      .Register(*registry_)
      .Add({{"backend", backend},
            {"device", device},
            {"compute_dtype", compute_dtype},
            {"kv_dtype", kv_dtype}})
      .Set(1);
}

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(const std::string& address) {
  std::unique_ptr<Metrics> metrics(new Metrics());
  metrics->registry_ = std::make_shared<prometheus::Registry>();
  metrics->process_ = std::make_shared<ProcessMetrics>();
  prometheus::BuildGauge()
      .Name("manyshot_build_info")
      .Help("Always 1; labels describe the build.")
      .Register(*metrics->registry_)
      .Add({{"version", kVersion},
            {"compiler", kCompiler},
            {"build_type", kBuildType},
            {"cuda_built", kCudaEnabled ? "true" : "false"}})
      .Set(1);
  if (address.empty()) return metrics;
  try {
    // civetweb takes "host:port"; a single thread is plenty for scrapes.
    metrics->exposer_ = std::make_unique<prometheus::Exposer>(address, 1);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on --metrics_address=", address, ": ", e.what()));
  }
  metrics->exposer_->RegisterCollectable(metrics->registry_);
  metrics->exposer_->RegisterCollectable(metrics->process_);
  auto ports = metrics->exposer_->GetListeningPorts();
  metrics->port_ = ports.empty() ? 0 : ports.front();
  return metrics;
}

void Metrics::Register(std::shared_ptr<prometheus::Collectable> collectable) {
  if (exposer_) exposer_->RegisterCollectable(collectable);
}

Metrics::~Metrics() = default;

}  // namespace manyshot::server

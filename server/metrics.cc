#include "server/metrics.h"

#include <iterator>

#include "prometheus/gauge.h"
#include "server/build_info.h"
#include "server/metrics_http.h"
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

void Metrics::SetModel(const std::string& model_type, const std::string& architecture) {
  prometheus::BuildGauge()
      .Name("manyshot_model_info")
      .Help(
          "Always 1; labels describe the served model (architecture: decoder-only or "
          "encoder-decoder).")
      .Register(*registry_)
      .Add({{"model_type", model_type}, {"architecture", architecture}})
      .Set(1);
}

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      process_(std::make_shared<ProcessMetrics>()),
      collectables_{registry_, process_} {}

Metrics::~Metrics() = default;

absl::StatusOr<std::unique_ptr<Metrics>> Metrics::Start(const std::string& address) {
  std::unique_ptr<Metrics> metrics(new Metrics());
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
  auto http = MetricsHttpServer::Start(address, [m = metrics.get()] { return m->Collect(); });
  if (!http.ok()) return http.status();
  metrics->http_ = *std::move(http);
  metrics->port_ = metrics->http_->port();
  return metrics;
}

void Metrics::Register(std::shared_ptr<prometheus::Collectable> collectable) {
  std::lock_guard<std::mutex> lock(collectables_mutex_);
  collectables_.push_back(collectable);
}

std::vector<prometheus::MetricFamily> Metrics::Collect() {
  std::vector<std::shared_ptr<prometheus::Collectable>> alive;
  {
    std::lock_guard<std::mutex> lock(collectables_mutex_);
    for (const auto& weak : collectables_) {
      if (auto collectable = weak.lock()) alive.push_back(std::move(collectable));
    }
  }
  std::vector<prometheus::MetricFamily> families;
  for (const auto& collectable : alive) {
    auto more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  return families;
}

}  // namespace manyshot::server

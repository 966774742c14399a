// Standard Prometheus process metrics (process_cpu_seconds_total, process_resident_memory_bytes,
// ...), read from /proc at scrape time so they cost nothing between scrapes.
#pragma once

#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace manyshot::server {

class ProcessMetrics : public prometheus::Collectable {
 public:
  ProcessMetrics();
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  double start_time_seconds_;
};

}  // namespace manyshot::server

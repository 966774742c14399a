// The service's Prometheus metrics (manyshot_*, base units, counters for totals, histograms for
// latency, batch size and queue wait) and a collector that reads the cache's figures at scrape.
#pragma once

#include <memory>
#include <string>

#include "cache/context_cache.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/task_registry.h"

namespace manyshot::server {

class ServiceMetrics {
 public:
  ServiceMetrics(prometheus::Registry& registry, const ContextCache& cache,
                 const std::string& memory_tier);

  // One finished RPC: counted by method and status code, timed by method.
  void Request(const std::string& method, const std::string& code, double seconds);
  // One request message of a streaming call answered (StreamClassify), apart from the calls.
  void StreamMessage(const std::string& method, const std::string& code, double seconds);
  void TaskEncoded(double seconds) { task_encode_.Observe(seconds); }
  void Batch(size_t inputs) { batch_size_.Observe(static_cast<double>(inputs)); }
  void QueueWait(double seconds) { queue_wait_.Observe(seconds); }
  void QueueDepth(size_t inputs) { queue_depth_.Set(static_cast<double>(inputs)); }
  // CreateTask request bytes held: `bytes` more (a message received) or fewer (a call ended).
  void UploadBytesHeld(uint64_t bytes) { upload_bytes_.Increment(static_cast<double>(bytes)); }
  void UploadBytesReleased(uint64_t bytes) { upload_bytes_.Decrement(static_cast<double>(bytes)); }
  void InputsClassified(size_t n) { inputs_classified_.Increment(static_cast<double>(n)); }
  void TokensEncoded(uint64_t n) { tokens_encoded_.Increment(static_cast<double>(n)); }
  void TokensGenerated(uint64_t n) { tokens_generated_.Increment(static_cast<double>(n)); }
  // Scrape-time cache figures; register with the /metrics endpoint.
  std::shared_ptr<prometheus::Collectable> cache_collector() const { return cache_collector_; }

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& latency_;
  prometheus::Family<prometheus::Counter>& stream_messages_;
  prometheus::Family<prometheus::Histogram>& stream_latency_;
  prometheus::Histogram& task_encode_;
  prometheus::Histogram& batch_size_;
  prometheus::Histogram& queue_wait_;
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& upload_bytes_;
  prometheus::Counter& inputs_classified_;
  prometheus::Counter& tokens_encoded_;
  prometheus::Counter& tokens_generated_;
  std::shared_ptr<prometheus::Collectable> cache_collector_;
};

// Exposes ContextCache::Stats() as manyshot_cache_* metrics, read at scrape time.
// Cache figures per tier; `memory_tier` names the memory tier's label ("gpu" or "host").
std::shared_ptr<prometheus::Collectable> MakeCacheCollector(const ContextCache& cache,
                                                            const std::string& memory_tier);

// Exposes the registry's task states, read at scrape time: manyshot_tasks_by_state{state} and
// manyshot_tasks_quarantined (FAILED because the stored record is damaged: alert on > 0).
std::shared_ptr<prometheus::Collectable> MakeTaskStateCollector(const TaskRegistry& registry);

}  // namespace manyshot::server

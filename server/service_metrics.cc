#include "server/service_metrics.h"

#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace manyshot::server {
namespace {

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

class CacheCollector : public prometheus::Collectable {
 public:
  // The memory tier is labelled where it lives: "gpu" on the CUDA backend (then "host" is the
  // pinned host tier), "host" on the CPU backend.
  CacheCollector(const ContextCache& cache, std::string memory_tier)
      : cache_(cache), memory_tier_(std::move(memory_tier)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const CacheStats s = cache_.Stats();
    std::vector<prometheus::MetricFamily> out;
    auto add = [&](const std::string& name, const std::string& help, prometheus::MetricType type,
                   std::vector<std::pair<std::string, double>> by_tier) {
      prometheus::MetricFamily family{name, help, type, {}};
      for (const auto& [tier, value] : by_tier) {
        prometheus::ClientMetric m;
        if (!tier.empty()) m.label.push_back({"tier", tier});
        if (type == prometheus::MetricType::Counter) {
          m.counter.value = value;
        } else {
          m.gauge.value = value;
        }
        family.metric.push_back(m);
      }
      out.push_back(std::move(family));
    };
    // The host tier's rows appear only when it exists (a GPU memory tier).
    const bool host_tier = memory_tier_ == "gpu";
    auto Tiers = [&](double memory, double host, double disk) {
      std::vector<std::pair<std::string, double>> rows = {{memory_tier_, memory}};
      if (host_tier) rows.push_back({"host", host});
      rows.push_back({"disk", disk});
      return rows;
    };
    using T = prometheus::MetricType;
    add("manyshot_cache_bytes", "Bytes of key/value state held, per tier.", T::Gauge,
        Tiers(s.memory_bytes, s.host_bytes, s.disk_bytes));
    add("manyshot_memory_reserved_bytes",
        "Bytes counted against the memory tier's budget besides its key/value state: what T5 "
        "tasks keep between queries (their demonstrations' first-layer q|k|v).",
        T::Gauge, {{"", s.memory_reserved_bytes}});
    add("manyshot_cache_budget_bytes", "Byte budget per tier (0: unlimited).", T::Gauge,
        Tiers(s.memory_budget_bytes, s.host_budget_bytes, s.disk_budget_bytes));
    add("manyshot_cache_entries", "Cache entries per tier.", T::Gauge,
        Tiers(s.memory_entries, s.host_entries, s.disk_entries));
    add("manyshot_cache_hits_total", "Lookups served by the tier.", T::Counter,
        Tiers(s.memory_hits, s.host_hits, s.disk_hits));
    add("manyshot_cache_misses_total", "Lookups the tier could not serve.", T::Counter,
        Tiers(s.memory_misses, s.host_misses, s.disk_misses));
    add("manyshot_cache_evictions_total", "Entries evicted to stay within the budget.", T::Counter,
        Tiers(s.memory_evictions, s.host_evictions, s.disk_evictions));
    add("manyshot_cache_corruptions_total",
        "Blobs that failed a checksum or shape check (deleted, never served).", T::Counter,
        {{"", s.corruptions_detected}});
    add("manyshot_cache_encodes_total", "Contexts encoded from demonstrations.", T::Counter,
        {{"", s.encodes}});
    add("manyshot_cache_reencodes_total",
        "Encodes of a context that had been stored (evicted or corrupt).", T::Counter,
        {{"", s.re_encodes}});
    add("manyshot_cache_encode_seconds_total", "Time spent encoding contexts.", T::Counter,
        {{"", s.encode_seconds}});
    add("manyshot_cache_restore_seconds_total", "Time spent loading contexts from RocksDB.",
        T::Counter, {{"", s.load_seconds}});
    add("manyshot_cache_restores_total", "Contexts loaded from RocksDB.", T::Counter,
        {{"", s.loads}});
    add("manyshot_tasks", "Tasks registered.", T::Gauge, {{"", s.tasks}});
    add("manyshot_disk_free_bytes", "Free bytes on the data directory's filesystem.", T::Gauge,
        {{"", s.disk_free_bytes}});
    add("manyshot_store_writable",
        "1 while the store accepts writes (the --min_free_disk_bytes reserve is free and no "
        "out-of-space error is pending); 0 while creates are refused (existing tasks keep "
        "serving).",
        T::Gauge, {{"", s.disk_writable ? 1.0 : 0.0}});
    add("manyshot_disk_writes_refused_total",
        "KV and task-record writes refused or failed for lack of disk space.", T::Counter,
        {{"", s.disk_writes_refused}});
    return out;
  }

 private:
  const ContextCache& cache_;
  const std::string memory_tier_;
};

class TaskStateCollector : public prometheus::Collectable {
 public:
  explicit TaskStateCollector(const TaskRegistry& registry) : registry_(registry) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    const TaskRegistry::Counts c = registry_.counts();
    prometheus::MetricFamily by_state{"manyshot_tasks_by_state",
                                      "Tasks per lifecycle state (state: encoding, ready, failed).",
                                      prometheus::MetricType::Gauge,
                                      {}};
    for (const auto& [state, n] : {std::pair<const char*, size_t>{"encoding", c.encoding},
                                   {"ready", c.ready},
                                   {"failed", c.failed}}) {
      prometheus::ClientMetric m;
      m.label.push_back({"state", state});
      m.gauge.value = static_cast<double>(n);
      by_state.metric.push_back(m);
    }
    prometheus::MetricFamily quarantined{
        "manyshot_tasks_quarantined",
        "Tasks FAILED because their stored record is damaged (not served, kept on disk until "
        "deleted or replaced).",
        prometheus::MetricType::Gauge,
        {}};
    prometheus::ClientMetric q;
    q.gauge.value = static_cast<double>(c.quarantined);
    quarantined.metric.push_back(q);
    return {by_state, quarantined};
  }

 private:
  const TaskRegistry& registry_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeTaskStateCollector(const TaskRegistry& registry) {
  return std::make_shared<TaskStateCollector>(registry);
}

std::shared_ptr<prometheus::Collectable> MakeCacheCollector(const ContextCache& cache,
                                                            const std::string& memory_tier) {
  return std::make_shared<CacheCollector>(cache, memory_tier);
}

ServiceMetrics::ServiceMetrics(prometheus::Registry& registry, const ContextCache& cache,
                               const std::string& memory_tier)
    : requests_(prometheus::BuildCounter()
                    .Name("manyshot_requests_total")
                    .Help("Finished RPCs by method and status code.")
                    .Register(registry)),
      latency_(prometheus::BuildHistogram()
                   .Name("manyshot_request_duration_seconds")
                   .Help("RPC latency by method.")
                   .Register(registry)),
      stream_messages_(prometheus::BuildCounter()
                           .Name("manyshot_stream_messages_total")
                           .Help("Request messages of streaming RPCs answered one by one "
                                 "(StreamClassify), by method and status code; the calls "
                                 "themselves are in manyshot_requests_total.")
                           .Register(registry)),
      stream_latency_(prometheus::BuildHistogram()
                          .Name("manyshot_stream_message_duration_seconds")
                          .Help("Time from reading a stream's request message to queueing its "
                                "answer, by method.")
                          .Register(registry)),
      task_encode_(prometheus::BuildHistogram()
                       .Name("manyshot_task_encode_seconds")
                       .Help("Time a created task took to tokenize, encode and store.")
                       .Register(registry)
                       .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.1, 0.5, 1, 5, 10,
                                                                        30, 60, 300, 900, 3600})),
      batch_size_(
          prometheus::BuildHistogram()
              .Name("manyshot_batch_inputs")
              .Help("Inputs per engine batch.")
              .Register(registry)
              .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256})),
      queue_wait_(prometheus::BuildHistogram()
                      .Name("manyshot_queue_wait_seconds")
                      .Help("Time requests waited in the scheduler queue.")
                      .Register(registry)
                      .Add({}, LatencyBuckets())),
      queue_depth_(prometheus::BuildGauge()
                       .Name("manyshot_queue_inputs")
                       .Help("Inputs waiting in the scheduler queue.")
                       .Register(registry)
                       .Add({})),
      upload_bytes_(prometheus::BuildGauge()
                        .Name("manyshot_upload_bytes")
                        .Help("Request bytes CreateTask calls hold until each call ends "
                              "(--max_total_upload_bytes bounds them).")
                        .Register(registry)
                        .Add({})),
      inputs_classified_(prometheus::BuildCounter()
                             .Name("manyshot_inputs_classified_total")
                             .Help("Inputs classified.")
                             .Register(registry)
                             .Add({})),
      tokens_encoded_(prometheus::BuildCounter()
                          .Name("manyshot_demonstration_tokens_encoded_total")
                          .Help("Context tokens encoded for new tasks.")
                          .Register(registry)
                          .Add({})),
      tokens_generated_(prometheus::BuildCounter()
                            .Name("manyshot_tokens_generated_total")
                            .Help("Tokens produced by Generate.")
                            .Register(registry)
                            .Add({})),
      cache_collector_(MakeCacheCollector(cache, memory_tier)) {}

void ServiceMetrics::Request(const std::string& method, const std::string& code, double seconds) {
  requests_.Add({{"method", method}, {"code", code}}).Increment();
  latency_.Add({{"method", method}}, LatencyBuckets()).Observe(seconds);
}

void ServiceMetrics::StreamMessage(const std::string& method, const std::string& code,
                                   double seconds) {
  stream_messages_.Add({{"method", method}, {"code", code}}).Increment();
  stream_latency_.Add({{"method", method}}, LatencyBuckets()).Observe(seconds);
}

}  // namespace manyshot::server

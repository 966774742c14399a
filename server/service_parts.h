// What the ManyShot service's call handlers (server/*_reactor.*, server/manyshot_service.*) share:
// the configuration, model, registry, scheduler, cache and metrics, the server-wide bound on
// in-flight StreamClassify requests, and the one place a finished call is counted and logged.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/auth.h"
#include "server/model_loader.h"
#include "server/preparation_pool.h"
#include "server/scheduler.h"
#include "server/server_config.h"
#include "server/service_metrics.h"
#include "server/stream_registry.h"
#include "server/task_registry.h"

namespace manyshot::server {

struct ServiceParts {
  // Everything referenced outlives the service and every call.
  const ServerConfig& config;
  const TenantDirectory& tenants;  // who each call acts for (TenantOf)
  std::shared_ptr<const LoadedModel> model;
  TaskRegistry& registry;
  PreparationPool& preparation;  // renders and tokenizes requests before they reach `scheduler`
  Scheduler& scheduler;
  ContextCache& cache;
  ServiceMetrics& metrics;
  std::chrono::system_clock::time_point start_time = std::chrono::system_clock::now();
  // StreamClassify requests being answered on all streams (--max_server_inflight).
  std::atomic<uint64_t> stream_inflight{0};
  // Request bytes that CreateTask calls hold (received, not yet stored or failed) on all calls
  // (--max_total_upload_bytes).
  std::atomic<uint64_t> upload_bytes{0};
  // Open StreamClassify and CreateTask streams: per-tenant bound and idle timeout.
  StreamRegistry streams{config.max_streams_per_tenant,
                         std::chrono::seconds(config.stream_idle_timeout_seconds)};

  // Runs `prepare` on the preparation pool, in turn with other tenants' and tasks' work, with
  // `version`'s engine task (rebuilt on first use after a restart): it renders and tokenizes the
  // request and hands it to the scheduler. Exactly one of `prepare` and `fail` runs: `fail` when
  // the pool refuses the work, the call was abandoned before its turn, or the task cannot be
  // rebuilt.
  void Prepare(const std::string& tenant, std::shared_ptr<const TaskVersion> version, size_t inputs,
               Scheduler::AbandonFlag abandoned, std::function<void(absl::Status)> fail,
               std::function<void(ServedTask&)> prepare);

  // Counts, times and logs one finished call (or StreamClassify request); returns `status`.
  grpc::Status Record(const char* method, const grpc::ServerContextBase* context,
                      std::chrono::steady_clock::time_point start, const std::string& task_id,
                      grpc::Status status);
};

}  // namespace manyshot::server

// The whole server as one object: data directory, metrics endpoint, gRPC server with the ManyShot
// service, health and reflection. main.cc owns one; tests may too.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "cache/context_cache.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "server/auth.h"
#include "server/data_dir.h"
#include "server/device_watch.h"
#include "server/manyshot_service.h"
#include "server/metrics.h"
#include "server/model_loader.h"
#include "server/preparation_pool.h"
#include "server/scheduler.h"
#include "server/server_config.h"
#include "server/service_metrics.h"
#include "server/shared_metrics.h"
#include "server/shared_tier.h"
#include "server/store_watch.h"
#include "server/task_registry.h"

namespace manyshot::server {

class ServerApp {
 public:
  static absl::StatusOr<std::unique_ptr<ServerApp>> Start(const ServerConfig& config);
  ~ServerApp();

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_->port(); }

  // Health ("" and "manyshot.v1.ManyShot") turns NOT_SERVING; calls are still answered.
  void StopServing();
  // Health turns NOT_SERVING, new calls are refused, in-flight calls get `grace` to finish and
  // are then cancelled. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  ServerApp() = default;
  // Start()'s steps, in order; each fails the start with its error.
  absl::Status OpenDataDir();
  absl::Status LoadModel();
  absl::StatusOr<ContextCacheOptions> CacheOptions();  // settles --kv_dtype's default
  absl::Status OpenCache();
  absl::Status OpenTasks();
  void CreateService();
  absl::Status Listen(const std::shared_ptr<grpc::ServerCredentials>& creds);

  ServerConfig config_;
  TenantDirectory tenants_;  // the bearer tokens' tenants; off without --auth_tokens_file
  std::unique_ptr<DataDir> data_dir_;
  std::unique_ptr<Metrics> metrics_;
  std::shared_ptr<const LoadedModel> model_;
  std::unique_ptr<ContextCache> cache_;
  std::unique_ptr<SharedMetrics> shared_metrics_;
  std::unique_ptr<SharedTier> shared_;  // null without --shared_dir
  std::unique_ptr<TaskRegistry> registry_;
  std::unique_ptr<ServiceMetrics> service_metrics_;
  std::shared_ptr<prometheus::Collectable> task_collector_;  // task states for /metrics
  std::unique_ptr<Scheduler> scheduler_;
  // After the scheduler: its threads submit to the scheduler, so it is destroyed first.
  std::unique_ptr<PreparationPool> preparation_;
  std::unique_ptr<ManyShotService> service_;
  std::unique_ptr<grpc::Server> server_;
  // After the server: it reports through the server's health service.
  std::unique_ptr<StoreWatch> store_watch_;
  std::unique_ptr<DeviceWatch> device_watch_;  // stops the replica on a GPU fault
  int grpc_port_ = 0;
  bool shut_down_ = false;
};

}  // namespace manyshot::server

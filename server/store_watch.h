// Watches whether the store can take writes and says so through gRPC health: the service
// "manyshot.store" is SERVING while the disk reserve (--min_free_disk_bytes) is free and the store
// has no pending out-of-space error, NOT_SERVING otherwise. The server's own health ("" and
// "manyshot.v1.ManyShot") stays SERVING: existing tasks keep answering on a full disk, so a load
// balancer must not take the replica out; an operator or a probe of "manyshot.store" sees that
// creates are refused. After the store ran out of space, each check tries to resume it, so writes
// come back once space is freed, without a restart.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cache/context_cache.h"
#include "grpcpp/health_check_service_interface.h"

namespace manyshot::server {

class StoreWatch {
 public:
  static constexpr char kHealthService[] = "manyshot.store";

  // Checks at once, then every `period` until destroyed.
  StoreWatch(ContextCache& cache, grpc::HealthCheckServiceInterface& health,
             std::chrono::milliseconds period = std::chrono::seconds(1));
  ~StoreWatch();
  StoreWatch(const StoreWatch&) = delete;
  StoreWatch& operator=(const StoreWatch&) = delete;

 private:
  void Check();
  void Run();

  ContextCache& cache_;
  grpc::HealthCheckServiceInterface& health_;
  const std::chrono::milliseconds period_;
  bool writable_ = true;  // as last reported
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace manyshot::server

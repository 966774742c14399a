#include "server/store_watch.h"

#include "spdlog/spdlog.h"

namespace manyshot::server {

StoreWatch::StoreWatch(ContextCache& cache, grpc::HealthCheckServiceInterface& health,
                       std::chrono::milliseconds period)
    : cache_(cache), health_(health), period_(period) {
  health_.SetServingStatus(kHealthService, true);
  Check();
  thread_ = std::thread([this] { Run(); });
}

StoreWatch::~StoreWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void StoreWatch::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    Check();
    lock.lock();
  }
}

void StoreWatch::Check() {
  CacheStats stats = cache_.Stats();
  // Out of space before: resuming is what lets writes come back without a restart.
  if (!stats.disk_writable && cache_.ResumeDisk().ok()) stats = cache_.Stats();
  if (stats.disk_writable == writable_) return;
  writable_ = stats.disk_writable;
  health_.SetServingStatus(kHealthService, writable_);
  if (writable_) {
    spdlog::info("store: writable again ({} bytes free on the data directory's disk)",
                 stats.disk_free_bytes);
  } else {
    spdlog::warn(
        "store: not writable ({} bytes free on the data directory's disk, below "
        "--min_free_disk_bytes, or an out-of-space error is pending): creates are refused with "
        "RESOURCE_EXHAUSTED, existing tasks keep serving",
        stats.disk_free_bytes);
  }
}

}  // namespace manyshot::server

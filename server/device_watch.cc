#include "server/device_watch.h"

#include <string>
#include <utility>

#include "spdlog/spdlog.h"

namespace manyshot::server {

DeviceWatch::DeviceWatch(grpc::HealthCheckServiceInterface& health,
                         std::function<absl::Status()> fault, std::function<void()> on_fault,
                         std::chrono::milliseconds period)
    : health_(health), fault_(std::move(fault)), on_fault_(std::move(on_fault)), period_(period) {
  thread_ = std::thread([this] { Run(); });
}

DeviceWatch::~DeviceWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void DeviceWatch::Run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    const bool faulted = Check();
    lock.lock();
    if (faulted) return;  // handled once; the process is on its way out
  }
}

bool DeviceWatch::Check() {
  const absl::Status fault = fault_();
  if (fault.ok()) return false;
  health_.SetServingStatus("", false);
  health_.SetServingStatus("manyshot.v1.ManyShot", false);
  spdlog::critical(
      "device fault: {}; health is NOT_SERVING, draining and exiting with status {} so the "
      "replica restarts on a fresh GPU context",
      std::string(fault.message()), kDeviceFaultExitCode);
  on_fault_();
  return true;
}

}  // namespace manyshot::server

// Stops a replica whose GPU faulted. An illegal address, a launch failure or an uncorrectable ECC
// error kills the CUDA context: every later GPU call fails, so the replica could only answer
// INTERNAL from then on. The watch polls the fault (manyshot::DeviceFault()), and on the first
// one turns the server's health ("" and "manyshot.v1.ManyShot") NOT_SERVING, logs the cause and
// runs `on_fault` once (the server raises SIGTERM: main drains what can still answer, such as
// GetServerInfo and calls already past the GPU, and exits with kDeviceFaultExitCode, so an
// orchestrator restarts the pod on a fresh context).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "grpcpp/health_check_service_interface.h"

namespace manyshot::server {

// The exit status of a server stopped by a device fault.
inline constexpr int kDeviceFaultExitCode = 3;

class DeviceWatch {
 public:
  // Checks `fault` every `period` until destroyed or a fault is seen.
  DeviceWatch(grpc::HealthCheckServiceInterface& health, std::function<absl::Status()> fault,
              std::function<void()> on_fault,
              std::chrono::milliseconds period = std::chrono::milliseconds(100));
  ~DeviceWatch();
  DeviceWatch(const DeviceWatch&) = delete;
  DeviceWatch& operator=(const DeviceWatch&) = delete;

 private:
  // True once a fault was handled.
  bool Check();
  void Run();

  grpc::HealthCheckServiceInterface& health_;
  const std::function<absl::Status()> fault_;
  const std::function<void()> on_fault_;
  const std::chrono::milliseconds period_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace manyshot::server

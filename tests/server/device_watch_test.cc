// server/device_watch.h with a fake health service and fault: nothing happens while the device is
// fine; the first fault turns the server's health NOT_SERVING before `on_fault` runs, once.
#include "server/device_watch.h"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace manyshot::server {
namespace {

class FakeHealth : public grpc::HealthCheckServiceInterface {
 public:
  void SetServingStatus(const std::string& service, bool serving) override {
    std::lock_guard<std::mutex> lock(mutex);
    status[service] = serving;
  }
  void SetServingStatus(bool serving) override { SetServingStatus("", serving); }
  void Shutdown() override {}

  std::mutex mutex;
  std::map<std::string, bool> status;
};

TEST(DeviceWatchTest, TheFirstFaultTurnsHealthNotServingThenCallsOnFaultOnce) {
  FakeHealth health;
  health.SetServingStatus("", true);
  health.SetServingStatus("manyshot.v1.ManyShot", true);
  health.SetServingStatus("manyshot.store", true);
  std::atomic<bool> faulted{false};
  std::atomic<int> checks{0};
  std::atomic<int> on_fault_calls{0};
  std::map<std::string, bool> seen_at_fault;
  {
    DeviceWatch watch(
        health,
        [&]() -> absl::Status {
          ++checks;
          return faulted ? absl::InternalError("cuda Synchronize: an illegal memory access")
                         : absl::OkStatus();
        },
        [&] {
          std::lock_guard<std::mutex> lock(health.mutex);
          seen_at_fault = health.status;
          ++on_fault_calls;
        },
        std::chrono::milliseconds(1));
    while (checks < 3) std::this_thread::yield();
    EXPECT_EQ(on_fault_calls, 0);
    faulted = true;
    while (on_fault_calls == 0) std::this_thread::yield();
    const int checks_at_fault = checks;
    // The watch stops after the fault: on_fault is never called again.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(checks, checks_at_fault);
  }
  EXPECT_EQ(on_fault_calls, 1);
  EXPECT_FALSE(seen_at_fault[""]);
  EXPECT_FALSE(seen_at_fault["manyshot.v1.ManyShot"]);
  EXPECT_TRUE(seen_at_fault["manyshot.store"]);  // another watch's service, left alone
}

}  // namespace
}  // namespace manyshot::server

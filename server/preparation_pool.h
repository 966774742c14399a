// Where requests are rendered and tokenized before they join the engine queue: threads of their
// own, so the engine's one worker only computes and a query with an expensive template delays no
// other request's compute. Preparation per request is bounded before it starts (--max_input_bytes
// per input, --max_batch_inputs per request), queued work is bounded (RESOURCE_EXHAUSTED past
// --max_queue_inputs), and tenants and tasks take turns (FairOrder), so one tenant's expensive
// requests cannot starve another tenant's preparation either.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "server/fair_order.h"

namespace manyshot::server {

class PreparationPool {
 public:
  PreparationPool(int threads, size_t max_queued_inputs);
  PreparationPool(const PreparationPool&) = delete;
  PreparationPool& operator=(const PreparationPool&) = delete;
  ~PreparationPool();  // runs what is queued, then joins

  // Queues `work` (weighing `inputs`) for a pool thread, in turn with other tenants' and tasks'
  // work. When refused (draining, or the queue full) it returns the error and `work` never runs.
  absl::Status Submit(const std::string& tenant, const std::string& task, size_t inputs,
                      std::function<void()> work);
  // Refuses new work; queued work still runs. Idempotent.
  void Drain();
  // Waits until nothing is queued or running; false when `deadline` came first.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);

 private:
  struct Item {
    std::string tenant;
    size_t inputs = 0;
    std::function<void()> work;
  };
  void WorkerLoop();

  const size_t max_queued_inputs_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable idle_;
  std::map<std::string, std::deque<Item>> pending_;  // by tenant + task
  FairOrder order_;
  size_t queued_inputs_ = 0;
  int running_ = 0;
  bool draining_ = false;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace manyshot::server

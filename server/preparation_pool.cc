#include "server/preparation_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"

namespace manyshot::server {

PreparationPool::PreparationPool(int threads, size_t max_queued_inputs)
    : max_queued_inputs_(max_queued_inputs) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

PreparationPool::~PreparationPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

absl::Status PreparationPool::Submit(const std::string& tenant, const std::string& task,
                                     size_t inputs, std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) {
      return WithReason(absl::UnavailableError("the server is shutting down"),
                        reason::kShuttingDown);
    }
    if (queued_inputs_ + inputs > max_queued_inputs_) {
      return WithReason(
          absl::ResourceExhaustedError(absl::StrCat(
              "the preparation queue is full (", queued_inputs_,
              " inputs waiting, --max_queue_inputs ", max_queued_inputs_, "); retry with backoff")),
          reason::kQueueFull);
    }
    const std::string key = absl::StrCat(tenant, "\n", task);
    auto& queue = pending_[key];
    if (queue.empty()) order_.Add(tenant, key);
    queue.push_back({tenant, inputs, std::move(work)});
    queued_inputs_ += inputs;
  }
  wake_.notify_one();
  return absl::OkStatus();
}

void PreparationPool::Drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  draining_ = true;
}

bool PreparationPool::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  return idle_.wait_until(lock, deadline, [&] { return order_.empty() && running_ == 0; });
}

void PreparationPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !order_.empty(); });
    auto key = order_.Next();
    if (!key) return;  // stopping, and nothing is left
    auto it = pending_.find(*key);
    Item item = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) {
      pending_.erase(it);
    } else {
      order_.Add(it->second.front().tenant, *key);
    }
    queued_inputs_ -= item.inputs;
    ++running_;
    lock.unlock();
    item.work();
    item.work = nullptr;  // release what it captured outside the lock
    lock.lock();
    --running_;
    if (order_.empty() && running_ == 0) idle_.notify_all();
  }
}

}  // namespace manyshot::server

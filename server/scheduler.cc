#include "server/scheduler.h"

#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"

namespace manyshot::server {
namespace {

bool SameOverrides(const QueryOverrides& a, const QueryOverrides& b) {
  return a.mode == b.mode && a.rescale_factor == b.rescale_factor;
}

}  // namespace

Scheduler::Scheduler(TaskRegistry& registry, const ServerConfig& config, SchedulerHooks hooks)
    : registry_(registry), config_(config), hooks_(std::move(hooks)) {
  worker_ = std::thread([this] { WorkerLoop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    draining_ = true;
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void Scheduler::Drain() {
  std::lock_guard<std::mutex> lock(mutex_);
  draining_ = true;
}

size_t Scheduler::queued_inputs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_inputs_;
}

void Scheduler::Classify(std::shared_ptr<const TaskVersion> version,
                         std::vector<QueryWithCandidates> items, const QueryOverrides& overrides,
                         AbandonFlag abandoned, ClassifyDone done) {
  auto request = std::make_shared<Request>();
  request->version = std::move(version);
  request->weight = items.size();
  request->items = std::move(items);
  request->overrides = overrides;
  request->abandoned = std::move(abandoned);
  request->done = std::move(done);
  Submit(std::move(request));
}

void Scheduler::Run(std::shared_ptr<const TaskVersion> version, size_t weight, Job job,
                    AbandonFlag abandoned, Done done) {
  auto request = std::make_shared<Request>();
  request->version = std::move(version);
  request->weight = std::max<size_t>(1, weight);
  request->job = std::move(job);
  request->abandoned = std::move(abandoned);
  request->done = [done = std::move(done)](absl::StatusOr<std::vector<ClassifyResult>> result) {
    done(result.status());
  };
  Submit(std::move(request));
}

void Scheduler::Submit(std::shared_ptr<Request> request) {
  request->key = absl::StrCat(request->version->tenant, "\n", request->version->task_id, "\n",
                              request->version->generation);
  request->enqueued = std::chrono::steady_clock::now();
  if (request->abandoned == nullptr) request->abandoned = NewAbandonFlag();
  absl::Status refused;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (draining_) {
      refused =
          WithReason(absl::UnavailableError("the server is shutting down"), reason::kShuttingDown);
    } else if (queued_inputs_ + request->weight > static_cast<size_t>(config_.max_queue_inputs)) {
      refused = WithReason(
          absl::ResourceExhaustedError(absl::StrCat(
              "the request queue is full (", queued_inputs_, " inputs waiting, --max_queue_inputs ",
              config_.max_queue_inputs, "); retry with backoff")),
          reason::kQueueFull);
    } else {
      auto& queue = pending_[request->key];
      if (queue.empty()) order_.Add(request->version->tenant, request->key);
      queue.push_back(request);
      queued_inputs_ += request->weight;
      if (hooks_.on_depth) hooks_.on_depth(queued_inputs_);
    }
  }
  if (!refused.ok()) {
    request->done(std::move(refused));  // outside the lock: `done` may submit again
    return;
  }
  wake_.notify_one();
}

void Scheduler::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return stop_ || !order_.empty(); });
    auto next = order_.Next();
    if (!next) return;  // stopping, and nothing is left
    const std::string key = *std::move(next);
    auto& queue = pending_[key];
    // A classification batch may wait a moment for more requests of the same task.
    if (!queue.front()->job) {
      auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.batch_window_ms);
      auto batch_inputs = [&] {
        size_t n = 0;
        for (const auto& r : queue) {
          if (r->job || !SameOverrides(r->overrides, queue.front()->overrides)) break;
          n += r->items.size();
        }
        return n;
      };
      while (!stop_ && batch_inputs() < static_cast<size_t>(config_.max_batch_size) &&
             wake_.wait_until(lock, deadline) != std::cv_status::timeout) {
      }
    }
    std::vector<std::shared_ptr<Request>> batch;
    size_t inputs = 0;
    while (!queue.empty()) {
      auto& r = queue.front();
      if (!batch.empty()) {
        if (batch.front()->job || r->job ||
            !SameOverrides(r->overrides, batch.front()->overrides) ||
            inputs + r->items.size() > static_cast<size_t>(config_.max_batch_size)) {
          break;
        }
      }
      inputs += r->items.size();
      queued_inputs_ -= r->weight;
      batch.push_back(r);
      queue.pop_front();
    }
    if (!queue.empty()) {
      order_.Add(queue.front()->version->tenant, key);  // the rest waits its next turn
    } else {
      pending_.erase(key);
    }
    if (hooks_.on_depth) hooks_.on_depth(queued_inputs_);
    lock.unlock();
    RunBatch(std::move(batch));
    lock.lock();
  }
}

void Scheduler::RunBatch(std::vector<std::shared_ptr<Request>> batch) {
  // Drop requests abandoned while they waited.
  std::vector<std::shared_ptr<Request>> live;
  for (auto& r : batch) {
    if (hooks_.on_wait) {
      hooks_.on_wait(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - r->enqueued).count());
    }
    if (r->abandoned->load()) {
      r->done(absl::CancelledError("cancelled while queued"));
    } else {
      live.push_back(r);
    }
  }
  if (live.empty()) return;
  auto handle = registry_.Acquire(live.front()->version);
  if (!handle.ok()) {
    for (auto& r : live) r->done(handle.status());
    return;
  }
  if (live.front()->job) {
    absl::Status status = live.front()->job(*handle);
    if (status.ok()) {
      live.front()->done(std::vector<ClassifyResult>{});
    } else {
      live.front()->done(status);
    }
    return;
  }
  std::vector<QueryWithCandidates> items;
  for (const auto& r : live) items.insert(items.end(), r->items.begin(), r->items.end());
  if (hooks_.on_batch) hooks_.on_batch(items.size());
  auto results = handle->task->ClassifyPrepared(handle->get(), items, live.front()->overrides);
  if (!results.ok()) {
    // One request can fail the whole engine call (an override its task rejects): retry each
    // request alone so only it fails.
    if (live.size() > 1) {
      for (auto& r : live) {
        auto alone = handle->task->ClassifyPrepared(handle->get(), r->items, r->overrides);
        r->done(std::move(alone));
      }
    } else {
      live.front()->done(results.status());
    }
    return;
  }
  size_t offset = 0;
  for (auto& r : live) {
    std::vector<ClassifyResult> mine(results->begin() + offset,
                                     results->begin() + offset + r->items.size());
    offset += r->items.size();
    r->done(std::move(mine));
  }
}

}  // namespace manyshot::server

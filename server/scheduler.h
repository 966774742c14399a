// The engine's one queue. Requests for the same task are batched (up to --max_batch_size inputs,
// waiting at most --batch_window_ms for more) so a batch shares one read of the task's context;
// tenants with waiting work take turns, and within a tenant its tasks do (FairOrder), so neither
// a busy task nor a tenant with many tasks can starve the others. Requests arrive prepared
// (rendered and tokenized by the PreparationPool): the worker only computes. The
// queue is bounded (RESOURCE_EXHAUSTED when full); a request cancelled or past its deadline while
// queued is dropped without computing. One worker runs batches: each already uses every core.
// Callers do not wait: each request carries a callback that the worker calls with its answer, so
// the gRPC reactors hold no thread while their work is queued or running.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/statusor.h"
#include "server/fair_order.h"
#include "server/task_registry.h"

namespace manyshot::server {

struct SchedulerHooks {
  std::function<void(size_t inputs)> on_batch;  // a batch ran with this many inputs
  std::function<void(double seconds)> on_wait;  // a request waited this long in the queue
  std::function<void(size_t depth)> on_depth;   // queued inputs now
};

class Scheduler {
 public:
  Scheduler(TaskRegistry& registry, const ServerConfig& config, SchedulerHooks hooks);
  ~Scheduler();

  // Set to true by the caller to abandon its request (the call was cancelled): if it is still
  // queued, the worker drops it without computing.
  using AbandonFlag = std::shared_ptr<std::atomic<bool>>;
  static AbandonFlag NewAbandonFlag() { return std::make_shared<std::atomic<bool>>(false); }

  // Every request is answered exactly once through its `done`: on the worker thread when it ran
  // (or was dropped), or on the calling thread when it is refused at once (queue full, draining).
  // `done` must be cheap: it runs on the one worker, between batches.
  using ClassifyDone = std::function<void(absl::StatusOr<std::vector<ClassifyResult>>)>;
  using Done = std::function<void(absl::Status)>;

  // Classifies `items` (IclTask::PrepareClassify of `version`'s task) against `version`, batched
  // with other requests for the same version and overrides. Requests hold the version they
  // resolved, so a replace never mixes two versions.
  void Classify(std::shared_ptr<const TaskVersion> version, std::vector<QueryWithCandidates> items,
                const QueryOverrides& overrides, AbandonFlag abandoned, ClassifyDone done);
  // Runs `job` on the task alone (multi-choice scoring, generation), in queue order.
  using Job = std::function<absl::Status(TaskRegistry::Handle&)>;
  void Run(std::shared_ptr<const TaskVersion> version, size_t weight, Job job,
           AbandonFlag abandoned, Done done);

  // Stops accepting work; queued work still runs. Idempotent.
  void Drain();
  size_t queued_inputs() const;

 private:
  struct Request {
    std::string key;  // tenant + task + version: the batching and round-robin unit
    std::shared_ptr<const TaskVersion> version;
    std::vector<QueryWithCandidates> items;  // classification
    QueryOverrides overrides;
    Job job;  // set for non-classification work
    size_t weight = 0;
    std::chrono::steady_clock::time_point enqueued;
    AbandonFlag abandoned;
    ClassifyDone done;
  };
  void Submit(std::shared_ptr<Request> request);
  void WorkerLoop();
  void RunBatch(std::vector<std::shared_ptr<Request>> batch);

  TaskRegistry& registry_;
  const ServerConfig& config_;
  SchedulerHooks hooks_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, std::deque<std::shared_ptr<Request>>> pending_;  // by task key
  FairOrder order_;  // task keys with pending work
  size_t queued_inputs_ = 0;
  bool draining_ = false;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace manyshot::server

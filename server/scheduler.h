// The engine's one queue. Requests for the same task are batched (up to --max_batch_size inputs,
// waiting at most --batch_window_ms for more) so a batch shares one read of the task's context;
// tenants with waiting work take turns, and within a tenant its tasks do (FairOrder), so neither
// a busy task nor a tenant with many tasks can starve the others. A turn is time-sliced: for a task
// that recomputes its context for every input (T5), a turn runs at most --engine_turn_tokens of
// it, so a heavy request is answered over several turns with the other tasks' turns between.
// Requests arrive prepared (rendered and tokenized by the PreparationPool): the worker only
// computes. The queue is bounded (RESOURCE_EXHAUSTED when full); a request cancelled or past its
// deadline while queued is dropped without computing. One worker runs batches: each already uses
// every core. Callers do not wait: each request carries a callback that the worker calls with its
// answer, so the gRPC reactors hold no thread while their work is queued or running.
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
  // `recomputed_tokens_per_input`: ServedTask::RecomputedContextTokens() of the task.
  void Classify(std::shared_ptr<const TaskVersion> version, std::vector<QueryWithCandidates> items,
                int64_t recomputed_tokens_per_input, const QueryOverrides& overrides,
                AbandonFlag abandoned, ClassifyDone done);
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
    int64_t tokens_per_input = 0;            // recomputed context tokens (time-slicing)
    QueryOverrides overrides;
    Job job;  // set for non-classification work
    size_t weight = 0;
    std::chrono::steady_clock::time_point enqueued;
    AbandonFlag abandoned;
    ClassifyDone done;
    // The worker's progress through `items` (worker thread only): items before `next` were
    // taken by turns; their results gather in `results` until the last turn answers.
    size_t next = 0;
    std::vector<ClassifyResult> results;
    bool answered = false;
  };
  // Items [begin, end) of a request, run in one turn.
  struct Slice {
    std::shared_ptr<Request> request;
    size_t begin = 0, end = 0;
  };
  void Submit(std::shared_ptr<Request> request);
  void WorkerLoop();
  // Inputs one turn of `front`'s task may run (1 for a job).
  size_t TurnCapacity(const Request& front) const;
  // Takes one turn's slices from the front of `queue`. Caller holds mutex_.
  std::vector<Slice> TakeTurn(std::deque<std::shared_ptr<Request>>& queue, size_t capacity);
  void RunBatch(std::vector<Slice> batch);
  // Records a slice's results; the request is answered with all of them after its last slice.
  void Deliver(const Slice& slice, absl::StatusOr<std::vector<ClassifyResult>> results);
  // Answers a request once (later slices of an answered request are skipped).
  static void Answer(Request& request, absl::StatusOr<std::vector<ClassifyResult>> answer);

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

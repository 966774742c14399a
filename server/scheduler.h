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
#include <variant>

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
  using ScoreDone = std::function<void(absl::StatusOr<std::vector<ChoiceResult>>)>;
  using GenerateDone = std::function<void(absl::StatusOr<GenerationOutput>)>;

  // Classifies `items` (ServedTask::PrepareClassify of `version`'s task) against `version`,
  // batched with other requests for the same version and overrides. Requests hold the version
  // they resolved, so a replace never mixes two versions.
  // `recomputed_tokens_per_input`: ServedTask::RecomputedContextTokens() of the task.
  void Classify(std::shared_ptr<const TaskVersion> version, std::vector<QueryWithCandidates> items,
                int64_t recomputed_tokens_per_input, const QueryOverrides& overrides,
                AbandonFlag abandoned, ClassifyDone done);
  // Scores `items` (ServedTask::PrepareChoices) on the task alone, in queue order.
  void Score(std::shared_ptr<const TaskVersion> version, std::vector<QueryWithCandidates> items,
             const QueryOverrides& overrides, AbandonFlag abandoned, ScoreDone done);
  // Generates for one input on the task alone, in queue order.
  void Generate(std::shared_ptr<const TaskVersion> version, Example input, GenerationParams params,
                const QueryOverrides& overrides, AbandonFlag abandoned, GenerateDone done);

  // Stops accepting work; queued work still runs. Idempotent.
  void Drain();
  size_t queued_inputs() const;

 private:
  // What a request asks of the engine. Classifications of one task are batched and may run over
  // several turns; scoring and generation run alone, in one turn.
  struct ClassifyWork {
    std::vector<QueryWithCandidates> items;
    int64_t tokens_per_input = 0;  // recomputed context tokens (time-slicing)
    ClassifyDone done;
    // The worker's progress through `items` (worker thread only): items before `next` were
    // taken by turns; their results gather in `results` until the last turn answers.
    size_t next = 0;
    std::vector<ClassifyResult> results;
  };
  struct ScoreWork {
    std::vector<QueryWithCandidates> items;
    ScoreDone done;
  };
  struct GenerateWork {
    Example input;
    GenerationParams params;
    GenerateDone done;
  };
  using Work = std::variant<ClassifyWork, ScoreWork, GenerateWork>;
  struct Request {
    explicit Request(Work w) : work(std::move(w)) {}

    std::string key;  // tenant + task + version: the batching and round-robin unit
    std::shared_ptr<const TaskVersion> version;
    QueryOverrides overrides;
    Work work;
    size_t weight = 0;  // queued inputs it counts for
    std::chrono::steady_clock::time_point enqueued;
    AbandonFlag abandoned;
    bool answered = false;

    ClassifyWork* classify() { return std::get_if<ClassifyWork>(&work); }
    const ClassifyWork* classify() const { return std::get_if<ClassifyWork>(&work); }
    // Inputs still queued: a classification's untaken items, or the whole weight.
    size_t queued() const {
      return classify() ? classify()->items.size() - classify()->next : weight;
    }
  };
  // Items [begin, end) of a request, run in one turn.
  struct Slice {
    std::shared_ptr<Request> request;
    size_t begin = 0, end = 0;
  };
  void Submit(std::shared_ptr<Request> request);
  void WorkerLoop();
  // Inputs one turn of `front`'s task may run (1 for scoring or generation).
  size_t TurnCapacity(const Request& front) const;
  // Takes one turn's slices from the front of `queue`. Caller holds mutex_.
  std::vector<Slice> TakeTurn(std::deque<std::shared_ptr<Request>>& queue, size_t capacity);
  void RunBatch(std::vector<Slice> batch);
  // Records a slice's results; the request is answered with all of them after its last slice.
  void Deliver(const Slice& slice, absl::StatusOr<std::vector<ClassifyResult>> results);
  // Runs a scoring or generation request on its task and answers it.
  static void RunAlone(Request& request, TaskRegistry::Handle& handle);
  // Answers a request once (later slices of an answered request are skipped).
  static void Answer(Request& request, absl::StatusOr<std::vector<ClassifyResult>> answer);
  // Answers a request of any kind with an error, once.
  static void Fail(Request& request, absl::Status status);

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

#include "server/scheduler.h"

#include <algorithm>
#include <iterator>
#include <type_traits>
#include <variant>

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
                         std::vector<QueryWithCandidates> items,
                         int64_t recomputed_tokens_per_input, const QueryOverrides& overrides,
                         AbandonFlag abandoned, ClassifyDone done) {
  ClassifyWork work;
  work.tokens_per_input = recomputed_tokens_per_input;
  work.done = std::move(done);
  const size_t inputs = items.size();
  work.items = std::move(items);
  auto request = std::make_shared<Request>(std::move(work));
  request->version = std::move(version);
  request->weight = inputs;
  request->overrides = overrides;
  request->abandoned = std::move(abandoned);
  Submit(std::move(request));
}

void Scheduler::Score(std::shared_ptr<const TaskVersion> version,
                      std::vector<QueryWithCandidates> items, const QueryOverrides& overrides,
                      AbandonFlag abandoned, ScoreDone done) {
  const size_t weight = std::max<size_t>(1, items.size());
  auto request = std::make_shared<Request>(ScoreWork{std::move(items), std::move(done)});
  request->version = std::move(version);
  request->weight = weight;
  request->overrides = overrides;
  request->abandoned = std::move(abandoned);
  Submit(std::move(request));
}

void Scheduler::Generate(std::shared_ptr<const TaskVersion> version, Example input,
                         GenerationParams params, const QueryOverrides& overrides,
                         AbandonFlag abandoned, GenerateDone done) {
  auto request = std::make_shared<Request>(
      GenerateWork{std::move(input), std::move(params), std::move(done)});
  request->version = std::move(version);
  request->weight = 1;
  request->overrides = overrides;
  request->abandoned = std::move(abandoned);
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
    Fail(*request, std::move(refused));  // outside the lock: `done` may submit again
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
    const size_t capacity = TurnCapacity(*queue.front());
    // A classification batch may wait a moment for more requests of the same task.
    if (queue.front()->classify()) {
      auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.batch_window_ms);
      auto batch_inputs = [&] {
        size_t n = 0;
        for (const auto& r : queue) {
          if (!r->classify() || !SameOverrides(r->overrides, queue.front()->overrides)) break;
          n += r->queued();
        }
        return n;
      };
      while (!stop_ && batch_inputs() < capacity &&
             wake_.wait_until(lock, deadline) != std::cv_status::timeout) {
      }
    }
    std::vector<Slice> batch = TakeTurn(queue, capacity);
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

size_t Scheduler::TurnCapacity(const Request& front) const {
  const auto most = static_cast<size_t>(config_.max_batch_size);
  const ClassifyWork* work = front.classify();
  if (work == nullptr) return 1;
  if (work->tokens_per_input <= 0) return most;  // the context is cached: batch freely
  const uint64_t fit = config_.engine_turn_tokens / static_cast<uint64_t>(work->tokens_per_input);
  return static_cast<size_t>(std::clamp<uint64_t>(fit, 1, most));
}

std::vector<Scheduler::Slice> Scheduler::TakeTurn(std::deque<std::shared_ptr<Request>>& queue,
                                                  size_t capacity) {
  std::vector<Slice> batch;
  size_t inputs = 0;
  while (!queue.empty()) {
    std::shared_ptr<Request> r = queue.front();
    if (r->answered) {  // failed or cancelled in an earlier turn: its remaining items never run
      queued_inputs_ -= r->queued();
      queue.pop_front();
      continue;
    }
    ClassifyWork* work = r->classify();
    if (!batch.empty()) {
      const Request& first = *batch.front().request;
      if (!first.classify() || work == nullptr || !SameOverrides(r->overrides, first.overrides) ||
          work->tokens_per_input != first.classify()->tokens_per_input || inputs == capacity) {
        break;
      }
    }
    if (work == nullptr) {
      queued_inputs_ -= r->weight;
      queue.pop_front();
      batch.push_back({r, 0, 0});
      break;
    }
    const size_t take = std::min(capacity - inputs, work->items.size() - work->next);
    batch.push_back({r, work->next, work->next + take});
    work->next += take;
    inputs += take;
    queued_inputs_ -= take;
    if (work->next < work->items.size()) break;  // the rest waits for the request's next turn
    queue.pop_front();
  }
  return batch;
}

void Scheduler::Answer(Request& request, absl::StatusOr<std::vector<ClassifyResult>> answer) {
  if (request.answered) return;
  request.answered = true;
  ClassifyWork& work = *request.classify();
  work.results.clear();
  work.done(std::move(answer));
}

void Scheduler::Fail(Request& request, absl::Status status) {
  if (request.answered) return;
  request.answered = true;
  std::visit(
      [&](auto& work) {
        if constexpr (std::is_same_v<std::decay_t<decltype(work)>, ClassifyWork>) {
          work.results.clear();
        }
        work.done(std::move(status));
      },
      request.work);
}

void Scheduler::Deliver(const Slice& slice, absl::StatusOr<std::vector<ClassifyResult>> results) {
  Request& r = *slice.request;
  if (!results.ok()) return Answer(r, results.status());
  ClassifyWork& work = *r.classify();
  std::move(results->begin(), results->end(), std::back_inserter(work.results));
  if (slice.end == work.items.size()) Answer(r, std::move(work.results));
}

void Scheduler::RunAlone(Request& request, TaskRegistry::Handle& handle) {
  request.answered = true;
  if (auto* score = std::get_if<ScoreWork>(&request.work)) {
    score->done(handle.task->ScoreChoicesPrepared(handle.get(), score->items, request.overrides));
  } else if (auto* generate = std::get_if<GenerateWork>(&request.work)) {
    generate->done(handle.task->Generate(handle.get(), generate->input, std::move(generate->params),
                                         request.overrides));
  }
}

void Scheduler::RunBatch(std::vector<Slice> batch) {
  // Drop requests abandoned while they waited (or answered by an earlier turn).
  std::vector<Slice> live;
  for (auto& slice : batch) {
    Request& r = *slice.request;
    if (r.answered) continue;
    if (hooks_.on_wait && slice.begin == 0) {
      hooks_.on_wait(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - r.enqueued).count());
    }
    if (r.abandoned->load()) {
      Fail(r, absl::CancelledError("cancelled while queued"));
    } else {
      live.push_back(std::move(slice));
    }
  }
  if (live.empty()) return;
  const Request& first = *live.front().request;
  auto handle = registry_.Acquire(first.version);
  if (!handle.ok()) {
    for (auto& slice : live) Fail(*slice.request, handle.status());
    return;
  }
  if (!first.classify()) return RunAlone(*live.front().request, *handle);
  auto items_of = [](const Slice& slice) {
    const auto& all = slice.request->classify()->items;
    return std::vector<QueryWithCandidates>(all.begin() + static_cast<ptrdiff_t>(slice.begin),
                                            all.begin() + static_cast<ptrdiff_t>(slice.end));
  };
  std::vector<QueryWithCandidates> items;
  for (const auto& slice : live) {
    auto mine = items_of(slice);
    std::move(mine.begin(), mine.end(), std::back_inserter(items));
  }
  if (hooks_.on_batch) hooks_.on_batch(items.size());
  auto results = handle->task->ClassifyPrepared(handle->get(), items, first.overrides);
  if (!results.ok()) {
    // One request can fail the whole engine call (an override its task rejects): retry each
    // slice alone so only its request fails.
    if (live.size() > 1) {
      for (auto& slice : live) {
        Deliver(slice, handle->task->ClassifyPrepared(handle->get(), items_of(slice),
                                                      slice.request->overrides));
      }
    } else {
      Deliver(live.front(), results.status());
    }
    return;
  }
  size_t offset = 0;
  for (auto& slice : live) {
    const size_t n = slice.end - slice.begin;
    Deliver(slice,
            std::vector<ClassifyResult>(
                std::make_move_iterator(results->begin() + static_cast<ptrdiff_t>(offset)),
                std::make_move_iterator(results->begin() + static_cast<ptrdiff_t>(offset + n))));
    offset += n;
  }
}

}  // namespace manyshot::server

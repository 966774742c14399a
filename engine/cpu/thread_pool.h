// A fixed pool of compute threads with one blocking ParallelFor. Workers sleep on a condition
// variable between calls (after a short spin; the caller too spins briefly for them), so they never
// compete with OpenBLAS's threads or another process for the cores while idle. The calling thread
// takes part in the work.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace manyshot {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // total threads including the caller; >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over a partition of [0, n) into at most size() contiguous chunks, one per
  // thread, and returns when all are done. Calls from inside fn run serially.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn);
  // Calls fn(i, thread) for every i in [0, n), handing indices out dynamically (uneven work).
  void ParallelForEach(int64_t n, const std::function<void(int64_t, int)>& fn);
  // Calls fn(begin, end) over a partition of [0, n) into contiguous ranges handed out as threads
  // ask for them ("guided"): each range is the remaining count over 2 * size(), at least
  // min_range (the last may be shorter). Long ranges first keep each thread's reads sequential;
  // the shrinking tail lets a thread that ran faster (its memory requests served sooner) take
  // more, so no thread waits long for the slowest at the end.
  void ParallelForGuided(int64_t n, int64_t min_range,
                         const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int index);
  void Run(const std::function<void(int)>& job);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};
  std::atomic<int> pending_{0};  // workers still running the current job
  bool stop_ = false;
  std::atomic<bool> busy_{false};
};

}  // namespace manyshot

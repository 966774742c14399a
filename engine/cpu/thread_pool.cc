#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace manyshot {
namespace {

// How long a thread spins before it sleeps: consecutive ops of a forward pass arrive
// microseconds apart, and a condition variable wake-up costs tens of microseconds.
constexpr std::chrono::microseconds kSpinBudget(200);
// How long the caller, its own part done, spins for the workers before it sleeps. Decode's
// parts take tens of microseconds and end within a few of each other, so the workers are
// usually done sooner than a sleeping caller is woken (3-6% of a decode step in a paired A/B).
// It is kept short because a worker that was descheduled cannot be helped by spinning: on a
// machine with more runnable threads than cores the spinning caller holds a core the worker needs
// (an unbounded caller spin took decode to 25 tok/s at load 3-6).
constexpr std::chrono::microseconds kCallerSpinBudget(20);

// Spins until ready() or until `budget` has passed; returns ready(). The clock is read once
// every 64 polls, not on every one: reading it continuously was 10-25% of a decode profile, time
// the sibling hyperthread or the memory system could have used. The pause hint tells the core it
// is a spin loop.
template <typename Ready>
bool SpinUntil(const Ready& ready, std::chrono::microseconds budget) {
  const auto deadline = std::chrono::steady_clock::now() + budget;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
      _mm_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(1, threads); ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    // Spin briefly for the next job, then sleep.
    SpinUntil([&] { return published_.load(std::memory_order_acquire) != seen; }, kSpinBudget);
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Under the mutex, so a caller that saw pending_ != 0 is already waiting when notified.
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::Run(const std::function<void(int)>& job) {
  bool expected = false;
  if (workers_.empty() || !busy_.compare_exchange_strong(expected, true)) {
    // Single thread, or a nested call from inside a job: run everything here.
    for (int t = 0; t < size(); ++t) job(t);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = &job;
    pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  job(0);
  auto all_done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  const bool done = SpinUntil(all_done, kCallerSpinBudget);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done) done_.wait(lock, all_done);
    job_ = nullptr;
  }
  busy_.store(false);
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  int64_t parts = std::min<int64_t>(size(), n);
  if (parts == 1) {
    fn(0, n);
    return;
  }
  Run([&](int t) {
    if (t >= parts) return;
    int64_t begin = n * t / parts;
    int64_t end = n * (t + 1) / parts;
    if (begin < end) fn(begin, end);
  });
}

void ThreadPool::ParallelForEach(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  if (n == 1 || size() == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  Run([&](int t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i, t);
  });
}

void ThreadPool::ParallelForGuided(int64_t n, int64_t min_range,
                                   const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_range = std::max<int64_t>(1, min_range);
  if (size() == 1 || n <= min_range) {
    fn(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
  const int64_t divisor = 2 * static_cast<int64_t>(size());
  Run([&](int) {
    int64_t begin = next.load(std::memory_order_relaxed);
    while (begin < n) {
      const int64_t end = std::min(n, begin + std::max(min_range, (n - begin) / divisor));
      if (next.compare_exchange_weak(begin, end, std::memory_order_relaxed)) {
        fn(begin, end);
        begin = next.load(std::memory_order_relaxed);
      }
    }
  });
}

}  // namespace manyshot

#include "engine/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>

namespace manyshot {

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
    // Spin briefly: consecutive ops of a forward pass arrive microseconds apart, and a condition
    // variable wake-up costs tens of microseconds. Then sleep.
    auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    while (published_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < spin_until) {
    }
    const std::function<void(int)>* job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    (*job)(index);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) done_.notify_one();
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
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  wake_.notify_all();
  job(0);
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
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

}  // namespace manyshot

#include "server/job_threads.h"

#include <thread>

namespace manyshot::server {

JobThreads::~JobThreads() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [&] { return running_ == 0; });
}

void JobThreads::Start(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++running_;
  }
  std::thread([this, job = std::move(job)]() mutable {
    job();
    job = nullptr;  // release what the job holds before the destructor may return
    // Notify under the lock: once it is released the destructor may return and free `this`.
    std::lock_guard<std::mutex> lock(mutex_);
    --running_;
    idle_.notify_all();
  }).detach();
}

}  // namespace manyshot::server

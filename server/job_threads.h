// Long blocking jobs (encoding a task's demonstrations, seconds to minutes) each on a thread of
// their own: gRPC's callback threads must not block, and the scheduler's worker must keep serving
// queries meanwhile. One thread per running CreateTask, as the synchronous server had; the
// destructor waits for every job.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

namespace manyshot::server {

class JobThreads {
 public:
  JobThreads() = default;
  JobThreads(const JobThreads&) = delete;
  JobThreads& operator=(const JobThreads&) = delete;
  ~JobThreads();

  void Start(std::function<void()> job);

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  int running_ = 0;
};

}  // namespace manyshot::server

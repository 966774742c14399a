#include "cache/parallel_chunks.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace manyshot {

absl::Status ForEachChunkInParallel(uint64_t chunks,
                                    const std::function<absl::Status(uint64_t, std::string&)>& fn) {
  const unsigned threads = static_cast<unsigned>(
      std::min<uint64_t>(chunks, std::clamp(std::thread::hardware_concurrency(), 1u, 8u)));
  std::atomic<uint64_t> next{0};
  std::mutex error_mutex;
  absl::Status error;
  auto work = [&] {
    std::string scratch;
    for (uint64_t i = next++; i < chunks; i = next++) {
      absl::Status s = fn(i, scratch);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (error.ok()) error = s;
        next = chunks;  // the others stop too
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  return error;
}

}  // namespace manyshot

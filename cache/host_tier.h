// The host tier: between the memory tier (GPU memory on the CUDA backend) and RocksDB. A context
// evicted from the memory tier is copied into page-locked host memory (Backend::AllocateHost) and
// kept here, LRU by bytes under its own budget, so bringing it back is one DMA per tensor
// (asynchronous copies on the restoring thread's stream) instead of a RocksDB read. Entries are
// copies: the memory tier never waits for this tier, and a miss here falls through to disk.
#pragma once

#include <cstdint>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/task/encoded_context.h"

namespace manyshot {

class HostTier {
 public:
  struct Stats {
    uint64_t budget_bytes = 0;
    uint64_t bytes = 0;
    uint64_t entries = 0;
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    uint64_t rejected = 0;  // contexts larger than the whole budget
  };

  HostTier(size_t budget_bytes, Backend& backend) : budget_(budget_bytes), backend_(backend) {}
  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;

  // Copies `ctx` (on the backend's device) into pinned host memory under `key`, evicting least
  // recently used entries to make room. A key already held is only marked recently used.
  absl::Status Put(const std::string& key, const EncodedContext& ctx);
  // A device copy of `key`'s context (allocated on the backend, complete when returned), or
  // nullopt when this tier does not hold it.
  absl::StatusOr<std::optional<EncodedContext>> Restore(const std::string& key);
  void Erase(const std::string& key);
  Stats stats() const;

 private:
  struct Entry {
    std::string key;
    EncodedContext host;  // tensors in page-locked host memory
    size_t bytes = 0;
  };
  void EvictFor(size_t bytes);  // mutex_ held

  const size_t budget_;
  Backend& backend_;
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // front: least recently used
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  size_t bytes_ = 0;
  Stats counters_;
};

}  // namespace manyshot

// The KV cache the server uses: a memory tier (byte budget, LRU, pinning) over a RocksDB tier
// (task records and checksummed KV blobs, durable across restarts). Content-addressed: tasks with
// equal cache keys (cache_key.h) share one entry in each tier.
//
// Lookup order in Acquire(): memory -> RocksDB (verified) -> encode. A blob that fails any check
// is never served: it is deleted, the event is logged and counted, and the context re-encoded.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/cache_log.h"
#include "cache/disk_tier.h"
#include "cache/host_tier.h"
#include "cache/memory_tier.h"
#include "cache/task_record.h"

namespace manyshot {

struct ContextCacheOptions {
  uint64_t memory_budget_bytes = uint64_t{8} << 30;
  // The pinned host tier between memory and disk (cache/host_tier.h); 0 = none. Meant for a
  // memory tier in GPU memory (the server enables it on the CUDA backend only).
  uint64_t host_budget_bytes = 0;
  uint64_t disk_budget_bytes = 0;  // 0 = unlimited
  // Free space kept on the store's filesystem (DiskTierOptions::reserve_bytes); 0 = none.
  uint64_t disk_reserve_bytes = 0;
  // The storage dtype on disk (and part of the key): kF32, or kBF16 / kF16 to halve memory and
  // disk at a small accuracy cost (cache/README.md).
  DType kv_dtype = DType::kF32;
  // False: the memory tier holds f32 (the 16-bit storage widened on load), which the engine's
  // attention consumes today. True: memory holds the storage dtype too (for an engine that reads
  // 16-bit context K/V directly).
  bool memory_holds_storage_dtype = false;
  // Load every ready task's KV into memory in Open() (up to the memory budget) instead of on
  // first use.
  bool eager_restore = false;
  uint64_t chunk_bytes = uint64_t{16} << 20;
  uint64_t max_batch_bytes = uint64_t{64} << 20;
  bool sync_task_writes = true;
  LogFn log;
};

// Counters and gauges for the server's /metrics.
struct CacheStats {
  // Gauges.
  uint64_t memory_bytes = 0;  // of the contexts the memory tier holds
  // Counted against the memory tier's budget besides the contexts (MemoryReservation): what T5
  // tasks keep between queries.
  uint64_t memory_reserved_bytes = 0;
  uint64_t memory_entries = 0;
  uint64_t memory_pinned_entries = 0;
  uint64_t memory_budget_bytes = 0;
  uint64_t disk_bytes = 0;  // payload bytes of the blobs (what the disk budget counts)
  uint64_t disk_entries = 0;
  uint64_t disk_budget_bytes = 0;
  uint64_t disk_file_bytes = 0;  // RocksDB's SST + blob files
  uint64_t tasks = 0;
  uint64_t tasks_quarantined = 0;  // ready tasks whose stored record is damaged (not served)
  uint64_t disk_free_bytes = 0;    // on the store's filesystem
  // Writes can go ahead: the disk reserve is free and the store has no out-of-space error.
  bool disk_writable = true;
  // Counters.
  uint64_t disk_writes_refused = 0;  // KV and task writes refused or failed for lack of space
  uint64_t memory_hits = 0;
  uint64_t memory_misses = 0;
  uint64_t memory_evictions = 0;
  uint64_t memory_rejected = 0;  // contexts and reservations larger than what it could free
  uint64_t host_bytes = 0;
  uint64_t host_entries = 0;
  uint64_t host_budget_bytes = 0;
  uint64_t host_hits = 0;
  uint64_t host_misses = 0;
  uint64_t host_evictions = 0;
  uint64_t disk_hits = 0;
  uint64_t disk_misses = 0;
  uint64_t disk_evictions = 0;
  uint64_t loads = 0;  // blobs loaded from RocksDB
  double load_seconds = 0;
  uint64_t load_bytes = 0;
  uint64_t encodes = 0;  // encode_fn calls
  double encode_seconds = 0;
  uint64_t re_encodes = 0;  // encodes of a key a ready task already had (evicted or corrupt)
  uint64_t corruptions_detected = 0;
};

using EncodeFn = std::function<absl::StatusOr<EncodedContext>()>;
// Checks a restored context against its task (the engine task's CheckContext); may be empty.
using ValidateFn = std::function<absl::Status(const EncodedContext&)>;

class ContextCache {
 public:
  // Opens (creating) the database at `path` on `backend` (which allocates every context the tiers
  // hold); restores the task list, and with eager_restore the contexts.
  static absl::StatusOr<std::unique_ptr<ContextCache>> Open(const std::filesystem::path& path,
                                                            ContextCacheOptions options,
                                                            Backend& backend);
  ~ContextCache();

  // Registers (or replaces) a task and stores its context, atomically (cache/disk_tier.h): a
  // replaced version stays served until this one commits, and its KV leaves with it. `ctx` may be
  // in any dtype; it is stored in the storage dtype. When the key already has a blob (an equal task
  // exists) only the record is written. The context is also admitted to the memory tier.
  absl::Status PutTask(const TaskRecord& record, const EncodedContext& ctx);
  // PutTask without encoding when the key is already cached (memory or disk); otherwise encodes.
  // Returns the task's context pinned.
  absl::StatusOr<PinnedContext> CreateTask(const TaskRecord& record, const EncodeFn& encode,
                                           const ValidateFn& validate = nullptr);
  std::vector<TaskRecord> ListTasks() const;
  // Tasks whose record Open() found damaged: id -> what failed (DiskTier::QuarantinedTasks).
  std::map<std::string, std::string> QuarantinedTasks() const;
  // Resumes the store's writes after it ran out of space (DiskTier::Resume); RESOURCE_EXHAUSTED
  // while the disk is still short of the reserve.
  absl::Status ResumeDisk();
  std::optional<TaskRecord> GetTask(const std::string& task_id) const;
  // Removes the task (a quarantined one too); its KV leaves both tiers when no other task shares
  // the key (a pinned memory entry is released when its last pin goes).
  absl::Status DeleteTask(const std::string& task_id);

  // The context for `key`, pinned: memory hit, else loaded from RocksDB and verified, else
  // `encode` (stored to RocksDB when a ready task uses the key). Concurrent callers for one key
  // wait for a single load or encode.
  absl::StatusOr<PinnedContext> Acquire(const std::string& key, const EncodeFn& encode,
                                        const ValidateFn& validate = nullptr);

  CacheStats Stats() const;
  DType storage_dtype() const { return options_.kv_dtype; }
  DType memory_dtype() const;
  MemoryTier& memory() { return *memory_; }
  DiskTier& disk() { return *disk_; }

 private:
  ContextCache(ContextCacheOptions options, Backend& backend);
  // Storage-dtype and memory-dtype versions of a freshly encoded (or given) context.
  struct Prepared {
    EncodedContext storage;
    std::shared_ptr<const EncodedContext> memory;
  };
  absl::StatusOr<Prepared> Prepare(const EncodedContext& ctx);
  // Loads `key` from disk into memory. NOT_FOUND: no blob; DATA_LOSS has been handled (blob
  // deleted, counted) and is returned so the caller re-encodes.
  absl::StatusOr<PinnedContext> LoadFromDisk(const std::string& key, const ValidateFn& validate);
  absl::StatusOr<PinnedContext> AcquireLocked(const std::string& key, const EncodeFn& encode,
                                              const ValidateFn& validate,
                                              const TaskRecord* creating);
  // Drops a key that a replace released (no task uses it any more) from the memory tiers.
  void Release(const std::string& key);
  void Log(LogLevel level, const std::string& message) const;

  ContextCacheOptions options_;
  Backend& backend_;
  std::unique_ptr<MemoryTier> memory_;
  std::unique_ptr<HostTier> host_;  // null when host_budget_bytes == 0
  std::unique_ptr<DiskTier> disk_;

  // Keys being loaded or encoded: other callers for the same key wait instead of duplicating it.
  std::mutex inflight_mutex_;
  std::condition_variable inflight_cv_;
  std::set<std::string> inflight_;

  mutable std::mutex stats_mutex_;
  CacheStats counters_;
};

}  // namespace manyshot

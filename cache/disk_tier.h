// The disk tier: task records and KV blob headers in RocksDB, KV payloads in files beside it
// (cache/blob_files.h), durable across restarts.
//
// Column families: "tasks" ("t/<id>" -> TaskRecord, "ready/<id>" -> kv key, "q/<id>" -> why a task
// is quarantined; named "tasks.N" after a damaged one was left behind), "kv_meta" ("h/<key>" ->
// BlobHeader with every chunk's XXH3-64, "a/<key>" -> last access for disk LRU), "kv" (payload
// chunks of format 2, which this version drops at open; kept so that such a database opens).
//
// A task is written as: its payload to DIR/kv_files/<key>.kv (temporary name, fsync, rename,
// directory fsync), then one WriteBatch with the blob header, the task record and the ready
// marker, committed with sync=true. So the header, record and ready marker become visible
// together, and only after the whole payload is durable; Open() removes files no header names.
// Deleting a blob commits the batch that removes its header first and unlinks the file after.
// Replacing a task overwrites its record in that same batch (deleting the previous blob there
// when it is unused), so the previous version stays stored until the new one commits. Open()
// quarantines a task whose record is damaged instead of failing. See cache/README.md.
#pragma once

#include <atomic>
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
#include "cache/blob_files.h"
#include "cache/blob_format.h"
#include "cache/cache_log.h"
#include "cache/task_record.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace manyshot {

struct DiskTierOptions {
  uint64_t budget_bytes = 0;                  // payload bytes of all blobs; 0 = unlimited
  uint64_t chunk_bytes = uint64_t{16} << 20;  // multiple of 4
  uint64_t max_batch_bytes = uint64_t{64} << 20;
  bool sync_task_writes = true;  // task creates and deletes are durable when they return
  // Free space kept on the store's filesystem: a blob or task record whose write would leave less
  // is refused with RESOURCE_EXHAUSTED before anything is written, so that RocksDB's own writes
  // (its log, its metadata, deletes) still find room. 0: no reserve.
  uint64_t reserve_bytes = 0;
  LogFn log;
};

class DiskTier {
 public:
  struct Stats {
    uint64_t budget_bytes = 0;
    uint64_t bytes = 0;              // payload bytes of all blobs (what the budget counts)
    uint64_t entries = 0;            // blobs
    uint64_t tasks = 0;              // ready tasks
    uint64_t quarantined_tasks = 0;  // ready tasks whose record is damaged (QuarantinedTasks)
    uint64_t evictions = 0;
    uint64_t corruptions_detected = 0;      // damaged headers or records found by Open
    uint64_t staged_writes_recovered = 0;   // temporary KV files of interrupted writes removed
    uint64_t old_format_blobs_dropped = 0;  // format 2 blobs dropped at open (re-encoded on use)
    uint64_t sst_bytes = 0;                 // RocksDB's live SST files
    uint64_t blob_file_bytes = 0;           // RocksDB's blob files
    uint64_t free_bytes = 0;                // on the store's filesystem, now
    // Writes can go ahead: the reserve is free and RocksDB has no unresolved out-of-space error.
    bool writable = true;
    uint64_t writes_refused = 0;  // blobs and records refused for lack of space (or failed so)
  };

  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(const std::filesystem::path& path,
                                                        DiskTierOptions options);
  ~DiskTier();
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Atomically writes the task (record + ready marker) and, when `ctx` is given and no blob exists
  // for record.kv_key yet, its blob (ctx's tensors in its own dtype: the storage dtype). Replacing
  // a task switches versions in that one batch: the previous record stays until it commits, and the
  // previous KV is deleted in it when no other task uses it (then *released_key names that key,
  // for the memory tiers to drop; else it is cleared). A quarantined task of that id is replaced.
  absl::Status PutTask(const TaskRecord& record, const EncodedContext* ctx, Backend& backend,
                       std::string* released_key = nullptr);
  // Writes the blob for `key` alone (re-encoding a ready task whose blob was evicted or corrupt).
  absl::Status PutBlob(const std::string& key, const EncodedContext& ctx, Backend& backend);
  // Removes the task, and its blob when no other task shares the key; *key_unused says whether
  // any task still uses the key (the caller drops the memory tier's entry when none does).
  // A quarantined task is removed too (its record and marker).
  absl::Status DeleteTask(const std::string& task_id, bool* key_unused);

  std::optional<TaskRecord> GetTask(const std::string& task_id) const;
  std::vector<TaskRecord> ListTasks() const;  // ready tasks, by id
  // Ready tasks whose record Open() found damaged (a checksum, RocksDB's or ours, failed): id ->
  // what failed. Kept on disk, never served, until deleted or replaced (PutTask).
  std::map<std::string, std::string> QuarantinedTasks() const;
  // Ids of ready tasks whose record names `key`.
  std::vector<std::string> TasksUsingKey(const std::string& key) const;

  bool HasBlob(const std::string& key) const;
  // The blob for `key`, verified (header checksum and fields, key, format version, every chunk's
  // size and checksum), in tensors of `memory_dtype` allocated on `backend`. NOT_FOUND when there
  // is no blob; DATA_LOSS when any check fails (the caller deletes it and re-encodes).
  absl::StatusOr<EncodedContext> LoadBlob(const std::string& key, Backend& backend,
                                          DType memory_dtype);
  // Deletes the blob's chunks, header and access record (the tasks stay).
  absl::Status DeleteBlob(const std::string& key);
  // Blob keys from least to most recently used.
  std::vector<std::string> BlobsByRecency() const;

  // After RocksDB failed a write for lack of space it refuses every write until resumed: the
  // next write resumes it when the reserve is free again. This does so now (a caller polling the
  // store's health); RESOURCE_EXHAUSTED while still short of space.
  absl::Status Resume();

  // Flushes memtables to files (tests that damage files; a clean shutdown does not need it).
  absl::Status Flush();
  Stats stats() const;
  rocksdb::DB* db() { return db_; }  // tests
  rocksdb::ColumnFamilyHandle* tasks_family() { return tasks_cf_; }
  rocksdb::ColumnFamilyHandle* kv_family() { return kv_; }
  rocksdb::ColumnFamilyHandle* meta_family() { return meta_; }

 private:
  struct BlobInfo {
    uint64_t bytes = 0;
    uint64_t last_access = 0;
  };
  struct BlobMetadata {                          // the blob-metadata family's entries, read at open
    std::vector<std::string> pending;            // format 2 staged writes
    std::map<std::string, uint64_t> access;      // key -> last access
    std::map<std::string, std::string> headers;  // key -> serialized header
  };
  DiskTier() = default;
  // One open; `repairing` opens without paranoid checks or compactions, to salvage a family whose
  // table files RocksDB cannot open.
  static absl::StatusOr<std::unique_ptr<DiskTier>> OpenOnce(const std::filesystem::path& path,
                                                            const DiskTierOptions& options,
                                                            bool repairing);
  // Takes `base`'s generations out of `handles`: the live one into `*live`, the others dropped.
  absl::Status PickLiveGeneration(const std::string& base,
                                  std::vector<rocksdb::ColumnFamilyHandle*>* handles,
                                  rocksdb::ColumnFamilyHandle** live);
  absl::Status Recover();
  // Recover()'s steps.
  absl::Status ReadTaskMarkers(std::map<std::string, std::string>* ready,
                               std::map<std::string, std::string>* marked);
  bool LoadReadyRecords(const std::map<std::string, std::string>& ready,
                        const std::map<std::string, std::string>& marked);
  void SweepRecordsWithoutMarker(const std::map<std::string, std::string>& ready,
                                 rocksdb::WriteBatch* repairs);
  absl::Status ReadBlobMetadata(BlobMetadata* meta);
  void AdmitBlob(const std::string& key, const std::string& bytes,
                 const std::map<std::string, uint64_t>& access, rocksdb::WriteBatch* repairs);
  // Copies what can be read of a damaged family to its next generation (disk_tier.cc).
  // `fixup` may amend the salvaged (key, value) pairs before they are written.
  using SalvageFixup = std::function<void(std::vector<std::pair<std::string, std::string>>*)>;
  absl::Status SalvageFamily(const std::string& base, rocksdb::ColumnFamilyHandle** live,
                             const std::string& why, const SalvageFixup& fixup);
  // Moves the task records to a fresh tasks family, leaving a damaged one behind (disk_tier.cc).
  absl::Status MigrateTasksFamily();
  // Streams ctx's chunks into batches; the last one gets the header, the access time and then
  // whatever `add_records` appends (the task record and ready marker), committed with `sync`.
  // Caller holds write_mutex_.
  absl::Status WriteBlobLocked(const std::string& key, const EncodedContext& ctx, Backend& backend,
                               const std::function<void(rocksdb::WriteBatch*)>& add_records,
                               bool sync);
  // Adds the deletion of the blob's header, access time (and format 2 chunks) to `batch`, and
  // dooms its file: CommitLocked unlinks it once the batch has committed.
  void AddBlobDeletion(const std::string& key, rocksdb::WriteBatch* batch);
  // Writes `batch`, then unlinks the doomed files (none when the write failed). Caller holds
  // write_mutex_ (or is Open()).
  absl::Status CommitLocked(rocksdb::WriteBatch* batch, bool sync, std::string_view what);
  // Removes an entry of the KV files' directory that is no committed blob (Recover): a temporary
  // file of an interrupted write, a file no header names, or a directory.
  void RemoveStray(const std::filesystem::path& path);
  // OK when `bytes` more leave the reserve free; else RESOURCE_EXHAUSTED saying what is short
  // (never the data directory's path: the message reaches clients).
  absl::Status CheckRoom(uint64_t bytes, std::string_view what);
  // Resumes RocksDB after an out-of-space write error. Caller holds write_mutex_.
  absl::Status ResumeLocked();
  // Evicts least recently used blobs other than `keep` until the budget holds. Caller holds
  // write_mutex_.
  void EnforceBudgetLocked(const std::string& keep);
  void Touch(const std::string& key);
  void Log(LogLevel level, const std::string& message) const;

  std::filesystem::path path_;
  // RocksDB failed a write for lack of space; every write fails until Resume() succeeds.
  std::atomic<bool> needs_resume_{false};
  std::atomic<uint64_t> writes_refused_{0};

  DiskTierOptions options_;
  rocksdb::DB* db_ = nullptr;
  rocksdb::ColumnFamilyHandle* default_ = nullptr;
  rocksdb::ColumnFamilyHandle* tasks_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* kv_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;

  std::unique_ptr<BlobFiles> files_;
  std::mutex write_mutex_;                 // one writer at a time (files, batches, budget)
  std::vector<std::string> doomed_files_;  // guarded by write_mutex_
  mutable std::mutex mutex_;               // the in-memory index below
  std::map<std::string, TaskRecord> tasks_;
  std::map<std::string, std::string> quarantined_;      // task id -> why its record is unreadable
  std::map<std::string, std::set<std::string>> users_;  // kv key -> task ids
  std::map<std::string, BlobInfo> blobs_;
  uint64_t clock_ = 0;
  uint64_t bytes_ = 0;
  Stats counters_;
};

}  // namespace manyshot

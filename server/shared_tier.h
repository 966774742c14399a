// The server's view of the shared tier (--shared_dir): the catalog of task manifests that every
// replica reads and writes, and the KV files under it, with the per-replica metrics. Knows task
// records (cache/task_record.h), not the registry: the registry decides when to publish, reload
// or restore (server/shared_sync.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/context_cache.h"
#include "cache/shared/encoding_markers.h"
#include "cache/shared/manifests.h"
#include "cache/shared/shared_context.h"
#include "cache/shared/shared_directory.h"
#include "cache/shared/shared_kv.h"
#include "cache/task_record.h"
#include "engine/core/backend.h"
#include "engine/task/encoded_context.h"
#include "server/job_threads.h"
#include "server/shared_metrics.h"

namespace manyshot::server {

class SharedTier {
 public:
  // Opens (creating) the directory; `storage_dtype` is the KV files' dtype (--kv_dtype).
  static absl::StatusOr<std::unique_ptr<SharedTier>> Open(const std::string& dir, Backend& backend,
                                                          DType storage_dtype,
                                                          SharedMetrics& metrics);
  ~SharedTier() { stopping_.store(true); }  // a detach in progress stops; the joins follow

  // The newest manifest of (tenant, id): NOT_FOUND when none was ever published (a tombstone is
  // returned as such).
  absl::StatusOr<shared::Manifest> Latest(const std::string& tenant, const std::string& id) const;
  // Whether `version` is still the newest (one lookup by name); counted as a revalidation. An
  // I/O error reads as "not current", so the caller reloads rather than serves a stale version.
  bool IsCurrent(const std::string& tenant, const std::string& id, uint64_t version) const;
  // The newest manifest of every id of `tenant`, tombstones left out, in id order.
  absl::StatusOr<std::vector<shared::Manifest>> List(const std::string& tenant) const;

  // Publishes `record` as `version` (1 + the newest seen; 1 for a new id). `has_kv`: the record's
  // kv_key names a KV file, which must be durable already. ABORTED when another replica
  // published that version first.
  absl::Status PublishRecord(const TaskRecord& record, const std::string& id, bool has_kv,
                             uint64_t version) const;
  absl::Status PublishTombstone(const std::string& tenant, const std::string& id,
                                uint64_t version) const;
  // The task record a manifest carries; DATA_LOSS when its body is damaged.
  static absl::StatusOr<TaskRecord> RecordOf(const shared::Manifest& manifest);

  // The context of KV file `key`, verified, in the file's dtype: NOT_FOUND, or DATA_LOSS for a
  // damaged file (never served; counted by the caller when it re-encodes). On the CPU its tensors
  // are the mapped file's pages (shared/shared_context.h) until AdmitRestored detaches them.
  absl::StatusOr<shared::SharedContext> Restore(const std::string& key) const;
  // Puts a restored context (verified) into `cache`'s memory tier, pinned for the caller, and
  // finishes the restore on a thread of its own, at a lower CPU priority than the requests, so
  // that the first answer waits for neither step: first a mapped context is detached from its file
  // (its pages copied into this replica's memory; should the file have become unreadable, the
  // context is dropped from memory and counted, and nothing is copied), then its local disk copy
  // (with `record`) is written. Until that copy lands, a context evicted from memory is restored
  // from the shared tier again. `gate` runs the disk copy, or skips it when the task's version
  // was retired meanwhile (a task deleted while its copy waited must not come back as a local
  // record).
  using LocalCopyGate = std::function<void(const std::function<void()>& copy)>;
  absl::StatusOr<PinnedContext> AdmitRestored(ContextCache& cache, const TaskRecord& record,
                                              shared::SharedContext restored, LocalCopyGate gate);
  // Where the local disk copies run: by default each on a thread of its own; a test may queue
  // them and run them when it chooses.
  using JobRunner = std::function<void(std::function<void()> job)>;
  void SetLocalCopyRunner(JobRunner runner) { copy_runner_ = std::move(runner); }
  // Writes the context of `key` unless its file exists; `replace` overwrites a damaged one.
  absl::Status Store(const std::string& key, const EncodedContext& ctx, bool replace) const;
  bool HasKv(const std::string& key) const { return kv_.Exists(key); }

  // Encoding markers (cache/shared/encoding_markers.h): present while a replica's CreateTask of
  // the id encodes, so other replicas answer UNAVAILABLE (retry) rather than NOT_FOUND. A marker
  // older than shared::kEncodingMarkerLife (a crashed replica's) is ignored.
  void MarkEncoding(const std::string& tenant, const std::string& id) const;
  void ClearEncoding(const std::string& tenant, const std::string& id) const;
  bool EncodingElsewhere(const std::string& tenant, const std::string& id) const;

  void CountVersionSwitch() const { metrics_.version_switches.Increment(); }
  void CountCorruptReencode() const { metrics_.corrupt_reencodes.Increment(); }

 private:
  SharedTier(shared::SharedDirectory dir, Backend& backend, DType storage_dtype,
             SharedMetrics& metrics)
      : dir_(std::move(dir)), backend_(backend), storage_dtype_(storage_dtype), metrics_(metrics) {}
  // Detaches a mapped context from its file (see AdmitRestored); false when the restore must not
  // go on to the local disk copy.
  bool Detach(ContextCache& cache, const std::string& key,
              const std::weak_ptr<shared::MappedFile>& mapping) const;

  shared::SharedDirectory dir_;
  shared::ManifestStore manifests_{&dir_};
  shared::SharedKvFiles kv_{&dir_};
  shared::EncodingMarkers markers_{&dir_};
  Backend& backend_;
  DType storage_dtype_;

  SharedMetrics& metrics_;
  std::atomic<bool> stopping_{false};
  // Detaches and local disk copies of restored contexts; joined (before the cache goes) when this
  // goes.
  JobThreads local_copies_;
  JobRunner copy_runner_;  // empty: local_copies_
};

}  // namespace manyshot::server

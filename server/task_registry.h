// The tasks this server knows, per tenant: created through the API, restored from the cache's
// RocksDB records at startup. Each task id maps to its served version (an immutable TaskVersion
// that requests hold from start to end) and its lifecycle state:
//   ENCODING  a CreateTask of a new id is tokenizing/encoding; not served yet;
//   READY     served; `replacing` while a CreateTask with replace encodes its next version (the
//             current one stays served until the next one has committed);
//   FAILED    not served, with the reason: its stored record was found damaged at startup
//             (quarantined), or its CreateTask failed after it became visible for a reason other
//             than a bad request (kept in memory only; INVALID_ARGUMENT leaves nothing behind).
//             DeleteTask removes it; CreateTask (with replace, when quarantined) overwrites it.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/context_cache.h"
#include "engine/serving/prepared_task.h"
#include "engine/serving/served_task_options.h"
#include "engine/task/served_task.h"
#include "manyshot/internal/stored_task.pb.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/model_loader.h"
#include "server/server_config.h"
#include "server/task_version.h"

namespace manyshot::shared {
struct Manifest;
}

namespace manyshot::server {

class SharedTier;

class TaskRegistry {
 public:
  TaskRegistry(const LoadedModel& model, ContextCache& cache, const ServerConfig& config);

  // Loads every task record from the cache (its KV stays on disk until first use). A record that
  // is damaged, or whose spec no longer parses, makes that task FAILED; the others are served.
  absl::Status Restore();

  struct CreateResult {
    v1::Task task;
    bool created = false;
    bool replaced = false;
  };
  // Progress: (phase, groups done, groups total, tokens done).
  using Progress = std::function<void(v1::CreateTaskProgress::Phase, int64_t, int64_t, int64_t)>;
  absl::StatusOr<CreateResult> Create(
      const std::string& tenant, const std::string& task_id, const v1::TaskSpec& spec,
      const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos, bool replace,
      const Progress& progress);
  absl::StatusOr<v1::Task> Get(const std::string& tenant, const std::string& task_id);
  // Tasks of `tenant` in id order after `after` (exclusive), at most `limit`.
  std::vector<v1::Task> List(const std::string& tenant, const std::string& after, size_t limit,
                             bool* more);
  absl::StatusOr<uint64_t> Delete(const std::string& tenant, const std::string& task_id);
  size_t size() const;

  // What one tenant's tasks hold, for GetServerInfo under bearer tokens: its tasks (every state),
  // and the KV bytes and entries of its ready tasks in the memory tier and on disk (each distinct
  // KV entry once).
  struct TenantFigures {
    uint64_t tasks = 0;
    uint64_t memory_bytes = 0;
    uint64_t memory_entries = 0;
    uint64_t disk_bytes = 0;
    uint64_t disk_entries = 0;
  };
  TenantFigures FiguresOf(const std::string& tenant) const;

  struct Counts {
    size_t encoding = 0;
    size_t ready = 0;
    size_t failed = 0;
    size_t quarantined = 0;  // of the failed: their stored record is damaged
  };
  Counts counts() const;

  // The version a request is answered against: NOT_FOUND, or FAILED_PRECONDITION naming the state
  // when the task is ENCODING or FAILED.
  absl::StatusOr<std::shared_ptr<const TaskVersion>> Resolve(const std::string& tenant,
                                                             const std::string& task_id);

  // A version ready for queries: its engine task and (tasks with a cached context) its context,
  // pinned for as long as the handle lives.
  struct Handle {
    std::shared_ptr<const TaskVersion> version;
    std::shared_ptr<ServedTask> task;
    PinnedContext context;
    const EncodedContext* get() const { return context ? context.get() : nullptr; }
  };
  // ABORTED when the version was retired (replaced or deleted) and its KV is no longer cached:
  // the request is not re-encoded for a version nobody serves any more.
  absl::StatusOr<Handle> Acquire(const std::shared_ptr<const TaskVersion>& version);
  // A version's engine task, for preparing requests (rendering, tokenizing) without its context.
  // Built from the stored spec on first use after a restart (tokenizing the demonstrations, no
  // encoding); thread-safe.
  absl::StatusOr<std::shared_ptr<ServedTask>> EngineTask(const TaskVersion& version);

  // Serves from the shared tier too (--shared_dir; server/shared_sync.cc): set before serving.
  void AttachShared(SharedTier* shared);

 private:
  struct Entry {
    std::shared_ptr<const TaskVersion> current;  // the served version; null unless READY
    v1::Task shown;                              // the task as reported while ENCODING or FAILED
    bool replacing = false;    // READY, and a replace is encoding the next version
    bool quarantined = false;  // FAILED because the stored record is damaged (still on disk)
    bool deleting = false;     // DeleteTask is removing it: invisible, creates wait
  };
  static std::string Key(const std::string& tenant, const std::string& task_id) {
    return tenant + '\n' + task_id;
  }
  v1::TaskState StateOf(const Entry& entry) const;
  // The reported task of an entry (tiers filled for READY ones). Caller holds no lock.
  v1::Task Describe(const Entry& entry);
  void FillTiers(v1::Task& task, const std::string& kv_key);
  void AddFailed(const std::string& tenant, const std::string& task_id, const std::string& error,
                 bool quarantined);
  // Serves `version` (READY), retiring the previous one.
  CreateResult Publish(const std::shared_ptr<TaskVersion>& version, const Entry& previous);
  // The cache keys task records by one string; tenants get their own namespace in it.
  static std::string RecordId(const std::string& tenant, const std::string& task_id) {
    return tenant + "/" + task_id;
  }

  // Create's steps (server/task_create.cc).
  struct EngineInputs {
    ServedTaskOptions options;
    std::vector<Example> examples;
  };
  // A spec and its demonstrations in the engine's terms, checked against the served model: first
  // the mode (FAILED_PRECONDITION naming `mode_field` when the model's architecture lacks it),
  // then every field.
  absl::StatusOr<EngineInputs> ToEngineInputs(
      const v1::TaskSpec& spec, const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos,
      const std::string& mode_field) const;
  // What a create starts from: the entry it replaces, or (unchanged) the reply when the task
  // already has this content.
  struct Begun {
    Entry previous;
    std::optional<CreateResult> unchanged;
  };
  // Waits out a delete of the task, then shows it ENCODING (or marks it replacing).
  absl::StatusOr<Begun> BeginCreate(const std::string& tenant, const std::string& task_id,
                                    const v1::TaskSpec& spec, const std::string& hash, bool replace,
                                    int64_t now);
  // Puts back what a failed create found (see task_create.cc) and returns `status`.
  absl::Status FailCreate(const std::string& tenant, const std::string& task_id,
                          const Entry& previous, absl::Status status);
  // Counts what a prepared task keeps between queries against the memory tier's budget;
  // RESOURCE_EXHAUSTED, naming the bytes and the budget (and, for a replace, what the `replaced`
  // version still holds), when it cannot fit.
  absl::StatusOr<MemoryReservation> Reserve(const PreparedTask& prepared,
                                            const std::string& task_id,
                                            const TaskVersion* replaced);
  // INVALID_ARGUMENT when every query would encode more context tokens again than
  // --max_query_context_tokens.
  absl::Status CheckQueryContext(const PreparedTask& prepared) const;
  std::shared_ptr<TaskVersion> NewVersion(
      const std::string& tenant, const std::string& task_id, const v1::TaskSpec& spec,
      const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos, const std::string& hash,
      int64_t now, const PreparedTask& prepared) const;
  // Stores the version's record, and encodes and stores its context when it has one (returned
  // pinned; empty otherwise).
  absl::StatusOr<PinnedContext> Store(TaskVersion& version, const PreparedTask& prepared,
                                      const Progress& progress);

  // The shared tier's side (server/shared_sync.cc); each is a no-op without one.
  absl::Status SyncShared(const std::string& tenant, const std::string& task_id);
  absl::Status SyncSharedTenant(const std::string& tenant);
  // SyncShared for a request: UNAVAILABLE (retry) when the task is unknown here and another
  // replica's CreateTask is encoding it.
  absl::Status SyncSharedForRequest(const std::string& tenant, const std::string& task_id);
  // Marks the task as being encoded here, for the other replicas, until it goes out of scope.
  class SharedEncodingMark {
   public:
    SharedEncodingMark() = default;
    SharedEncodingMark(SharedTier* shared, std::string tenant, std::string task_id)
        : shared_(shared), tenant_(std::move(tenant)), task_id_(std::move(task_id)) {}
    SharedEncodingMark(SharedEncodingMark&& other) noexcept
        : shared_(std::exchange(other.shared_, nullptr)),
          tenant_(std::move(other.tenant_)),
          task_id_(std::move(other.task_id_)) {}
    SharedEncodingMark& operator=(SharedEncodingMark&&) = delete;
    ~SharedEncodingMark();

   private:
    SharedTier* shared_ = nullptr;
    std::string tenant_, task_id_;
  };
  SharedEncodingMark MarkSharedEncoding(const std::string& tenant, const std::string& task_id);
  absl::Status InstallShared(const shared::Manifest& manifest);
  absl::Status PublishShared(TaskVersion& version, const PinnedContext& context, bool replace);
  absl::Status DeleteShared(const std::string& tenant, const std::string& task_id);
  // The version's context from the memory tier, or restored from the shared tier into it (its
  // local disk copy is written afterwards, off the request's path); nullopt when the local tiers
  // or an encode must provide it.
  std::optional<PinnedContext> RestoreShared(const std::shared_ptr<const TaskVersion>& version,
                                             const ValidateFn& validate);
  // Marks `version` retired and waits for a local copy of its restored context still being
  // written (TaskVersion::local_copy_mutex): after this, no copy writes its record.
  static void Retire(const TaskVersion& version);
  EncodeFn SharedEncode(const TaskVersion& version, EncodeFn encode);
  SharedTier* shared_ = nullptr;
  std::set<std::string> shared_damaged_;  // KV keys found damaged; guarded by mutex_

  const LoadedModel& model_;
  ContextCache& cache_;
  const ServerConfig& config_;
  mutable std::mutex mutex_;
  std::condition_variable deleted_;       // signalled when a delete finishes
  std::map<std::string, Entry> entries_;  // by Key(tenant, id)
  uint64_t next_generation_ = 1;          // guarded by mutex_
  // Creates run side by side up to --max_concurrent_creates, so one tenant's long encode does not
  // hold every other tenant's create; two creates of one task run one after the other.
  class CreateSlot;
  std::mutex create_mutex_;
  std::condition_variable create_done_;
  size_t creates_running_ = 0;           // guarded by create_mutex_
  std::set<std::string> keys_creating_;  // by Key(tenant, id); guarded by create_mutex_
};

}  // namespace manyshot::server

// The tasks this server knows, per tenant: created through the API, restored from the cache's
// RocksDB records at startup. Owns each task's prepared IclTask (built lazily after a restart) and
// hands out handles that pin the task's context in the cache's memory tier while a batch runs.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "cache/context_cache.h"
#include "engine/prompting/icl_task.h"
#include "manyshot/internal/stored_task.pb.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/model_loader.h"
#include "server/server_config.h"

namespace manyshot::server {

class TaskRegistry {
 public:
  TaskRegistry(const LoadedModel& model, ContextCache& cache, const ServerConfig& config);

  // Loads every task record from the cache (its KV stays on disk until first use).
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

  // A task ready for queries: its IclTask and (unless only CONVENTIONAL is asked) its context,
  // pinned for as long as the handle lives.
  struct Handle {
    std::shared_ptr<IclTask> task;
    PinnedContext context;
    const EncodedContext* get() const { return context ? context.get() : nullptr; }
  };
  absl::StatusOr<Handle> Acquire(const std::string& tenant, const std::string& task_id);

 private:
  struct Entry {
    TaskRecord record;
    internal::StoredTask stored;
    std::shared_ptr<IclTask> task;  // prepared lazily
    std::mutex prepare_mutex;
  };
  static std::string Key(const std::string& tenant, const std::string& task_id) {
    return tenant + '\n' + task_id;
  }
  absl::StatusOr<std::shared_ptr<IclTask>> Prepared(Entry& entry);
  // NOT_FOUND naming the task when `tenant` has no such task.
  absl::StatusOr<std::shared_ptr<Entry>> Find(const std::string& tenant,
                                              const std::string& task_id) const;
  void FillTiers(v1::Task& task, const std::string& kv_key);

  const LoadedModel& model_;
  ContextCache& cache_;
  const ServerConfig& config_;
  mutable std::mutex mutex_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;  // by Key(tenant, id)
  std::mutex create_mutex_;  // one create at a time (each saturates the backend anyway)
};

}  // namespace manyshot::server

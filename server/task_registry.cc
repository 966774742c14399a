#include "server/task_registry.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/api_to_engine.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

// The inverse of RecordId: task ids never contain '/', tenants may.
bool SplitRecordId(const std::string& record_id, std::string* tenant, std::string* task_id) {
  const size_t slash = record_id.rfind('/');
  if (slash == std::string::npos) return false;
  *tenant = record_id.substr(0, slash);
  *task_id = record_id.substr(slash + 1);
  return true;
}

}  // namespace

TaskRegistry::TaskRegistry(const LoadedModel& model, ContextCache& cache,
                           const ServerConfig& config)
    : model_(model), cache_(cache), config_(config) {}

void TaskRegistry::AddFailed(const std::string& tenant, const std::string& task_id,
                             const std::string& error, bool quarantined) {
  Entry entry;
  entry.shown.set_task_id(task_id);
  entry.shown.set_state(v1::TASK_STATE_FAILED);
  entry.shown.set_error(error);
  entry.quarantined = quarantined;
  entries_[Key(tenant, task_id)] = std::move(entry);
}

absl::Status TaskRegistry::Restore() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t quarantined = 0;
  for (const TaskRecord& record : cache_.ListTasks()) {
    auto version = std::make_shared<TaskVersion>();
    std::string tenant, task_id;
    if (!version->stored.ParseFromString(record.spec)) {
      if (!SplitRecordId(record.task_id, &tenant, &task_id)) continue;
      spdlog::error("task {} of tenant {} has an unreadable spec; quarantined (FAILED)", task_id,
                    tenant);
      AddFailed(tenant, task_id,
                "its stored spec does not parse (written by an incompatible server?); DeleteTask "
                "it, or CreateTask it again with replace",
                true);
      ++quarantined;
      continue;
    }
    version->generation = next_generation_++;
    version->tenant = record.tenant;
    version->task_id = version->stored.task().task_id();
    version->record = record;
    Entry entry;
    entry.current = std::move(version);
    entries_[Key(record.tenant, entry.current->task_id)] = std::move(entry);
  }
  for (const auto& [record_id, reason] : cache_.QuarantinedTasks()) {
    std::string tenant, task_id;
    if (!SplitRecordId(record_id, &tenant, &task_id)) continue;
    spdlog::error(
        "task {} of tenant {} has a damaged record ({}); quarantined (FAILED), other tasks are "
        "served",
        task_id, tenant, reason);
    AddFailed(tenant, task_id,
              absl::StrCat("its stored record is damaged (", reason,
                           "); DeleteTask it, or CreateTask it again with replace"),
              true);
    ++quarantined;
  }
  spdlog::info("restored {} tasks from the cache ({} quarantined)", entries_.size(), quarantined);
  return absl::OkStatus();
}

size_t TaskRegistry::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [key, entry] : entries_) n += entry.deleting ? 0 : 1;
  return n;
}

v1::TaskState TaskRegistry::StateOf(const Entry& entry) const {
  return entry.current ? v1::TASK_STATE_READY : entry.shown.state();
}

TaskRegistry::Counts TaskRegistry::counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Counts c;
  for (const auto& [key, entry] : entries_) {
    if (entry.deleting) continue;
    switch (StateOf(entry)) {
      case v1::TASK_STATE_READY:
        ++c.ready;
        break;
      case v1::TASK_STATE_ENCODING:
        ++c.encoding;
        break;
      default:
        ++c.failed;
        if (entry.quarantined) ++c.quarantined;
    }
  }
  return c;
}

void TaskRegistry::FillTiers(v1::Task& task, const std::string& kv_key) {
  auto* stats = task.mutable_stats();
  stats->clear_tiers();
  if (cache_.memory().Contains(kv_key)) stats->add_tiers(v1::CACHE_TIER_MEMORY);
  if (cache_.disk().HasBlob(kv_key)) stats->add_tiers(v1::CACHE_TIER_DISK);
}

v1::Task TaskRegistry::Describe(const Entry& entry) {
  if (!entry.current) return entry.shown;
  v1::Task task = entry.current->stored.task();
  task.set_replacing(entry.replacing);
  FillTiers(task, entry.current->record.kv_key);
  return task;
}

TaskRegistry::TenantFigures TaskRegistry::FiguresOf(const std::string& tenant) const {
  TenantFigures figures;
  std::map<std::string, uint64_t> kv_bytes;  // by KV key: one entry may serve several tasks
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string prefix = tenant + '\n';
    for (auto it = entries_.lower_bound(prefix);
         it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (it->second.deleting) continue;
      ++figures.tasks;
      if (const auto& current = it->second.current) {
        kv_bytes[current->record.kv_key] = current->stored.task().stats().cache_bytes();
      }
    }
  }
  for (const auto& [key, bytes] : kv_bytes) {
    if (bytes == 0) continue;  // a task without a cached context keeps nothing in the KV tiers
    if (cache_.memory().Contains(key)) {
      figures.memory_bytes += bytes;
      ++figures.memory_entries;
    }
    if (cache_.disk().HasBlob(key)) {
      figures.disk_bytes += bytes;
      ++figures.disk_entries;
    }
  }
  return figures;
}

TaskRegistry::CreateResult TaskRegistry::Publish(const std::shared_ptr<TaskVersion>& version,
                                                 const Entry& previous) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    version->generation = next_generation_++;
    if (previous.current) previous.current->retired.store(true);
    Entry ready;
    ready.current = version;
    entries_[Key(version->tenant, version->task_id)] = std::move(ready);
  }
  CreateResult result;
  result.task = version->stored.task();
  FillTiers(result.task, version->record.kv_key);
  result.created = true;
  result.replaced = previous.current != nullptr || previous.quarantined;
  return result;
}

absl::StatusOr<v1::Task> TaskRegistry::Get(const std::string& tenant, const std::string& task_id) {
  if (auto s = ValidateTaskId(task_id); !s.ok()) return s;
  if (auto s = SyncSharedForRequest(tenant, task_id); !s.ok()) return s;
  if (auto s = SyncShared(tenant, task_id); !s.ok()) return s;
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(Key(tenant, task_id));
    if (it == entries_.end() || it->second.deleting) {
      return absl::NotFoundError(absl::StrCat("task \"", task_id, "\" does not exist"));
    }
    entry = it->second;
  }
  return Describe(entry);
}

std::vector<v1::Task> TaskRegistry::List(const std::string& tenant, const std::string& after,
                                         size_t limit, bool* more) {
  if (auto s = SyncSharedTenant(tenant); !s.ok()) {
    spdlog::warn("ListTasks: the shared catalog was not read; listing this replica's tasks: {}",
                 s.ToString());
  }
  std::vector<Entry> page;
  *more = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string prefix = tenant + '\n';
    for (auto it = entries_.upper_bound(Key(tenant, after)); it != entries_.end(); ++it) {
      if (it->first.compare(0, prefix.size(), prefix) != 0) break;
      if (it->second.deleting) continue;
      if (page.size() == limit) {
        *more = true;
        break;
      }
      page.push_back(it->second);
    }
  }
  std::vector<v1::Task> tasks;
  for (const Entry& entry : page) tasks.push_back(Describe(entry));
  return tasks;
}

absl::StatusOr<uint64_t> TaskRegistry::Delete(const std::string& tenant,
                                              const std::string& task_id) {
  if (auto s = ValidateTaskId(task_id); !s.ok()) return s;
  if (auto s = DeleteShared(tenant, task_id); !s.ok()) return s;
  const std::string key = Key(tenant, task_id);
  Entry entry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end() || it->second.deleting) {
      return absl::NotFoundError(absl::StrCat("task \"", task_id, "\" does not exist"));
    }
    const v1::TaskState state = StateOf(it->second);
    if (state == v1::TASK_STATE_ENCODING || it->second.replacing) {
      return absl::FailedPreconditionError(absl::StrCat(
          "task \"", task_id,
          "\" is being encoded by a CreateTask call; delete it once that call has finished (or "
          "cancel the call)"));
    }
    if (state == v1::TASK_STATE_FAILED && !it->second.quarantined) {
      entries_.erase(it);  // a failed create stored nothing
      return uint64_t{0};
    }
    it->second.deleting = true;
    entry = it->second;
  }
  // The deletion is published already: a copy of a restored context must not bring it back.
  if (shared_ != nullptr && entry.current) Retire(*entry.current);
  const uint64_t before = cache_.Stats().memory_bytes + cache_.Stats().disk_bytes;
  absl::Status s = cache_.DeleteTask(RecordId(tenant, task_id));
  // A task this replica only took from the shared catalog has no local record.
  if (shared_ != nullptr && absl::IsNotFound(s)) s = absl::OkStatus();
  const uint64_t after = cache_.Stats().memory_bytes + cache_.Stats().disk_bytes;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (s.ok()) {
      if (entry.current) entry.current->retired.store(true);
      entries_.erase(key);
    } else {
      entries_[key].deleting = false;
    }
  }
  deleted_.notify_all();
  if (!s.ok()) return s;
  return before > after ? before - after : 0;
}

absl::StatusOr<std::shared_ptr<const TaskVersion>> TaskRegistry::Resolve(
    const std::string& tenant, const std::string& task_id) {
  if (auto s = ValidateTaskId(task_id); !s.ok()) return s;
  if (auto s = SyncSharedForRequest(tenant, task_id); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(Key(tenant, task_id));
  if (it == entries_.end() || it->second.deleting) {
    return absl::NotFoundError(absl::StrCat("task \"", task_id, "\" does not exist"));
  }
  const Entry& entry = it->second;
  if (entry.current) return entry.current;
  if (entry.shown.state() == v1::TASK_STATE_ENCODING) {
    return absl::FailedPreconditionError(
        absl::StrCat("task \"", task_id,
                     "\" is still being encoded (state ENCODING); retry once GetTask shows READY"));
  }
  return absl::FailedPreconditionError(
      absl::StrCat("task \"", task_id, "\" is FAILED: ", entry.shown.error()));
}

absl::StatusOr<std::shared_ptr<ServedTask>> TaskRegistry::EngineTask(const TaskVersion& version) {
  std::lock_guard<std::mutex> lock(version.prepare_mutex);
  if (version.task) return version.task;
  // After a restart: rebuild the task from its stored spec (tokenizing, no encoding; what a task
  // keeps between queries is recomputed).
  const v1::TaskSpec& spec = version.stored.spec();
  auto inputs =
      ToEngineInputs(spec, version.stored.demonstrations(), "the stored task's spec.mode");
  if (!inputs.ok()) return inputs.status();
  auto prepared = model_.served->PrepareTask(inputs->options, inputs->examples);
  if (!prepared.ok()) return prepared.status();
  auto held = Reserve(*prepared, version.task_id, nullptr);
  if (!held.ok()) return held.status();
  version.held = *std::move(held);
  version.context = prepared->context;
  version.task = prepared->task;
  return version.task;
}

absl::StatusOr<TaskRegistry::Handle> TaskRegistry::Acquire(
    const std::shared_ptr<const TaskVersion>& version) {
  auto task = EngineTask(*version);
  if (!task.ok()) return task.status();
  Handle handle;
  handle.version = version;
  handle.task = *task;
  // A task without a cached context (its encoder runs per query) needs nothing from the cache.
  std::shared_ptr<const CachedContext> context;
  {
    std::lock_guard<std::mutex> lock(version->prepare_mutex);
    context = version->context;
  }
  if (!context) return handle;
  EncodeFn encode;
  if (!version->retired.load()) {
    encode = SharedEncode(*version, [context]() { return context->Encode(nullptr); });
  }
  const ValidateFn validate = [context](const EncodedContext& ctx) { return context->Check(ctx); };
  std::optional<PinnedContext> restored = RestoreShared(version, validate);
  auto pinned = restored ? absl::StatusOr<PinnedContext>(*std::move(restored))
                         : cache_.Acquire(version->record.kv_key, encode, validate);
  if (!pinned.ok()) {
    if (!encode && absl::IsFailedPrecondition(pinned.status())) {
      return absl::AbortedError(absl::StrCat(
          "task \"", version->task_id,
          "\" was replaced or deleted while this request waited, and the version it was accepted "
          "for is no longer cached; retry to use the current version"));
    }
    return pinned.status();
  }
  handle.context = *std::move(pinned);
  return handle;
}

}  // namespace manyshot::server

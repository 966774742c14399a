#include "server/task_registry.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "cache/cache_key.h"
#include "server/task_spec.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

// The cache keys task records by one string; tenants get their own namespace in it.
std::string RecordId(const std::string& tenant, const std::string& task_id) {
  return tenant + "/" + task_id;
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

TaskRegistry::TaskRegistry(const LoadedModel& model, ContextCache& cache,
                           const ServerConfig& config)
    : model_(model), cache_(cache), config_(config) {}

absl::Status TaskRegistry::Restore() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const TaskRecord& record : cache_.ListTasks()) {
    auto entry = std::make_shared<Entry>();
    entry->record = record;
    if (!entry->stored.ParseFromString(record.spec)) {
      spdlog::error("task record {} has an unreadable spec; skipping it", record.task_id);
      continue;
    }
    entries_[Key(record.tenant, entry->stored.task().task_id())] = std::move(entry);
  }
  spdlog::info("restored {} tasks from the cache", entries_.size());
  return absl::OkStatus();
}

size_t TaskRegistry::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.size();
}

void TaskRegistry::FillTiers(v1::Task& task, const std::string& kv_key) {
  auto* stats = task.mutable_stats();
  stats->clear_tiers();
  if (cache_.memory().Contains(kv_key)) stats->add_tiers(v1::CACHE_TIER_MEMORY);
  if (cache_.disk().HasBlob(kv_key)) stats->add_tiers(v1::CACHE_TIER_DISK);
}

absl::StatusOr<TaskRegistry::CreateResult> TaskRegistry::Create(
    const std::string& tenant, const std::string& task_id, const v1::TaskSpec& spec,
    const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos, bool replace,
    const Progress& progress) {
  if (auto s = ValidateTaskId(task_id); !s.ok()) return s;
  const std::string hash = ContentHash(spec, demos);
  std::lock_guard<std::mutex> create_lock(create_mutex_);
  std::shared_ptr<Entry> existing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(Key(tenant, task_id));
    if (it != entries_.end()) existing = it->second;
    if (!existing && entries_.size() >= config_.max_tasks) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the server holds --max_tasks ", config_.max_tasks, " tasks"));
    }
  }
  if (existing && existing->record.content_hash == hash) {
    CreateResult result;
    result.task = existing->stored.task();
    FillTiers(result.task, existing->record.kv_key);
    return result;  // idempotent: nothing encoded
  }
  if (existing && !replace) {
    return absl::AlreadyExistsError(absl::StrCat(
        "task \"", task_id, "\" exists with different content; set replace to overwrite it"));
  }

  auto options = ToTaskOptions(spec, config_);
  if (!options.ok()) return options.status();
  auto examples = ToDemonstrations(demos, spec, config_);
  if (!examples.ok()) return examples.status();
  if (progress) progress(v1::CreateTaskProgress::PHASE_TOKENIZING, 0, 0, 0);
  auto prepared = IclTask::Prepare(*model_.transformer, *model_.tokenizer, *options, *examples);
  if (!prepared.ok()) return prepared.status();
  std::shared_ptr<IclTask> task = *std::move(prepared);
  const GroupLayout& layout = task->layout();

  auto entry = std::make_shared<Entry>();
  entry->task = task;
  *entry->stored.mutable_spec() = spec;
  *entry->stored.mutable_demonstrations() = demos;
  v1::Task& t = *entry->stored.mutable_task();
  t.set_task_id(task_id);
  *t.mutable_spec() = spec;
  t.set_state(v1::TASK_STATE_READY);
  t.set_content_hash(hash);
  const int64_t now = NowMicros();
  t.mutable_create_time()->set_seconds(now / 1000000);
  t.mutable_create_time()->set_nanos(static_cast<int32_t>(now % 1000000) * 1000);
  auto* stats = t.mutable_stats();
  stats->set_demonstrations(task->demonstrations());
  stats->set_groups(layout.groups());
  stats->set_context_tokens(layout.context_tokens);
  stats->set_group_length(static_cast<uint32_t>(layout.group_length));
  for (int32_t n : layout.demonstrations_per_group) stats->add_demonstrations_per_group(n);
  stats->set_truncated_demonstrations(layout.truncated_demonstrations);
  stats->set_effective_rescale_factor(task->default_factor());
  const ModelConfig& c = model_.transformer->config();
  stats->set_cache_bytes(2ull * c.num_layers * layout.context_tokens * c.num_kv_heads * c.head_dim *
                         DTypeSize(cache_.storage_dtype()));

  entry->record.task_id = RecordId(tenant, task_id);
  entry->record.tenant = tenant;
  entry->record.content_hash = hash;
  entry->record.kv_key =
      CacheKeyForTask(*model_.transformer, *model_.tokenizer, *task, cache_.storage_dtype());
  entry->record.created_unix_micros = now;

  double encode_seconds = 0;
  auto encode = [&]() -> absl::StatusOr<EncodedContext> {
    auto start = std::chrono::steady_clock::now();
    if (progress) progress(v1::CreateTaskProgress::PHASE_ENCODING, 0, layout.groups(), 0);
    auto ctx = task->EncodeContext(4, [&](int64_t done, int64_t total, int64_t tokens) {
      if (progress) progress(v1::CreateTaskProgress::PHASE_ENCODING, done, total, tokens);
    });
    encode_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (ctx.ok() && progress) {
      progress(v1::CreateTaskProgress::PHASE_STORING, layout.groups(), layout.groups(),
               layout.context_tokens);
    }
    return ctx;
  };
  // The record is written with the stats known before encoding; encode_seconds is filled in the
  // in-memory copy (a restart reports the stored value).
  entry->record.spec = entry->stored.SerializeAsString();
  if (existing) {
    if (auto s = cache_.DeleteTask(existing->record.task_id); !s.ok()) return s;
  }
  auto pinned = cache_.CreateTask(
      entry->record, encode, [task](const EncodedContext& ctx) { return task->CheckContext(ctx); });
  if (!pinned.ok()) return pinned.status();
  stats->set_encode_seconds(encode_seconds);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_[Key(tenant, task_id)] = entry;
  }
  CreateResult result;
  result.task = t;
  FillTiers(result.task, entry->record.kv_key);
  result.created = true;
  result.replaced = existing != nullptr;
  return result;
}

absl::StatusOr<std::shared_ptr<TaskRegistry::Entry>> TaskRegistry::Find(
    const std::string& tenant, const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = entries_.find(Key(tenant, task_id));
  if (it == entries_.end()) {
    return absl::NotFoundError(absl::StrCat("task \"", task_id, "\" does not exist"));
  }
  return it->second;
}

absl::StatusOr<v1::Task> TaskRegistry::Get(const std::string& tenant, const std::string& task_id) {
  auto found = Find(tenant, task_id);
  if (!found.ok()) return found.status();
  std::shared_ptr<Entry> entry = *std::move(found);
  v1::Task task = entry->stored.task();
  FillTiers(task, entry->record.kv_key);
  return task;
}

std::vector<v1::Task> TaskRegistry::List(const std::string& tenant, const std::string& after,
                                         size_t limit, bool* more) {
  std::vector<std::shared_ptr<Entry>> page;
  *more = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.upper_bound(Key(tenant, after)); it != entries_.end(); ++it) {
      if (it->second->record.tenant != tenant) break;
      if (page.size() == limit) {
        *more = true;
        break;
      }
      page.push_back(it->second);
    }
  }
  std::vector<v1::Task> tasks;
  for (const auto& entry : page) {
    tasks.push_back(entry->stored.task());
    FillTiers(tasks.back(), entry->record.kv_key);
  }
  return tasks;
}

absl::StatusOr<uint64_t> TaskRegistry::Delete(const std::string& tenant,
                                              const std::string& task_id) {
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(Key(tenant, task_id));
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("task \"", task_id, "\" does not exist"));
    }
    entry = it->second;
    entries_.erase(it);
  }
  const uint64_t before = cache_.Stats().memory_bytes + cache_.Stats().disk_bytes;
  if (auto s = cache_.DeleteTask(entry->record.task_id); !s.ok()) return s;
  const uint64_t after = cache_.Stats().memory_bytes + cache_.Stats().disk_bytes;
  return before > after ? before - after : 0;
}

absl::StatusOr<std::shared_ptr<IclTask>> TaskRegistry::Prepared(Entry& entry) {
  std::lock_guard<std::mutex> lock(entry.prepare_mutex);
  if (entry.task) return entry.task;
  // After a restart: rebuild the task from its stored spec (tokenizing, no encoding).
  auto options = ToTaskOptions(entry.stored.spec(), config_);
  if (!options.ok()) return options.status();
  auto examples = ToDemonstrations(entry.stored.demonstrations(), entry.stored.spec(), config_);
  if (!examples.ok()) return examples.status();
  auto task = IclTask::Prepare(*model_.transformer, *model_.tokenizer, *options, *examples);
  if (!task.ok()) return task.status();
  entry.task = *std::move(task);
  return entry.task;
}

absl::StatusOr<TaskRegistry::Handle> TaskRegistry::Acquire(const std::string& tenant,
                                                           const std::string& task_id) {
  auto found = Find(tenant, task_id);
  if (!found.ok()) return found.status();
  std::shared_ptr<Entry> entry = *std::move(found);
  auto task = Prepared(*entry);
  if (!task.ok()) return task.status();
  std::shared_ptr<IclTask> t = *task;
  auto pinned = cache_.Acquire(
      entry->record.kv_key, [t]() { return t->EncodeContext(); },
      [t](const EncodedContext& ctx) { return t->CheckContext(ctx); });
  if (!pinned.ok()) return pinned.status();
  Handle handle;
  handle.task = t;
  handle.context = *std::move(pinned);
  return handle;
}

}  // namespace manyshot::server

#include "server/task_registry.h"

#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/prompting/icl_cache_key.h"
#include "engine/prompting/icl_served_task.h"
#include "engine/t5/prompt_modes.h"
#include "engine/t5/t5_task.h"
#include "engine/task/cache_key.h"
#include "server/grpc_status.h"
#include "server/t5_task_spec.h"
#include "server/task_spec.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

// The cache keys task records by one string; tenants get their own namespace in it.
std::string RecordId(const std::string& tenant, const std::string& task_id) {
  return tenant + "/" + task_id;
}

// The inverse of RecordId: task ids never contain '/', tenants may.
bool SplitRecordId(const std::string& record_id, std::string* tenant, std::string* task_id) {
  const size_t slash = record_id.rfind('/');
  if (slash == std::string::npos) return false;
  *tenant = record_id.substr(0, slash);
  *task_id = record_id.substr(slash + 1);
  return true;
}

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SetTime(google::protobuf::Timestamp* t, int64_t micros) {
  t->set_seconds(micros / 1000000);
  t->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

// What a T5 task keeps between queries (TaskStats.cache_holds; README "T5").
constexpr char kT5CacheHolds[] =
    "each demonstration's token ids (cut to the segment length) and the first encoder layer's "
    "q|k|v of its tokens, in memory (counted against the memory tier's budget), rebuilt from the "
    "stored demonstrations after a restart; "
    "nothing in the KV tiers: from the first layer's attention on, a demonstration's encoder "
    "states depend on the test input, so the encoder runs per query over every demonstration in "
    "one batch (per-query encoder work linear in the number of demonstrations in SAICL, FID, "
    "ENSEMBLE and GROUP_FID)";

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
    if (bytes == 0) continue;  // T5 tasks keep nothing in the KV tiers
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

// One running create: waits for a free slot and for no other create of the same task, and frees
// both when the create ends, however it ends.
class TaskRegistry::CreateSlot {
 public:
  CreateSlot(TaskRegistry& registry, std::string key) : registry_(registry), key_(std::move(key)) {
    std::unique_lock<std::mutex> lock(registry_.create_mutex_);
    const size_t slots = static_cast<size_t>(std::max(1, registry_.config_.max_concurrent_creates));
    registry_.create_done_.wait(lock, [&] {
      return registry_.creates_running_ < slots && !registry_.keys_creating_.count(key_);
    });
    ++registry_.creates_running_;
    registry_.keys_creating_.insert(key_);
  }
  ~CreateSlot() {
    {
      std::lock_guard<std::mutex> lock(registry_.create_mutex_);
      --registry_.creates_running_;
      registry_.keys_creating_.erase(key_);
    }
    registry_.create_done_.notify_all();
  }
  CreateSlot(const CreateSlot&) = delete;
  CreateSlot& operator=(const CreateSlot&) = delete;

 private:
  TaskRegistry& registry_;
  const std::string key_;
};

absl::StatusOr<TaskRegistry::CreateResult> TaskRegistry::Create(
    const std::string& tenant, const std::string& task_id, const v1::TaskSpec& spec,
    const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos, bool replace,
    const Progress& progress) {
  if (auto s = ValidateTaskId(task_id); !s.ok()) return s;
  // Everything a request can get wrong is checked before the task becomes visible as ENCODING.
  if (auto s = CheckModeForModel(spec.mode(), model_.encoder_decoder(), model_.model_type(),
                                 "spec.mode");
      !s.ok()) {
    return s;
  }
  std::optional<T5TaskOptions> t5_options;
  if (model_.encoder_decoder()) {
    auto parsed = ToT5TaskOptions(spec, config_);
    if (!parsed.ok()) return parsed.status();
    t5_options = *std::move(parsed);
  } else if (spec.groups() != 0 || spec.segment_length() != 0 ||
             spec.group_attention() != v1::GROUP_ATTENTION_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.groups, spec.segment_length and spec.group_attention apply to encoder-decoder "
        "models; this server's model is ",
        model_.model_type(), " (decoder-only)"));
  }
  auto options =
      t5_options ? absl::StatusOr<TaskOptions>(t5_options->common) : ToTaskOptions(spec, config_);
  if (!options.ok()) return options.status();
  auto examples = ToDemonstrations(demos, spec, config_);
  if (!examples.ok()) return examples.status();
  const std::string hash = ContentHash(spec, demos);
  const std::string key = Key(tenant, task_id);
  CreateSlot slot(*this, key);

  // Decide and publish the ENCODING state in one step, so a concurrent delete sees it.
  Entry previous;
  const int64_t now = NowMicros();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    deleted_.wait(lock, [&] {
      auto it = entries_.find(key);
      return it == entries_.end() || !it->second.deleting;
    });
    auto it = entries_.find(key);
    const bool existed = it != entries_.end();
    if (existed) previous = it->second;
    if (!existed && entries_.size() >= config_.max_tasks) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the server holds --max_tasks ", config_.max_tasks, " tasks"));
    }
    if (previous.current && previous.current->record.content_hash == hash) {
      CreateResult result;
      result.task = previous.current->stored.task();
      lock.unlock();
      FillTiers(result.task, previous.current->record.kv_key);
      return result;  // idempotent: nothing encoded
    }
    if (previous.current && !replace) {
      return absl::AlreadyExistsError(absl::StrCat(
          "task \"", task_id, "\" exists with different content; set replace to overwrite it"));
    }
    if (previous.quarantined && !replace) {
      return absl::AlreadyExistsError(absl::StrCat("task \"", task_id, "\" exists and is FAILED (",
                                                   previous.shown.error(),
                                                   "); set replace to overwrite it"));
    }
    if (previous.current) {
      it->second.replacing = true;
    } else {
      Entry encoding;
      encoding.shown.set_task_id(task_id);
      *encoding.shown.mutable_spec() = spec;
      encoding.shown.set_state(v1::TASK_STATE_ENCODING);
      encoding.shown.set_content_hash(hash);
      SetTime(encoding.shown.mutable_create_time(), now);
      entries_[key] = std::move(encoding);
    }
  }
  // On failure a replaced version stays served (and a quarantined one stays FAILED as it was). A
  // new task becomes FAILED with the error, until it is deleted or created again, unless the
  // request itself was wrong (INVALID_ARGUMENT, e.g. a demonstration longer than a group, found
  // while tokenizing): the caller has the error, and a bad request leaves nothing behind.
  auto fail = [&](absl::Status status) -> absl::Status {
    std::lock_guard<std::mutex> lock(mutex_);
    if (previous.current || previous.quarantined) {
      entries_[key] = previous;
    } else if (absl::IsInvalidArgument(status)) {
      entries_.erase(key);
    } else {
      Entry& failed = entries_[key];
      failed.shown.set_state(v1::TASK_STATE_FAILED);
      failed.shown.set_error(std::string(status.message()));
      spdlog::error("CreateTask of task {} (tenant {}) failed; the task is FAILED: {}", task_id,
                    tenant, status.ToString());
    }
    return status;
  };

  if (progress) progress(v1::CreateTaskProgress::PHASE_TOKENIZING, 0, 0, 0);
  if (t5_options) {
    return CreateT5(tenant, task_id, spec, demos, *t5_options, *examples, hash, now, previous,
                    fail);
  }
  auto prepared = IclTask::Prepare(*model_.transformer, *model_.tokenizer, *options, *examples);
  if (!prepared.ok()) return fail(InSpecTerms(prepared.status()));
  std::shared_ptr<IclTask> task = *std::move(prepared);
  const GroupLayout& layout = task->layout();

  auto version = std::make_shared<TaskVersion>();
  version->tenant = tenant;
  version->task_id = task_id;
  version->icl_task = task;
  version->task = std::make_shared<IclServedTask>(task);
  *version->stored.mutable_spec() = spec;
  *version->stored.mutable_demonstrations() = demos;
  v1::Task& t = *version->stored.mutable_task();
  t.set_task_id(task_id);
  *t.mutable_spec() = spec;
  t.set_state(v1::TASK_STATE_READY);
  t.set_content_hash(hash);
  SetTime(t.mutable_create_time(), now);
  auto* stats = t.mutable_stats();
  stats->set_demonstrations(task->demonstrations());
  stats->set_groups(layout.groups());
  stats->set_context_tokens(layout.context_tokens);
  stats->set_group_length(static_cast<uint32_t>(layout.group_length));
  for (int32_t n : layout.demonstrations_per_group) stats->add_demonstrations_per_group(n);
  stats->set_truncated_demonstrations(layout.truncated_demonstrations);
  stats->set_effective_rescale_factor(task->default_factor());
  stats->set_max_query_tokens(static_cast<uint32_t>(task->options().max_query_tokens));
  stats->set_max_answer_tokens(static_cast<uint32_t>(task->options().max_answer_tokens));
  stats->set_cache_bytes(task->ContextBytes(cache_.storage_dtype()));

  version->record.task_id = RecordId(tenant, task_id);
  version->record.tenant = tenant;
  version->record.content_hash = hash;
  // Per tenant unless the operator opted into sharing (README, Security): a shared entry lets one
  // tenant see from encode time and freed bytes that another registered the same content.
  version->record.kv_key =
      CacheKeyForTask(*model_.transformer, *model_.tokenizer, *task, cache_.storage_dtype(),
                      config_.share_kv_across_tenants ? std::string() : tenant);
  version->record.created_unix_micros = now;

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
  version->record.spec = version->stored.SerializeAsString();
  // One synced batch switches a replaced task from its previous version to this one (the previous
  // record is never deleted first): a crash before it leaves the previous version served.
  auto pinned = cache_.CreateTask(version->record, encode, [task](const EncodedContext& ctx) {
    return task->CheckContext(ctx);
  });
  if (!pinned.ok()) return fail(pinned.status());
  stats->set_encode_seconds(encode_seconds);
  return Publish(version, previous);
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

absl::StatusOr<MemoryReservation> TaskRegistry::ReserveT5(const T5Task& task,
                                                          const std::string& task_id,
                                                          const TaskVersion* replaced) {
  const Tensor& qkv = task.demonstrations().first_layer.qkv;
  const size_t bytes = qkv.defined() ? qkv.bytes() : 0;
  MemoryTier& memory = cache_.memory();
  std::optional<MemoryReservation> held = memory.Reserve(bytes);
  if (!held) {
    // A replace holds both versions' bytes until the old version is gone.
    std::string replace_hint;
    if (replaced != nullptr) {
      std::lock_guard<std::mutex> lock(replaced->prepare_mutex);
      if (replaced->held && replaced->held->bytes() > 0) {
        replace_hint = absl::StrCat(
            "; the version it replaces keeps ", replaced->held->bytes(),
            " of those bytes until it is gone, so delete the task first to replace it within this "
            "budget");
      }
    }
    const MemoryTier::Stats m = memory.stats();
    return absl::ResourceExhaustedError(absl::StrCat(
        "T5 task \"", task_id, "\" keeps ", bytes,
        " bytes between queries (its demonstrations' first-layer q|k|v), more than the memory "
        "tier can free within its budget of ",
        m.budget_bytes, " bytes (", m.bytes,
        " in use, by contexts and other T5 tasks, some pinned by requests in flight); raise "
        "--memory_budget_bytes (--gpu_memory_budget_bytes on the CUDA backend), delete tasks, or "
        "use fewer or shorter demonstrations",
        replace_hint));
  }
  return *std::move(held);
}

absl::StatusOr<TaskRegistry::CreateResult> TaskRegistry::CreateT5(
    const std::string& tenant, const std::string& task_id, const v1::TaskSpec& spec,
    const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos,
    const T5TaskOptions& options, const std::vector<Example>& examples, const std::string& hash,
    int64_t now, const Entry& previous, const std::function<absl::Status(absl::Status)>& fail) {
  const auto start = std::chrono::steady_clock::now();
  auto prepared = T5Task::Prepare(*model_.t5, *model_.tokenizer, options, examples);
  if (!prepared.ok()) return fail(InSpecTerms(prepared.status()));
  std::shared_ptr<T5Task> task = *std::move(prepared);
  const T5DemonstrationSet& set = task->demonstrations();
  auto held = ReserveT5(*task, task_id, previous.current.get());
  if (!held.ok()) return fail(held.status());

  auto version = std::make_shared<TaskVersion>();
  version->tenant = tenant;
  version->task_id = task_id;
  version->task = task;
  version->held = *std::move(held);
  *version->stored.mutable_spec() = spec;
  *version->stored.mutable_demonstrations() = demos;
  v1::Task& t = *version->stored.mutable_task();
  t.set_task_id(task_id);
  *t.mutable_spec() = spec;
  t.set_state(v1::TASK_STATE_READY);
  t.set_content_hash(hash);
  SetTime(t.mutable_create_time(), now);
  auto* stats = t.mutable_stats();
  stats->set_demonstrations(static_cast<uint64_t>(set.demonstrations()));
  // The prompts the encoder reads per query (Prepare checked the mode's groups against k).
  auto layout = LayOutT5Prompts(task->options().mode, set.demonstrations());
  if (!layout.ok()) return fail(InSpecTerms(layout.status()));
  stats->set_groups(layout->prompt_demonstrations.size());
  for (const auto& prompt : layout->prompt_demonstrations) {
    stats->add_demonstrations_per_group(static_cast<uint32_t>(prompt.size()));
  }
  const int64_t tokens = task->RecomputedContextTokens();
  if (static_cast<uint64_t>(tokens) > config_.max_query_context_tokens) {
    // Every input of this task would encode them all again: one input's time and memory.
    return fail(InvalidFieldError(
        "demonstrations",
        absl::StrCat(
            "this T5 task would encode ", tokens, " demonstration tokens again for every input (",
            set.demonstrations(), " demonstrations of up to ", set.segment_length,
            " tokens), more than --max_query_context_tokens ", config_.max_query_context_tokens,
            "; use fewer demonstrations or a shorter segment_length")));
  }
  stats->set_context_tokens(static_cast<uint64_t>(tokens));
  stats->set_truncated_demonstrations(static_cast<uint64_t>(set.truncated_demonstrations));
  stats->set_segment_length(static_cast<uint32_t>(set.segment_length));
  stats->set_max_query_tokens(static_cast<uint32_t>(task->options().common.max_query_tokens));
  stats->set_max_answer_tokens(static_cast<uint32_t>(task->options().common.max_answer_tokens));
  stats->set_cache_holds(kT5CacheHolds);
  stats->set_cache_bytes(0);  // nothing in the KV tiers
  stats->set_encode_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());

  // The record alone goes to RocksDB (one synced batch, replacing a previous version): the task
  // is rebuilt from its stored demonstrations after a restart. Its kv_key names no blob.
  version->record.task_id = RecordId(tenant, task_id);
  version->record.tenant = tenant;
  version->record.content_hash = hash;
  version->record.kv_key = absl::StrCat("t5-no-kv:", model_.fingerprint(), ":", tenant, ":", hash);
  version->record.created_unix_micros = now;
  version->record.spec = version->stored.SerializeAsString();
  if (absl::Status s = cache_.disk().PutTask(version->record, nullptr, *model_.backend); !s.ok()) {
    return fail(s);
  }
  return Publish(version, previous);
}

absl::StatusOr<v1::Task> TaskRegistry::Get(const std::string& tenant, const std::string& task_id) {
  if (auto s = ValidateTaskId(task_id); !s.ok()) return s;
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
  const uint64_t before = cache_.Stats().memory_bytes + cache_.Stats().disk_bytes;
  absl::Status s = cache_.DeleteTask(RecordId(tenant, task_id));
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
    const std::string& tenant, const std::string& task_id) const {
  if (auto s = ValidateTaskId(task_id); !s.ok()) return s;
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
  // After a restart: rebuild the task from its stored spec (tokenizing, no encoding; a T5 task's
  // first-layer q|k|v are recomputed).
  const v1::TaskSpec& spec = version.stored.spec();
  if (auto s = CheckModeForModel(spec.mode(), model_.encoder_decoder(), model_.model_type(),
                                 "the stored task's spec.mode");
      !s.ok()) {
    return s;
  }
  auto examples = ToDemonstrations(version.stored.demonstrations(), spec, config_);
  if (!examples.ok()) return examples.status();
  if (model_.encoder_decoder()) {
    auto options = ToT5TaskOptions(spec, config_);
    if (!options.ok()) return options.status();
    auto task = T5Task::Prepare(*model_.t5, *model_.tokenizer, *options, *examples);
    if (!task.ok()) return task.status();
    auto held = ReserveT5(**task, version.task_id, nullptr);
    if (!held.ok()) return held.status();
    version.held = *std::move(held);
    version.task = *std::move(task);
    return version.task;
  }
  auto options = ToTaskOptions(spec, config_);
  if (!options.ok()) return options.status();
  auto task = IclTask::Prepare(*model_.transformer, *model_.tokenizer, *options, *examples);
  if (!task.ok()) return task.status();
  version.icl_task = *std::move(task);
  version.task = std::make_shared<IclServedTask>(version.icl_task);
  return version.task;
}

absl::StatusOr<TaskRegistry::Handle> TaskRegistry::Acquire(
    const std::shared_ptr<const TaskVersion>& version) {
  auto task = EngineTask(*version);
  if (!task.ok()) return task.status();
  Handle handle;
  handle.version = version;
  handle.task = *task;
  // A T5 task has no context in the cache: its encoder runs per query.
  if (!version->icl_task) return handle;
  std::shared_ptr<IclTask> t = version->icl_task;
  EncodeFn encode;
  if (!version->retired.load()) encode = [t]() { return t->EncodeContext(); };
  auto pinned = cache_.Acquire(version->record.kv_key, encode,
                               [t](const EncodedContext& ctx) { return t->CheckContext(ctx); });
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

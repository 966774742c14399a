// TaskRegistry::Create and its steps: check the request, make the task visible as ENCODING,
// prepare the engine task through the served model, count what it keeps between queries, store
// its record (and its encoded context, when it has one), publish it.
#include <chrono>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/api_to_engine.h"
#include "server/grpc_status.h"
#include "server/task_registry.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void SetTime(google::protobuf::Timestamp* t, int64_t micros) {
  t->set_seconds(micros / 1000000);
  t->set_nanos(static_cast<int32_t>(micros % 1000000) * 1000);
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void SetFigures(const TaskFigures& f, v1::TaskStats& stats) {
  stats.set_demonstrations(f.demonstrations);
  stats.set_groups(f.groups);
  stats.set_context_tokens(f.context_tokens);
  stats.set_group_length(f.group_length);
  for (uint32_t n : f.demonstrations_per_group) stats.add_demonstrations_per_group(n);
  stats.set_truncated_demonstrations(f.truncated_demonstrations);
  stats.set_effective_rescale_factor(f.effective_rescale_factor);
  stats.set_segment_length(f.segment_length);
  stats.set_max_query_tokens(f.max_query_tokens);
  stats.set_max_answer_tokens(f.max_answer_tokens);
  stats.set_cache_holds(f.cache_holds);
}

}  // namespace

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
  auto inputs = ToEngineInputs(spec, demos, "spec.mode");
  if (!inputs.ok()) return inputs.status();
  const std::string hash = ContentHash(spec, demos);
  const std::string key = Key(tenant, task_id);
  CreateSlot slot(*this, key);
  if (auto s = SyncShared(tenant, task_id); !s.ok()) return s;
  if (auto s = SyncShared(tenant, task_id); !s.ok()) return s;
  if (auto s = SyncShared(tenant, task_id); !s.ok()) return s;

  const int64_t now = NowMicros();
  auto begun = BeginCreate(tenant, task_id, spec, hash, replace, now);
  if (!begun.ok()) return begun.status();
  if (begun->unchanged) return *std::move(begun->unchanged);
  const Entry& previous = begun->previous;
  auto fail = [&](absl::Status status) { return FailCreate(tenant, task_id, previous, status); };
  const SharedEncodingMark encoding_mark = MarkSharedEncoding(tenant, task_id);

  if (progress) progress(v1::CreateTaskProgress::PHASE_TOKENIZING, 0, 0, 0);
  const auto start = std::chrono::steady_clock::now();
  auto prepared = model_.served->PrepareTask(inputs->options, inputs->examples);
  if (!prepared.ok()) return fail(InSpecTerms(prepared.status()));
  auto held = Reserve(*prepared, task_id, previous.current.get());
  if (!held.ok()) return fail(held.status());
  if (auto s = CheckQueryContext(*prepared); !s.ok()) return fail(s);

  auto version = NewVersion(tenant, task_id, spec, demos, hash, now, *prepared);
  version->held = *std::move(held);
  if (!prepared->context) {
    version->stored.mutable_task()->mutable_stats()->set_encode_seconds(SecondsSince(start));
  }
  // The same context may already be in the shared tier (an equal task): restored, not encoded.
  if (prepared->context) {
    RestoreShared(version, [context = prepared->context](const EncodedContext& ctx) {
      return context->Check(ctx);
    });
  }
  // Pinned until the task is published, so that the reply reports it in memory.
  auto pinned = Store(*version, *prepared, progress);
  if (!pinned.ok()) return fail(pinned.status());
  if (auto s = PublishShared(*version, *pinned, replace); !s.ok()) return fail(s);
  return Publish(version, previous);
}

absl::StatusOr<TaskRegistry::EngineInputs> TaskRegistry::ToEngineInputs(
    const v1::TaskSpec& spec, const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos,
    const std::string& mode_field) const {
  // The mode first: a spec for another architecture is FAILED_PRECONDITION whatever else it says.
  auto mode = ToServedMode(spec.mode());
  if (mode.ok() && *mode) {
    if (auto s = model_.served->CheckMode(**mode, mode_field); !s.ok()) return s;
  }
  EngineInputs inputs;
  auto options = ToServedTaskOptions(spec, config_);
  if (!options.ok()) return options.status();
  inputs.options = *std::move(options);
  if (auto s = model_.served->CheckTaskOptions(inputs.options); !s.ok()) return s;
  auto examples = ToDemonstrations(demos, spec, config_);
  if (!examples.ok()) return examples.status();
  inputs.examples = *std::move(examples);
  return inputs;
}

absl::StatusOr<TaskRegistry::Begun> TaskRegistry::BeginCreate(const std::string& tenant,
                                                              const std::string& task_id,
                                                              const v1::TaskSpec& spec,
                                                              const std::string& hash, bool replace,
                                                              int64_t now) {
  // Decide and publish the ENCODING state in one step, so a concurrent delete sees it.
  const std::string key = Key(tenant, task_id);
  Begun begun;
  Entry& previous = begun.previous;
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
    begun.unchanged = std::move(result);  // idempotent: nothing encoded
    return begun;
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
  return begun;
}

// On failure a replaced version stays served (and a quarantined one stays FAILED as it was). A
// new task becomes FAILED with the error, until it is deleted or created again, unless the
// request itself was wrong (INVALID_ARGUMENT, e.g. a demonstration longer than a group, found
// while tokenizing): the caller has the error, and a bad request leaves nothing behind.
absl::Status TaskRegistry::FailCreate(const std::string& tenant, const std::string& task_id,
                                      const Entry& previous, absl::Status status) {
  const std::string key = Key(tenant, task_id);
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
}

absl::StatusOr<MemoryReservation> TaskRegistry::Reserve(const PreparedTask& prepared,
                                                        const std::string& task_id,
                                                        const TaskVersion* replaced) {
  if (prepared.held_bytes == 0) return MemoryReservation();
  const size_t bytes = prepared.held_bytes;
  MemoryTier& memory = cache_.memory();
  std::optional<MemoryReservation> held = memory.Reserve(bytes);
  if (held) return *std::move(held);
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
      "task \"", task_id, "\" keeps ", bytes, " bytes between queries (", prepared.held_what,
      "), more than the memory tier can free within its budget of ", m.budget_bytes, " bytes (",
      m.bytes,
      " in use, by contexts and other tasks, some pinned by requests in flight); raise "
      "--memory_budget_bytes (--gpu_memory_budget_bytes on the CUDA backend), delete tasks, or "
      "use fewer or shorter demonstrations",
      replace_hint));
}

absl::Status TaskRegistry::CheckQueryContext(const PreparedTask& prepared) const {
  const int64_t tokens = prepared.task->RecomputedContextTokens();
  if (static_cast<uint64_t>(tokens) <= config_.max_query_context_tokens) return absl::OkStatus();
  // Every input of this task would encode them all again: one input's time and memory.
  const TaskFigures& f = prepared.figures;
  return InvalidFieldError(
      "demonstrations",
      absl::StrCat(
          "this task would encode ", tokens, " demonstration tokens again for every input (",
          f.demonstrations, " demonstrations of up to ", f.segment_length,
          " tokens), more than --max_query_context_tokens ", config_.max_query_context_tokens,
          "; use fewer demonstrations or a shorter segment_length"));
}

std::shared_ptr<TaskVersion> TaskRegistry::NewVersion(
    const std::string& tenant, const std::string& task_id, const v1::TaskSpec& spec,
    const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos, const std::string& hash,
    int64_t now, const PreparedTask& prepared) const {
  auto version = std::make_shared<TaskVersion>();
  version->tenant = tenant;
  version->task_id = task_id;
  version->task = prepared.task;
  version->context = prepared.context;
  *version->stored.mutable_spec() = spec;
  *version->stored.mutable_demonstrations() = demos;
  v1::Task& t = *version->stored.mutable_task();
  t.set_task_id(task_id);
  *t.mutable_spec() = spec;
  t.set_state(v1::TASK_STATE_READY);
  t.set_content_hash(hash);
  SetTime(t.mutable_create_time(), now);
  SetFigures(prepared.figures, *t.mutable_stats());
  t.mutable_stats()->set_cache_bytes(
      prepared.context ? prepared.context->Bytes(cache_.storage_dtype()) : 0);

  version->record.task_id = RecordId(tenant, task_id);
  version->record.tenant = tenant;
  version->record.content_hash = hash;
  version->record.created_unix_micros = now;
  if (prepared.context) {
    // Per tenant unless the operator opted into sharing (README, Security): a shared entry lets
    // one tenant see from encode time and freed bytes that another registered the same content.
    version->record.kv_key = ComputeCacheKey(prepared.context->KeyInputs(
        cache_.storage_dtype(), config_.share_kv_across_tenants ? std::string() : tenant));
  } else {
    // Names no blob: the task keeps nothing in the KV tiers.
    const ModelDescription& model = model_.description();
    version->record.kv_key =
        absl::StrCat(model.model_type, "-no-kv:", model.fingerprint, ":", tenant, ":", hash);
  }
  return version;
}

absl::StatusOr<PinnedContext> TaskRegistry::Store(TaskVersion& version,
                                                  const PreparedTask& prepared,
                                                  const Progress& progress) {
  v1::TaskStats& stats = *version.stored.mutable_task()->mutable_stats();
  if (!prepared.context) {
    // The record alone goes to RocksDB (one synced batch, replacing a previous version): the task
    // is rebuilt from its stored demonstrations after a restart.
    version.record.spec = version.stored.SerializeAsString();
    if (auto s = cache_.disk().PutTask(version.record, nullptr, *model_.backend); !s.ok()) return s;
    return PinnedContext();
  }
  const int64_t groups = static_cast<int64_t>(stats.groups());
  const int64_t context_tokens = static_cast<int64_t>(stats.context_tokens());
  double encode_seconds = 0;
  std::shared_ptr<const CachedContext> context = prepared.context;
  auto encode = [&]() -> absl::StatusOr<EncodedContext> {
    const auto start = std::chrono::steady_clock::now();
    if (progress) progress(v1::CreateTaskProgress::PHASE_ENCODING, 0, groups, 0);
    auto ctx = context->Encode([&](int64_t done, int64_t total, int64_t tokens) {
      if (progress) progress(v1::CreateTaskProgress::PHASE_ENCODING, done, total, tokens);
    });
    encode_seconds = SecondsSince(start);
    if (ctx.ok() && progress) {
      progress(v1::CreateTaskProgress::PHASE_STORING, groups, groups, context_tokens);
    }
    return ctx;
  };
  // The record is written with the stats known before encoding; encode_seconds is filled in the
  // in-memory copy (a restart reports the stored value).
  version.record.spec = version.stored.SerializeAsString();
  // One synced batch switches a replaced task from its previous version to this one (the previous
  // record is never deleted first): a crash before it leaves the previous version served.
  auto pinned = cache_.CreateTask(
      version.record, encode, [context](const EncodedContext& ctx) { return context->Check(ctx); });
  if (!pinned.ok()) return pinned.status();
  stats.set_encode_seconds(encode_seconds);
  return pinned;
}

}  // namespace manyshot::server

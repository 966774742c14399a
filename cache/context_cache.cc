#include "cache/context_cache.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Marks a key as being loaded or encoded for its lifetime; waits first while another holder has it.
class InflightGuard {
 public:
  InflightGuard(std::mutex& mutex, std::condition_variable& cv, std::set<std::string>& keys,
                std::string key)
      : mutex_(mutex), cv_(cv), keys_(keys), key_(std::move(key)) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return keys_.count(key_) == 0; });
    keys_.insert(key_);
  }
  ~InflightGuard() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      keys_.erase(key_);
    }
    cv_.notify_all();
  }
  InflightGuard(const InflightGuard&) = delete;
  InflightGuard& operator=(const InflightGuard&) = delete;

 private:
  std::mutex& mutex_;
  std::condition_variable& cv_;
  std::set<std::string>& keys_;
  std::string key_;
};

}  // namespace

ContextCache::ContextCache(ContextCacheOptions options, Backend& backend)
    : options_(std::move(options)), backend_(backend) {}

ContextCache::~ContextCache() = default;

absl::StatusOr<std::unique_ptr<ContextCache>> ContextCache::Open(const std::filesystem::path& path,
                                                                 ContextCacheOptions options,
                                                                 Backend& backend) {
  std::unique_ptr<ContextCache> cache(new ContextCache(std::move(options), backend));
  DiskTierOptions disk_options;
  disk_options.budget_bytes = cache->options_.disk_budget_bytes;
  disk_options.chunk_bytes = cache->options_.chunk_bytes;
  disk_options.max_batch_bytes = cache->options_.max_batch_bytes;
  disk_options.sync_task_writes = cache->options_.sync_task_writes;
  disk_options.reserve_bytes = cache->options_.disk_reserve_bytes;
  disk_options.log = cache->options_.log;
  auto disk = DiskTier::Open(path, std::move(disk_options));
  if (!disk.ok()) return disk.status();
  cache->disk_ = *std::move(disk);
  MemoryTier::EvictionSink on_evict;
  if (cache->options_.host_budget_bytes > 0) {
    cache->host_ = std::make_unique<HostTier>(cache->options_.host_budget_bytes, backend);
    ContextCache* self = cache.get();
    on_evict = [self](const std::string& key, std::shared_ptr<const EncodedContext> ctx) {
      // Best effort: a failed copy only means the next use reads RocksDB instead.
      if (absl::Status s = self->host_->Put(key, *ctx); !s.ok()) {
        self->Log(LogLevel::kWarning, absl::StrCat("cache: keeping evicted KV ", key,
                                                   " in host memory: ", s.ToString()));
      }
    };
  }
  // The tier trims the backend's memory pool when it drops contexts (memory_tier.h, Trimming).
  cache->memory_ = std::make_unique<MemoryTier>(cache->options_.memory_budget_bytes,
                                                std::move(on_evict), &backend);
  const auto tasks = cache->disk_->ListTasks();
  cache->Log(LogLevel::kInfo,
             absl::StrCat("cache: restored ", tasks.size(), " ready tasks from ", path.string()));
  if (cache->options_.eager_restore) {
    std::set<std::string> keys;
    for (const TaskRecord& t : tasks) keys.insert(t.kv_key);
    for (const std::string& key : keys) {
      InflightGuard guard(cache->inflight_mutex_, cache->inflight_cv_, cache->inflight_, key);
      const uint64_t evictions_before = cache->memory_->stats().evictions;
      auto pinned = cache->LoadFromDisk(key, nullptr);
      // Stop once memory is full: loading more would only evict what was just restored.
      if (pinned.ok() &&
          (!pinned->cached() || cache->memory_->stats().evictions != evictions_before)) {
        break;
      }
    }
  }
  return cache;
}

void ContextCache::Log(LogLevel level, const std::string& message) const {
  if (options_.log) options_.log(level, message);
}

DType ContextCache::memory_dtype() const {
  return options_.memory_holds_storage_dtype ? options_.kv_dtype : DType::kF32;
}

absl::StatusOr<ContextCache::Prepared> ContextCache::Prepare(const EncodedContext& ctx) {
  auto storage = ConvertContext(ctx, options_.kv_dtype, backend_);
  if (!storage.ok()) return storage.status();
  // Memory holds the storage values (widened when it holds f32), so scores are the same before and
  // after a restart.
  auto memory = ConvertContext(*storage, memory_dtype(), backend_);
  if (!memory.ok()) return memory.status();
  return Prepared{*std::move(storage), std::make_shared<const EncodedContext>(*std::move(memory))};
}

absl::StatusOr<PinnedContext> ContextCache::LoadFromDisk(const std::string& key,
                                                         const ValidateFn& validate) {
  if (!disk_->HasBlob(key)) {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++counters_.disk_misses;
    return absl::NotFoundError(absl::StrCat("no KV blob ", key));
  }
  const auto start = std::chrono::steady_clock::now();
  auto ctx = disk_->LoadBlob(key, backend_, memory_dtype());
  if (ctx.ok() && validate) {
    if (absl::Status v = validate(*ctx); !v.ok()) ctx = absl::DataLossError(v.message());
  }
  if (absl::IsDataLoss(ctx.status())) {
    {
      std::lock_guard<std::mutex> lock(stats_mutex_);
      ++counters_.corruptions_detected;
    }
    Log(LogLevel::kError,
        absl::StrCat("cache: KV blob ", key, " failed verification (", ctx.status().ToString(),
                     "); not served, deleted, will be re-encoded"));
    if (absl::Status d = disk_->DeleteBlob(key); !d.ok()) {
      Log(LogLevel::kError, absl::StrCat("cache: deleting KV blob ", key, ": ", d.ToString()));
    }
    return ctx.status();
  }
  if (absl::IsNotFound(ctx.status())) {
    // Evicted or deleted between the index check and the read: drop the index entry too.
    disk_->DeleteBlob(key).IgnoreError();
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++counters_.disk_misses;
    return ctx.status();
  }
  if (!ctx.ok()) return ctx.status();
  const double seconds = SecondsSince(start);
  auto shape = ShapeOf(*ctx);
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++counters_.disk_hits;
    ++counters_.loads;
    counters_.load_seconds += seconds;
    counters_.load_bytes += shape.ok() ? shape->PayloadBytes() : 0;
  }
  return memory_->Insert(key, std::make_shared<const EncodedContext>(*std::move(ctx)));
}

absl::StatusOr<PinnedContext> ContextCache::AcquireLocked(const std::string& key,
                                                          const EncodeFn& encode,
                                                          const ValidateFn& validate,
                                                          const TaskRecord* creating) {
  if (auto hit = memory_->Lookup(key)) return *std::move(hit);
  if (host_) {
    auto restored = host_->Restore(key);
    if (!restored.ok()) return restored.status();
    if (restored->has_value()) {
      return memory_->Insert(key, std::make_shared<const EncodedContext>(**std::move(restored)));
    }
  }
  auto loaded = LoadFromDisk(key, validate);
  if (loaded.ok() || (!absl::IsNotFound(loaded.status()) && !absl::IsDataLoss(loaded.status()))) {
    return loaded;
  }
  if (!encode) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV ", key, " is not cached and no encoder was given"));
  }
  const bool re_encode = !disk_->TasksUsingKey(key).empty();
  const auto start = std::chrono::steady_clock::now();
  auto ctx = encode();
  if (!ctx.ok()) return ctx.status();
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++counters_.encodes;
    counters_.encode_seconds += SecondsSince(start);
    if (re_encode) ++counters_.re_encodes;
  }
  auto prepared = Prepare(*ctx);
  if (!prepared.ok()) return prepared.status();
  if (creating) {
    std::string released;
    if (absl::Status s = disk_->PutTask(*creating, &prepared->storage, backend_, &released);
        !s.ok()) {
      return s;
    }
    Release(released);
  } else if (re_encode) {
    // Serving does not depend on the write: a failed one is logged and the next restart re-encodes.
    if (absl::Status s = disk_->PutBlob(key, prepared->storage, backend_); !s.ok()) {
      Log(LogLevel::kError, absl::StrCat("cache: storing re-encoded KV ", key, ": ", s.ToString()));
    }
  }
  return memory_->Insert(key, std::move(prepared->memory));
}

absl::StatusOr<PinnedContext> ContextCache::Acquire(const std::string& key, const EncodeFn& encode,
                                                    const ValidateFn& validate) {
  InflightGuard guard(inflight_mutex_, inflight_cv_, inflight_, key);
  return AcquireLocked(key, encode, validate, nullptr);
}

absl::Status ContextCache::PutTask(const TaskRecord& record, const EncodedContext& ctx) {
  InflightGuard guard(inflight_mutex_, inflight_cv_, inflight_, record.kv_key);
  std::string released;
  if (disk_->HasBlob(record.kv_key)) {
    if (absl::Status s = disk_->PutTask(record, nullptr, backend_, &released); !s.ok()) return s;
    Release(released);
    return absl::OkStatus();
  }
  auto prepared = Prepare(ctx);
  if (!prepared.ok()) return prepared.status();
  if (absl::Status s = disk_->PutTask(record, &prepared->storage, backend_, &released); !s.ok()) {
    return s;
  }
  memory_->Insert(record.kv_key, std::move(prepared->memory));  // admitted, not kept pinned
  Release(released);
  return absl::OkStatus();
}

absl::StatusOr<PinnedContext> ContextCache::CreateTask(const TaskRecord& record,
                                                       const EncodeFn& encode,
                                                       const ValidateFn& validate) {
  InflightGuard guard(inflight_mutex_, inflight_cv_, inflight_, record.kv_key);
  if (disk_->HasBlob(record.kv_key)) {
    // An equal task is stored: share its blob (verified now, so a damaged one is replaced).
    auto pinned = AcquireLocked(record.kv_key, nullptr, validate, nullptr);
    if (pinned.ok()) {
      std::string released;
      if (absl::Status s = disk_->PutTask(record, nullptr, backend_, &released); !s.ok()) return s;
      Release(released);
      return pinned;
    }
    if (!absl::IsDataLoss(pinned.status()) && !absl::IsFailedPrecondition(pinned.status())) {
      return pinned.status();
    }
  }
  if (auto hit = memory_->Lookup(record.kv_key)) {
    // Held in memory but not on disk (evicted, or too big for the disk budget): store it.
    auto prepared = Prepare(**hit);
    if (!prepared.ok()) return prepared.status();
    std::string released;
    if (absl::Status s = disk_->PutTask(record, &prepared->storage, backend_, &released); !s.ok()) {
      return s;
    }
    Release(released);
    return *std::move(hit);
  }
  return AcquireLocked(record.kv_key, encode, validate, &record);
}

void ContextCache::Release(const std::string& key) {
  if (key.empty()) return;
  // Waits for a load of the key still in flight (a request of the replaced version), so that it
  // cannot put the key back into memory after this erase.
  InflightGuard guard(inflight_mutex_, inflight_cv_, inflight_, key);
  memory_->Erase(key);  // a pinned entry stays valid for its holders until their last pin goes
  if (host_) host_->Erase(key);
}

std::vector<TaskRecord> ContextCache::ListTasks() const { return disk_->ListTasks(); }

std::map<std::string, std::string> ContextCache::QuarantinedTasks() const {
  return disk_->QuarantinedTasks();
}

std::optional<TaskRecord> ContextCache::GetTask(const std::string& task_id) const {
  return disk_->GetTask(task_id);
}

absl::Status ContextCache::DeleteTask(const std::string& task_id) {
  std::optional<TaskRecord> record = disk_->GetTask(task_id);
  if (!record) {
    bool unused = false;  // a quarantined task has no key to hold
    return disk_->DeleteTask(task_id, &unused);
  }
  InflightGuard guard(inflight_mutex_, inflight_cv_, inflight_, record->kv_key);
  bool key_unused = false;
  if (absl::Status s = disk_->DeleteTask(task_id, &key_unused); !s.ok()) return s;
  if (key_unused) {
    memory_->Erase(record->kv_key);
    if (host_) host_->Erase(record->kv_key);
  }
  return absl::OkStatus();
}

absl::Status ContextCache::ResumeDisk() { return disk_->Resume(); }

CacheStats ContextCache::Stats() const {
  CacheStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    s = counters_;
  }
  const MemoryTier::Stats m = memory_->stats();
  s.memory_bytes = m.bytes - m.reserved_bytes;
  s.memory_reserved_bytes = m.reserved_bytes;
  s.memory_entries = m.entries;
  s.memory_pinned_entries = m.pinned_entries;
  s.memory_budget_bytes = m.budget_bytes;
  s.memory_hits = m.hits;
  s.memory_misses = m.misses;
  s.memory_evictions = m.evictions;
  s.memory_rejected = m.rejected;
  if (host_) {
    const HostTier::Stats h = host_->stats();
    s.host_bytes = h.bytes;
    s.host_entries = h.entries;
    s.host_budget_bytes = h.budget_bytes;
    s.host_hits = h.hits;
    s.host_misses = h.misses;
    s.host_evictions = h.evictions;
  }
  const DiskTier::Stats d = disk_->stats();
  s.disk_bytes = d.bytes;
  s.disk_entries = d.entries;
  s.disk_budget_bytes = d.budget_bytes;
  s.disk_file_bytes = d.sst_bytes + d.blob_file_bytes;
  s.disk_evictions = d.evictions;
  s.tasks = d.tasks;
  s.tasks_quarantined = d.quarantined_tasks;
  s.corruptions_detected += d.corruptions_detected;
  s.disk_free_bytes = d.free_bytes;
  s.disk_writable = d.writable;
  s.disk_writes_refused = d.writes_refused;
  return s;
}

}  // namespace manyshot

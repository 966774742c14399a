// TaskRegistry's side of the shared tier (--shared_dir; server/shared_tier.h): the registry is a
// cache of the shared catalog. Before a request, a create, a get or a delete, the task's entry is
// revalidated against the newest manifest (one lookup when nothing changed) and, when another
// replica published a newer version or a tombstone, switched to it; a create publishes its KV
// file and then its manifest before it is acknowledged; a context missing from the local tiers
// is restored from the shared KV file (verified) rather than encoded. Rules (docs/deployment.md):
// - the newest manifest is the task; a request resolves it at its start and keeps that version;
// - a create publishes version newest+1; when another replica published first, a create with the
//   same content adopts that version, one with different content fails with ALREADY_EXISTS (a
//   replace publishes on top: the later replace wins);
// - a delete publishes a tombstone on top of whatever is newest.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"
#include "server/shared_tier.h"
#include "server/task_registry.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

// The ErrorInfo reason of a request for a task another replica is encoding (UNAVAILABLE).
constexpr char kTaskEncodingElsewhere[] = "TASK_ENCODING_ELSEWHERE";

// Publishing retries this often when other replicas keep publishing first.
constexpr int kPublishAttempts = 8;

// The cache's record id of a task (TaskRegistry's: the tenant, '/', the id).
std::string SharedRecordId(const std::string& tenant, const std::string& task_id) {
  return tenant + "/" + task_id;
}

}  // namespace

void TaskRegistry::AttachShared(SharedTier* shared) { shared_ = shared; }

absl::Status TaskRegistry::SyncShared(const std::string& tenant, const std::string& task_id) {
  if (shared_ == nullptr) return absl::OkStatus();
  const std::string key = Key(tenant, task_id);
  uint64_t held = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
      const Entry& entry = it->second;
      // A create, replace or delete of this replica is under way: it publishes itself.
      if (entry.deleting || entry.replacing || StateOf(entry) == v1::TASK_STATE_ENCODING) {
        return absl::OkStatus();
      }
      if (entry.current) held = entry.current->shared_version;
    }
  }
  if (held > 0 && shared_->IsCurrent(tenant, task_id, held)) return absl::OkStatus();
  auto latest = shared_->Latest(tenant, task_id);
  if (absl::IsNotFound(latest.status())) return absl::OkStatus();  // never published
  if (!latest.ok()) {
    return absl::UnavailableError(absl::StrCat("the shared tier cannot be read for task \"",
                                               task_id, "\": ", latest.status().message()));
  }
  return InstallShared(*latest);
}

absl::Status TaskRegistry::SyncSharedForRequest(const std::string& tenant,
                                                const std::string& task_id) {
  if (absl::Status s = SyncShared(tenant, task_id); !s.ok() || shared_ == nullptr) return s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(Key(tenant, task_id));
    if (it != entries_.end() && !it->second.deleting) return absl::OkStatus();
  }
  // Unknown here and unpublished: another replica's CreateTask may be encoding it.
  if (shared_->EncodingElsewhere(tenant, task_id)) {
    return WithReason(absl::UnavailableError(absl::StrCat(
                          "task \"", task_id,
                          "\" is being encoded by a CreateTask on another replica; retry shortly")),
                      kTaskEncodingElsewhere);
  }
  return absl::OkStatus();
}

TaskRegistry::SharedEncodingMark TaskRegistry::MarkSharedEncoding(const std::string& tenant,
                                                                  const std::string& task_id) {
  if (shared_ == nullptr) return SharedEncodingMark();
  shared_->MarkEncoding(tenant, task_id);
  return SharedEncodingMark(shared_, tenant, task_id);
}

TaskRegistry::SharedEncodingMark::~SharedEncodingMark() {
  if (shared_ != nullptr) shared_->ClearEncoding(tenant_, task_id_);
}

absl::Status TaskRegistry::InstallShared(const shared::Manifest& manifest) {
  const std::string key = Key(manifest.tenant, manifest.id);
  std::shared_ptr<TaskVersion> version;
  if (!manifest.tombstone) {
    auto record = SharedTier::RecordOf(manifest);
    if (!record.ok()) return record.status();
    version = std::make_shared<TaskVersion>();
    if (!version->stored.ParseFromString(record->spec)) {
      return absl::DataLossError(absl::StrCat("shared manifest of task \"", manifest.id,
                                              "\" holds a spec that does not parse"));
    }
    version->tenant = manifest.tenant;
    version->task_id = manifest.id;
    version->record = *std::move(record);
    version->shared_version = manifest.version;
  }
  bool dropped = false;
  std::shared_ptr<const TaskVersion> retired;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    const bool local = it != entries_.end();
    if (local && (it->second.deleting || it->second.replacing ||
                  StateOf(it->second) == v1::TASK_STATE_ENCODING)) {
      return absl::OkStatus();  // this replica's own change publishes itself
    }
    const auto& current = local ? it->second.current : nullptr;
    if (current && current->shared_version >= manifest.version) return absl::OkStatus();
    if (current) {
      current->retired.store(true);
      retired = current;
    }
    if (manifest.tombstone) {
      if (!local) return absl::OkStatus();
      entries_.erase(it);
      dropped = true;
    } else {
      version->generation = next_generation_++;
      Entry entry;
      entry.current = version;
      entries_[key] = std::move(entry);
    }
  }
  shared_->CountVersionSwitch();
  // Outside the registry's lock: a local copy of the retired version may take seconds to land.
  if (retired) Retire(*retired);
  // The local record of a task deleted elsewhere goes too (its KV with it when unshared).
  if (dropped) cache_.DeleteTask(SharedRecordId(manifest.tenant, manifest.id)).IgnoreError();
  return absl::OkStatus();
}

absl::Status TaskRegistry::SyncSharedTenant(const std::string& tenant) {
  if (shared_ == nullptr) return absl::OkStatus();
  auto manifests = shared_->List(tenant);
  if (!manifests.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the shared tier cannot be listed: ", manifests.status().message()));
  }
  for (const shared::Manifest& manifest : *manifests) {
    if (absl::Status s = InstallShared(manifest); !s.ok()) {
      spdlog::warn("shared tier: task {} of tenant {} skipped: {}", manifest.id, tenant,
                   s.ToString());
    }
  }
  // Tasks deleted elsewhere: List leaves tombstones out, so ask each held one.
  std::vector<std::string> held;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::string prefix = tenant + '\n';
    for (auto it = entries_.lower_bound(prefix);
         it != entries_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) {
      if (it->second.current) held.push_back(it->second.current->task_id);
    }
  }
  for (const std::string& id : held) SyncShared(tenant, id).IgnoreError();
  return absl::OkStatus();
}

absl::Status TaskRegistry::PublishShared(TaskVersion& version, const PinnedContext& context,
                                         bool replace) {
  if (shared_ == nullptr) return absl::OkStatus();
  // The KV file first: a manifest never names one that is not durable.
  if (context) {
    if (absl::Status s = shared_->Store(version.record.kv_key, *context, false); !s.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the shared tier cannot store the task's KV: ", s.message()));
    }
  }
  for (int attempt = 0; attempt < kPublishAttempts; ++attempt) {
    uint64_t newest = 0;
    auto latest = shared_->Latest(version.tenant, version.task_id);
    if (latest.ok()) {
      newest = latest->version;
      auto record = latest->tombstone ? absl::StatusOr<TaskRecord>(absl::NotFoundError(""))
                                      : SharedTier::RecordOf(*latest);
      if (record.ok() && record->content_hash == version.record.content_hash) {
        version.shared_version = newest;  // the same content is already the task
        return absl::OkStatus();
      }
      if (record.ok() && !replace) {
        return absl::AlreadyExistsError(
            absl::StrCat("task \"", version.task_id,
                         "\" was created with different content on another replica meanwhile; "
                         "set replace to overwrite it"));
      }
    } else if (!absl::IsNotFound(latest.status())) {
      return absl::UnavailableError(
          absl::StrCat("the shared tier cannot be read: ", latest.status().message()));
    }
    const absl::Status s =
        shared_->PublishRecord(version.record, version.task_id, bool(context), newest + 1);
    if (s.ok()) {
      version.shared_version = newest + 1;
      return absl::OkStatus();
    }
    if (!absl::IsAborted(s)) {
      return absl::UnavailableError(
          absl::StrCat("the shared tier cannot publish the task: ", s.message()));
    }
  }
  return absl::AbortedError(
      absl::StrCat("task \"", version.task_id, "\" keeps changing on other replicas; retry"));
}

absl::Status TaskRegistry::DeleteShared(const std::string& tenant, const std::string& task_id) {
  if (shared_ == nullptr) return absl::OkStatus();
  if (absl::Status s = SyncShared(tenant, task_id); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(Key(tenant, task_id));
    // Encoding here: the local delete refuses it (FAILED_PRECONDITION) and nothing is published.
    if (it != entries_.end() &&
        (it->second.replacing || StateOf(it->second) == v1::TASK_STATE_ENCODING)) {
      return absl::OkStatus();
    }
  }
  for (int attempt = 0; attempt < kPublishAttempts; ++attempt) {
    auto latest = shared_->Latest(tenant, task_id);
    if (absl::IsNotFound(latest.status()) || (latest.ok() && latest->tombstone)) {
      return absl::OkStatus();  // nothing shared to delete; the local delete decides
    }
    if (!latest.ok()) {
      return absl::UnavailableError(
          absl::StrCat("the shared tier cannot be read: ", latest.status().message()));
    }
    const absl::Status s = shared_->PublishTombstone(tenant, task_id, latest->version + 1);
    if (s.ok()) return absl::OkStatus();
    if (!absl::IsAborted(s)) {
      return absl::UnavailableError(
          absl::StrCat("the shared tier cannot publish the delete: ", s.message()));
    }
  }
  return absl::AbortedError(
      absl::StrCat("task \"", task_id, "\" keeps changing on other replicas; retry"));
}

void TaskRegistry::Retire(const TaskVersion& version) {
  version.retired.store(true);
  const std::lock_guard<std::mutex> wait_for_copy(version.local_copy_mutex);
}

std::optional<PinnedContext> TaskRegistry::RestoreShared(
    const std::shared_ptr<const TaskVersion>& held, const ValidateFn& validate) {
  if (shared_ == nullptr) return std::nullopt;
  const TaskVersion& version = *held;
  const std::string& key = version.record.kv_key;
  // Straight from memory: ContextCache::Acquire would wait for a local copy still being written.
  if (auto hit = cache_.memory().Lookup(key)) return hit;
  if (cache_.disk().HasBlob(key)) return std::nullopt;
  auto restored = shared_->Restore(key);
  absl::Status status = restored.status();
  if (restored.ok() && validate) status = validate(restored->context);
  if (status.ok()) {
    // The copy writes the version's record only while the version is current (see Retire).
    auto gate = [held](const std::function<void()>& copy) {
      const std::lock_guard<std::mutex> lock(held->local_copy_mutex);
      if (!held->retired.load()) copy();
    };
    auto admitted = shared_->AdmitRestored(cache_, version.record, *std::move(restored), gate);
    if (admitted.ok()) return *std::move(admitted);
    spdlog::warn("shared tier: restored KV of task {} not admitted: {}", version.task_id,
                 admitted.status().ToString());
    return std::nullopt;
  }
  if (absl::IsNotFound(status)) return std::nullopt;  // encoded and stored by SharedEncode
  spdlog::error(
      "shared tier: KV of task {} (key {}) is damaged and is not served; re-encoding "
      "and replacing it: {}",
      version.task_id, key, status.ToString());
  std::lock_guard<std::mutex> lock(mutex_);
  shared_damaged_.insert(key);
  return std::nullopt;
}

EncodeFn TaskRegistry::SharedEncode(const TaskVersion& version, EncodeFn encode) {
  if (shared_ == nullptr || !encode) return encode;
  return [this, key = version.record.kv_key, encode]() -> absl::StatusOr<EncodedContext> {
    auto ctx = encode();
    if (!ctx.ok()) return ctx;
    bool damaged = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      damaged = shared_damaged_.erase(key) > 0;
    }
    // The local tiers serve it either way; the shared file is what other replicas restore.
    if (absl::Status s = shared_->Store(key, *ctx, damaged); !s.ok()) {
      spdlog::warn("shared tier: KV {} not stored: {}", key, s.ToString());
    } else if (damaged) {
      shared_->CountCorruptReencode();
    }
    return ctx;
  };
}

}  // namespace manyshot::server

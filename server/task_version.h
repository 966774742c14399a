// One immutable version of a task: its stored record and spec, and the engine task built from them.
// A request resolves the version it is answered against once, at its start, and holds it to the
// end, so its labels, templates and KV all come from that one version even when a replace commits
// meanwhile (the registry then serves the new version to later requests).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "cache/memory_tier.h"
#include "cache/task_record.h"
#include "engine/serving/prepared_task.h"
#include "engine/task/served_task.h"
#include "manyshot/internal/stored_task.pb.h"

namespace manyshot::server {

struct TaskVersion {
  // Unique per server process: the scheduler batches requests of one version only.
  uint64_t generation = 0;
  // The shared tier's version number of this task version (--shared_dir); 0: not shared.
  uint64_t shared_version = 0;
  std::string tenant;
  std::string task_id;
  TaskRecord record;
  internal::StoredTask stored;  // spec, demonstrations and the task as reported (READY)

  // Set once a later version replaced this one or the task was deleted: requests that resolved
  // this version still finish on it, but its KV is not re-encoded for them.
  mutable std::atomic<bool> retired{false};
  // Held while a context restored from the shared tier for this version is copied to the local
  // disk (SharedTier::AdmitRestored), which happens only while `retired` is false. Retiring the
  // version (a delete, a switch to another replica's version) takes it before removing the local
  // record, so the copy either lands first and is removed with it, or writes nothing.
  mutable std::mutex local_copy_mutex;
  // The engine task; built from `stored` on first use after a restart (tokenizing, no encoding).
  // `context` encodes and checks its cached context; null when the task keeps none in the cache
  // (a T5 task's encoder runs per query).
  mutable std::mutex prepare_mutex;
  mutable std::shared_ptr<ServedTask> task;
  mutable std::shared_ptr<const CachedContext> context;
  // What the task keeps between queries besides a cached context (a T5 task's first-layer
  // q|k|v), counted against the memory tier's budget for as long as this version lives; set with
  // `task`.
  mutable std::optional<MemoryReservation> held;
};

}  // namespace manyshot::server

// What the RocksDB tier keeps per task: the server's opaque spec (its serialized proto), the
// tenant, the server's content hash of the spec, and the cache key of the task's KV. Serialized
// with a version and an XXH3-64 checksum, so a damaged record is detected rather than half-trusted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace manyshot {

struct TaskRecord {
  std::string task_id;
  std::string tenant;
  std::string spec;          // opaque to the cache
  std::string content_hash;  // the server's hash of the spec (idempotent creates)
  std::string kv_key;        // ComputeCacheKey of the task's context inputs
  int64_t created_unix_micros = 0;

  bool operator==(const TaskRecord&) const = default;
};

std::string SerializeTaskRecord(const TaskRecord& record);
// DATA_LOSS when truncated, of an unknown version, or failing its checksum.
absl::StatusOr<TaskRecord> ParseTaskRecord(std::string_view bytes);

}  // namespace manyshot

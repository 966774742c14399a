#include "cache/task_record.h"

#include <xxhash.h>

#include "cache/byte_codec.h"

namespace manyshot {
namespace {
constexpr uint64_t kRecordVersion = 1;
}  // namespace

std::string SerializeTaskRecord(const TaskRecord& r) {
  std::string out;
  codec::PutU64(&out, kRecordVersion);
  for (const std::string* s : {&r.task_id, &r.tenant, &r.spec, &r.content_hash, &r.kv_key}) {
    codec::PutStr(&out, *s);
  }
  codec::PutU64(&out, static_cast<uint64_t>(r.created_unix_micros));
  codec::PutU64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

absl::StatusOr<TaskRecord> ParseTaskRecord(std::string_view bytes) {
  if (bytes.size() < 16) return absl::DataLossError("task record truncated");
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  codec::Reader tail(bytes.substr(bytes.size() - 8));
  uint64_t checksum = 0, version = 0;
  tail.U64(&checksum);
  if (checksum != XXH3_64bits(body.data(), body.size())) {
    return absl::DataLossError("task record checksum mismatch");
  }
  codec::Reader r(body);
  TaskRecord t;
  if (!r.U64(&version) || version != kRecordVersion) {
    return absl::DataLossError("task record of unknown version");
  }
  if (!r.Str(&t.task_id) || !r.Str(&t.tenant) || !r.Str(&t.spec) || !r.Str(&t.content_hash) ||
      !r.Str(&t.kv_key) || !r.I64(&t.created_unix_micros) || !r.done()) {
    return absl::DataLossError("task record truncated");
  }
  return t;
}

}  // namespace manyshot

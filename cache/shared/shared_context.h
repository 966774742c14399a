// Encoded contexts (the engine's K/V tensors) to and from the shared tier's KV files. A context is
// written in the storage dtype, with an XXH3-64 per chunk in the header (SharedKvFiles verifies
// every chunk it reads), and read back into tensors the backend allocates; a damaged file is
// reported (DATA_LOSS), never returned as a context.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "cache/shared/shared_kv.h"
#include "engine/core/backend.h"
#include "engine/task/encoded_context.h"

namespace manyshot::shared {

enum class WriteMode {
  kKeepExisting,  // an existing file of the key is reused (refreshed for the collector)
  kReplace,       // atomically replaces the key's file (a reader found it damaged)
};

// Writes `ctx` (any dtype; converted to `dtype`) as the KV file of `key`, durable before it
// returns OK. `*published` (optional) says whether this call wrote the file.
absl::Status WriteSharedContext(const SharedKvFiles& files, const std::string& key,
                                const EncodedContext& ctx, DType dtype, Backend& backend,
                                uint64_t chunk_bytes, WriteMode mode, bool* published = nullptr);

struct SharedContext {
  EncodedContext context;  // in the file's dtype
  uint64_t bytes = 0;      // payload bytes read
};

// The context of `key`: NOT_FOUND when there is no file, DATA_LOSS when any part of it is damaged
// or it was written for another format or key.
absl::StatusOr<SharedContext> ReadSharedContext(const SharedKvFiles& files, const std::string& key,
                                                Backend& backend);

}  // namespace manyshot::shared

// Encoded contexts (the engine's K/V tensors) to and from the shared tier's KV files. A context is
// written in the storage dtype, with an XXH3-64 per chunk in the header (SharedKvFiles verifies
// every chunk it reads), and read back either as views of the mapped file (host backends) or into
// tensors the backend allocates; a damaged file is reported (DATA_LOSS), never returned as a
// context.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cache/shared/mapped_file.h"
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
  // Set when the tensors are views of the mapped file: see DetachFromFile.
  std::weak_ptr<MappedFile> mapping;
};

enum class ReadMode {
  kMapWhenPossible,  // host tensors as views of the mapped file (see below)
  kCopy,             // every byte copied into tensors the backend allocates
};

// The context of `key`: NOT_FOUND when there is no file, DATA_LOSS when any part of it is damaged
// or it was written for another format or key. Every chunk is verified before anything is
// returned. For a host backend, a file whose payload is aligned is mapped rather than copied (see
// MappedFile), which saves providing and filling fresh memory for every byte: the tensors are the
// file's pages until DetachFromFile gives the process its own copy of them. Files of the older
// layout and GPU backends copy.
absl::StatusOr<SharedContext> ReadSharedContext(const SharedKvFiles& files, const std::string& key,
                                                Backend& backend,
                                                ReadMode mode = ReadMode::kMapWhenPossible);

// Makes a mapped context's tensors independent of the file (MappedFile::Detach); OK at once when
// the context was copied or is no longer held by anyone.
absl::Status DetachFromFile(const std::weak_ptr<MappedFile>& mapping,
                            const std::function<bool()>& keep_going = nullptr);

}  // namespace manyshot::shared

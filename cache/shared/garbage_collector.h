// Garbage collection of the shared directory, safe while replicas serve from it. Policy: a grace
// period (no leases, so no replica has to be alive to keep anything). A replica revalidates a task
// before each batch and finishes a restore long before the grace period ends, so:
// - a manifest version is removed once a newer version of its name is older than the grace
//   period (nobody can still be reading through the old one); the newest version of every name,
//   tombstones included, is kept, so version numbers are never reused;
// - a KV file is removed when no remaining version names it and it was not written or touched
//   within the grace period (a create writes its KV before publishing the manifest that names it,
//   and reusing an existing file touches it first);
// - a temporary file older than the grace period is a crashed writer's, and removed;
// - an encoding marker older than kEncodingMarkerLife (15 minutes, whatever the grace period:
//   readers already ignore it) is a crashed replica's, and removed (encoding_markers.h).
// A damaged manifest stops the KV sweep (its references cannot be known): nothing is removed
// that might be needed. Removing a file a replica still wanted costs a re-encode, never a wrong
// answer: every read is verified.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/shared/shared_directory.h"

namespace manyshot::shared {

struct GcOptions {
  std::chrono::seconds grace{std::chrono::minutes(30)};
  bool dry_run = false;  // count what would be removed, remove nothing
};

struct GcReport {
  uint64_t names = 0;
  uint64_t versions_removed = 0;
  uint64_t kv_files_kept = 0;
  uint64_t kv_files_removed = 0;
  uint64_t kv_bytes_removed = 0;
  uint64_t temp_files_removed = 0;
  uint64_t encoding_markers_removed = 0;
  std::vector<std::string> problems;  // what was skipped and why (damaged manifests, I/O errors)
};

absl::StatusOr<GcReport> CollectGarbage(const SharedDirectory& dir, const GcOptions& options,
                                        std::chrono::system_clock::time_point now);

}  // namespace manyshot::shared

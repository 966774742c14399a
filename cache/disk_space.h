// Free space on the filesystem that holds a path: what the disk tier keeps in reserve so that
// RocksDB's own writes (its log, its metadata, a delete) always find room.
#pragma once

#include <cstdint>
#include <filesystem>

#include "absl/status/statusor.h"

namespace manyshot {

// Bytes an unprivileged writer may still allocate on the filesystem of `path` (statvfs f_bavail).
absl::StatusOr<uint64_t> FreeDiskBytes(const std::filesystem::path& path);

}  // namespace manyshot

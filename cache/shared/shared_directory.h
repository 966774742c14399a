// A directory that several server processes share, possibly on several hosts (a ReadWriteMany
// volume: CephFS, NFS, EFS, Filestore, Azure Files; or a local directory). Files appear in it only
// whole: each is written under a unique temporary name in ROOT/tmp, fsynced, then published under
// its final name with link() (exclusive: exactly one writer of a name wins, atomic on NFS without
// locks) or rename() (replace), and the final directory is fsynced. A reader therefore sees a name
// either absent or naming a complete, durable file. No file locks are used anywhere.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace manyshot::shared {

// Appends bytes to the temporary file being written.
class FileSink {
 public:
  explicit FileSink(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  absl::Status Append(std::string_view bytes);
  uint64_t written() const { return written_; }

 private:
  int fd_;
  std::filesystem::path path_;
  uint64_t written_ = 0;
};

enum class PublishMode {
  kIfAbsent,  // link(): ALREADY_EXISTS when the name exists (another writer won)
  kReplace,   // rename(): atomically replaces whatever the name held
};

class SharedDirectory {
 public:
  // Creates ROOT and ROOT/tmp when missing. `writer` names this process in file names and
  // records (e.g. "host:pid").
  static absl::StatusOr<SharedDirectory> Open(std::filesystem::path root, std::string writer);

  // Writes a file with `fill` and publishes it as `final_path` (which must lie under root();
  // its directory is created when missing). On any error nothing is published and the temporary
  // file is removed.
  absl::Status Publish(const std::filesystem::path& final_path, PublishMode mode,
                       const std::function<absl::Status(FileSink&)>& fill) const;

  // The whole file; NOT_FOUND when absent.
  static absl::StatusOr<std::string> ReadWhole(const std::filesystem::path& path);
  // Sets the file's modification time to now (the garbage collector's grace clock for files that
  // are about to be referenced again); NOT_FOUND when absent.
  static absl::Status Touch(const std::filesystem::path& path);
  // Names in `dir` (not "." or ".."); an absent directory is empty.
  static absl::StatusOr<std::vector<std::string>> ListNames(const std::filesystem::path& dir);

  const std::filesystem::path& root() const { return root_; }
  std::filesystem::path temp_dir() const { return root_ / "tmp"; }
  const std::string& writer() const { return writer_; }

 private:
  SharedDirectory(std::filesystem::path root, std::string writer)
      : root_(std::move(root)), writer_(std::move(writer)) {}
  std::filesystem::path UniqueTempPath() const;

  std::filesystem::path root_;
  std::string writer_;
};

// `name` as one path component that is safe on every filesystem: itself when it is 1 to 100
// characters of [A-Za-z0-9_-] (readable for operators), else "h-" and the hex XXH3-128 of it.
std::string PathComponentFor(std::string_view name);

}  // namespace manyshot::shared

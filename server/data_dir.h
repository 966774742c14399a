// The server's data directory: created on start and locked so that two servers never share it.
#pragma once

#include <filesystem>
#include <memory>

#include "absl/status/statusor.h"

namespace manyshot::server {

class DataDir {
 public:
  // Creates `path` if needed and takes an exclusive lock on path/LOCK (FAILED_PRECONDITION
  // naming the path when another process holds it). Then makes the directory and everything in it
  // private to the server's user (directories 0700, files 0600), logging what it changed; with the
  // server's umask (077, set in main.cc) everything written later is private too.
  static absl::StatusOr<std::unique_ptr<DataDir>> Open(const std::filesystem::path& path);
  ~DataDir();
  DataDir(const DataDir&) = delete;
  DataDir& operator=(const DataDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  DataDir(std::filesystem::path path, int lock_fd) : path_(std::move(path)), lock_fd_(lock_fd) {}
  std::filesystem::path path_;
  int lock_fd_;
};

}  // namespace manyshot::server

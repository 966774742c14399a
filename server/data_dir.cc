#include "server/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace manyshot::server {

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create data directory ", path.string(), ": ", ec.message()));
  }
  std::filesystem::path lock_path = path / "LOCK";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot open ", lock_path.string(), ": ", std::strerror(errno)));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("data directory ", path.string(), " is in use by another manyshot-server (",
                     lock_path.string(), " is locked); stop it or pass a different --data_dir"));
  }
  return std::unique_ptr<DataDir>(new DataDir(std::filesystem::absolute(path), fd));
}

DataDir::~DataDir() { ::close(lock_fd_); }

}  // namespace manyshot::server

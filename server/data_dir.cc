#include "server/data_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

namespace fs = std::filesystem;

// Data directories written before permissions were tightened hold 0755/0644 entries: make every
// directory 0700 and every file 0600 (demonstrations, task specs and KV are the tenants' data).
// Returns how many entries changed. Entries that cannot be changed are left and logged.
size_t MakePrivate(const fs::path& root) {
  size_t changed = 0;
  auto tighten = [&](const fs::path& p, bool directory) {
    std::error_code ec;
    fs::perms perms = fs::symlink_status(p, ec).permissions();
    if (ec) return;
    fs::perms want = directory ? fs::perms::owner_all
                               : (perms & (fs::perms::owner_read | fs::perms::owner_write));
    if ((perms & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none) return;
    fs::permissions(p, want, fs::perm_options::replace, ec);
    if (ec) {
      spdlog::warn("cannot make {} private: {}", p.string(), ec.message());
      return;
    }
    ++changed;
  };
  tighten(root, true);
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_symlink()) continue;
    tighten(it->path(), it->is_directory());
  }
  return changed;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DataDir>> DataDir::Open(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create data directory ", path.string(), ": ", ec.message()));
  }
  std::filesystem::path lock_path = path / "LOCK";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
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
  // Under the lock: no other server is writing here.
  if (size_t changed = MakePrivate(path); changed > 0) {
    spdlog::warn("data directory {}: made {} entries private to the server's user (0700/0600)",
                 path.string(), changed);
  }
  return std::unique_ptr<DataDir>(new DataDir(std::filesystem::absolute(path), fd));
}

DataDir::~DataDir() { ::close(lock_fd_); }

}  // namespace manyshot::server

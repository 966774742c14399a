#include "cache/disk_space.h"

#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace manyshot {

absl::StatusOr<uint64_t> FreeDiskBytes(const std::filesystem::path& path) {
  struct statvfs fs {};
  if (statvfs(path.c_str(), &fs) != 0) {
    return absl::InternalError(
        absl::StrCat("statvfs of the data directory: ", std::strerror(errno)));
  }
  return static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_frsize);
}

}  // namespace manyshot

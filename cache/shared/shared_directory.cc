#include "cache/shared/shared_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace manyshot::shared {
namespace {

absl::Status ErrnoError(const std::string& what, const std::filesystem::path& path) {
  const int e = errno;
  const std::string message = absl::StrCat(what, " ", path.string(), ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(message);
  if (e == EEXIST) return absl::AlreadyExistsError(message);
  if (e == ENOSPC || e == EDQUOT) {
    return absl::ResourceExhaustedError(
        absl::StrCat(message,
                     " on the shared directory's volume; run the garbage collector "
                     "(manyshot-server --gc) or grow the volume"));
  }
  return absl::UnavailableError(message);  // a network filesystem's hiccup: worth a retry
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  Fd fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("open directory", dir);
  if (fsync(fd.get()) != 0) return ErrnoError("fsync directory", dir);
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::filesystem::path& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error)
    return absl::UnavailableError(absl::StrCat("create ", dir.string(), ": ", error.message()));
  return absl::OkStatus();
}

// link() over NFS can report EEXIST for a link that its own lost-and-retried request made: the
// temporary file then has two names (the classic lock-file check).
bool LinkedDespiteError(const std::filesystem::path& temp) {
  struct stat st {};
  return stat(temp.c_str(), &st) == 0 && st.st_nlink == 2;
}

absl::Status PublishTemp(const std::filesystem::path& temp, const std::filesystem::path& final_path,
                         PublishMode mode) {
  if (mode == PublishMode::kReplace) {
    if (rename(temp.c_str(), final_path.c_str()) != 0) return ErrnoError("rename to", final_path);
    return absl::OkStatus();
  }
  if (link(temp.c_str(), final_path.c_str()) != 0 && !LinkedDespiteError(temp)) {
    return ErrnoError("publish", final_path);
  }
  unlink(temp.c_str());  // the final name keeps the file
  return absl::OkStatus();
}

}  // namespace

absl::Status FileSink::Append(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t put = write(fd_, bytes.data(), bytes.size());
    if (put < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", path_);
    }
    bytes.remove_prefix(static_cast<size_t>(put));
    written_ += static_cast<uint64_t>(put);
  }
  return absl::OkStatus();
}

absl::StatusOr<SharedDirectory> SharedDirectory::Open(std::filesystem::path root,
                                                      std::string writer) {
  if (root.empty()) return absl::InvalidArgumentError("shared directory: empty path");
  SharedDirectory dir(std::move(root), std::move(writer));
  if (absl::Status s = MakeDirectories(dir.temp_dir()); !s.ok()) return s;
  return dir;
}

std::filesystem::path SharedDirectory::UniqueTempPath() const {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 random{std::random_device{}()};
  return temp_dir() / absl::StrFormat("%s.%d.%d.%016x.tmp", PathComponentFor(writer_), getpid(),
                                      counter.fetch_add(1), random());
}

absl::Status SharedDirectory::Publish(const std::filesystem::path& final_path, PublishMode mode,
                                      const std::function<absl::Status(FileSink&)>& fill) const {
  const std::filesystem::path dir = final_path.parent_path();
  if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
  const std::filesystem::path temp = UniqueTempPath();
  absl::Status status;
  {
    Fd fd(open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (fd.get() < 0) return ErrnoError("create", temp);
    FileSink sink(fd.get(), temp);
    status = fill(sink);
    if (status.ok() && fsync(fd.get()) != 0) status = ErrnoError("fsync", temp);
  }
  if (status.ok()) status = PublishTemp(temp, final_path, mode);
  if (!status.ok()) {
    unlink(temp.c_str());
    return status;
  }
  return SyncDirectory(dir);
}

absl::StatusOr<std::string> SharedDirectory::ReadWhole(const std::filesystem::path& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("open", path);
  std::string bytes;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = read(fd.get(), buffer, sizeof(buffer));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read", path);
    }
    if (got == 0) return bytes;
    bytes.append(buffer, static_cast<size_t>(got));
  }
}

absl::Status SharedDirectory::Touch(const std::filesystem::path& path) {
  if (utimensat(AT_FDCWD, path.c_str(), nullptr, 0) != 0) return ErrnoError("touch", path);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SharedDirectory::ListNames(
    const std::filesystem::path& dir) {
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return ErrnoError("list", dir);
  }
  std::vector<std::string> names;
  while (const dirent* entry = readdir(handle)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(handle);
  return names;
}

std::string PathComponentFor(std::string_view name) {
  const bool readable = !name.empty() && name.size() <= 100 && name.substr(0, 2) != "h-" &&
                        std::all_of(name.begin(), name.end(), [](char c) {
                          return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                 (c >= '0' && c <= '9') || c == '_' || c == '-';
                        });
  if (readable) return std::string(name);
  const XXH128_hash_t hash = XXH3_128bits(name.data(), name.size());
  return absl::StrFormat("h-%016x%016x", hash.high64, hash.low64);
}

}  // namespace manyshot::shared

#include "cache/shared/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace manyshot::shared {
namespace {

// Detach() reads the file in slices of this size, checking keep_going between them.
constexpr uint64_t kReadSlice = uint64_t{8} << 20;

// Mappings start at a multiple of this, so that a detached copy in transparent huge pages keeps
// them when mremap() moves it over the mapping (an unaligned move splits them into small pages,
// and a pass over a multi-gigabyte context in small pages misses the TLB far more often).
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

// mmap() of `length` bytes (a whole number of pages) at an address that is a multiple of
// kHugePage: address space is reserved with room to spare, the mapping placed at the aligned
// address inside it, and the spare parts returned. MAP_FAILED (errno set) when it cannot be.
void* MapAligned(uint64_t length, int flags, int fd) {
  const uint64_t span = length + kHugePage;
  void* raw = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return MAP_FAILED;
  const auto begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  void* mapped = mmap(reinterpret_cast<void*>(aligned), length, PROT_READ | PROT_WRITE,
                      flags | MAP_FIXED, fd, 0);
  if (mapped == MAP_FAILED) {
    const int e = errno;
    munmap(raw, span);
    errno = e;
    return MAP_FAILED;
  }
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + span;
  if (end > aligned + length) {
    munmap(reinterpret_cast<void*>(aligned + length), end - aligned - length);
  }
  return mapped;
}

uint64_t PageRounded(uint64_t bytes) {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

absl::Status ErrnoError(const char* what, const std::filesystem::path& path) {
  return absl::UnavailableError(absl::StrCat(what, " ", path.string(), ": ", std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::shared_ptr<MappedFile>> MappedFile::Map(int fd, uint64_t size,
                                                            const std::filesystem::path& path,
                                                            Verifier verify) {
  if (size == 0) return absl::InvalidArgumentError("an empty file cannot be mapped");
  const int own_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own_fd < 0) return ErrnoError("dup", path);
  // Private and writable: nothing writes the pages, but a stray write must never reach the file.
  void* data = MapAligned(PageRounded(size), MAP_PRIVATE, own_fd);
  if (data == MAP_FAILED) {
    const absl::Status error = ErrnoError("mmap", path);
    close(own_fd);
    return error;
  }
  std::shared_ptr<MappedFile> mapped(
      new MappedFile(own_fd, static_cast<char*>(data), size, path, std::move(verify)));
  if (absl::Status s = mapped->verify_(mapped->data_); !s.ok()) return s;
  return mapped;
}

MappedFile::~MappedFile() {
  munmap(data_, MappedLength());
  if (fd_ >= 0) close(fd_);
}

uint64_t MappedFile::MappedLength() const { return PageRounded(size_); }

absl::Status MappedFile::ReadInto(char* copy, const std::function<bool()>& keep_going) const {
  for (uint64_t at = 0; at < size_;) {
    if (keep_going && !keep_going()) {
      return absl::CancelledError(absl::StrCat("detaching ", path_.string(), " was stopped"));
    }
    const uint64_t n = std::min(kReadSlice, size_ - at);
    const ssize_t got = pread(fd_, copy + at, n, static_cast<off_t>(at));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return ErrnoError("read", path_);
    if (got == 0) {
      return absl::UnavailableError(absl::StrCat(path_.string(), " ends at ", at, ", not ", size_));
    }
    at += static_cast<uint64_t>(got);
  }
  return absl::OkStatus();
}

absl::Status MappedFile::Detach(const std::function<bool()>& keep_going) {
  if (detached_.load()) return absl::OkStatus();
  const uint64_t length = MappedLength();
  void* copy = MapAligned(length, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (copy == MAP_FAILED) return ErrnoError("memory for detaching", path_);
  // The context's own memory, from now on: in huge pages, as the CPU backend gives large tensors.
  (void)madvise(copy, length, MADV_HUGEPAGE);
  absl::Status s = ReadInto(static_cast<char*>(copy), keep_going);
  if (s.ok()) s = verify_(static_cast<const char*>(copy));
  // Moves the copy's pages to the mapping's addresses, replacing the file's pages at once (the
  // kernel holds the address space's lock throughout: a concurrent access waits, then reads the
  // copy).
  if (s.ok() && mremap(copy, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, data_) == MAP_FAILED) {
    s = ErrnoError("mremap", path_);
  }
  if (!s.ok()) {
    munmap(copy, length);
    return s;
  }
  close(fd_);
  fd_ = -1;
  detached_.store(true);
  return absl::OkStatus();
}

}  // namespace manyshot::shared

// A KV file mapped into memory, so that a restore serves its tensors straight from the file's
// pages (the page cache) instead of first copying every byte into fresh memory, which on a
// multi-gigabyte context costs more than everything else in a restore.
//
// While mapped, the tensors depend on the file: a page that the kernel has to read again (after
// memory pressure dropped it) from a file that was truncated, removed over NFS or became
// unreadable would raise SIGBUS. Detach() ends that: it reads the file into fresh private memory
// (read() reports what an access to the mapping would raise), verifies the copy, and moves it over
// the mapping's addresses in one mremap(), so every tensor keeps its address and a reader never
// sees a gap. Shared KV files are immutable, the garbage collector's grace period outlasts a
// restore, and the server detaches every mapped context right after the restore, in the
// background on idle CPU time: the window is seconds unless the replica is kept fully busy.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"

namespace manyshot::shared {

class MappedFile {
 public:
  // Checks the file's bytes (all of them, from offset 0): OK or DATA_LOSS.
  using Verifier = std::function<absl::Status(const char* bytes)>;

  // Maps the first `size` bytes of the open file `fd` (the mapping keeps a duplicate of it until
  // detached) and verifies them with `verify` before returning.
  static absl::StatusOr<std::shared_ptr<MappedFile>> Map(int fd, uint64_t size,
                                                         const std::filesystem::path& path,
                                                         Verifier verify);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  char* data() const { return data_; }
  uint64_t size() const { return size_; }

  // Makes the memory this process's own (see above), reading a slice at a time and stopping early
  // (CANCELLED) when `keep_going` returns false. UNAVAILABLE, naming the file, when it cannot be
  // read; DATA_LOSS when what it holds now fails the verification. The mapping stays as it was
  // unless this returns OK.
  absl::Status Detach(const std::function<bool()>& keep_going = nullptr);
  bool detached() const { return detached_.load(); }

 private:
  MappedFile(int fd, char* data, uint64_t size, std::filesystem::path path, Verifier verify)
      : fd_(fd), data_(data), size_(size), path_(std::move(path)), verify_(std::move(verify)) {}
  // The whole file read into `copy` (its mapped length).
  absl::Status ReadInto(char* copy, const std::function<bool()>& keep_going) const;
  uint64_t MappedLength() const;

  int fd_;
  char* data_;
  uint64_t size_;
  std::filesystem::path path_;
  Verifier verify_;
  std::atomic<bool> detached_{false};
};

}  // namespace manyshot::shared

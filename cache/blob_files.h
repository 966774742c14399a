// KV payloads as plain files beside RocksDB: DIR/<key>.kv holds one blob's payload bytes and
// nothing else (its header with the per-chunk checksums, its access time and the tasks that use it
// are in RocksDB). A file is written under a temporary name, fsynced, renamed and the directory
// fsynced, all before RocksDB's commit refers to it, so a committed header always has its complete
// file; a crash leaves at most a temporary file or a file no header names, both removed at open.
// Reads are large preads straight into the destination (see ReadPayload), verified chunk by chunk
// in parallel: the page cache and the disk, not RocksDB, set the speed. See cache/README.md.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/blob_format.h"
#include "cache/kv_convert.h"

namespace manyshot {

class BlobFiles {
 public:
  // Creates `dir` when missing.
  static absl::StatusOr<BlobFiles> Open(std::filesystem::path dir);

  // A blob being written. Commit() makes it durable under its final name; destroying an
  // uncommitted writer removes the temporary file.
  class Writer {
   public:
    Writer(Writer&& other) noexcept;
    Writer& operator=(Writer&&) = delete;
    ~Writer();
    absl::Status Append(std::string_view bytes);
    // fsync, rename to the final name, fsync the directory.
    absl::Status Commit();

   private:
    friend class BlobFiles;
    Writer(int fd, std::filesystem::path temp, std::filesystem::path final_path,
           std::filesystem::path dir)
        : fd_(fd), temp_(std::move(temp)), final_(std::move(final_path)), dir_(std::move(dir)) {}
    int fd_ = -1;
    std::filesystem::path temp_, final_, dir_;
  };
  // One writer per key at a time (the disk tier's write lock).
  absl::StatusOr<Writer> Create(const std::string& key) const;

  // Writes `ctx`'s payload (its own dtype) as the blob of `key` in chunks of `chunk_bytes` and
  // commits it (durable under its final name); returns each chunk's XXH3-64. From host memory the
  // bytes are written straight from the tensors (checksummed there); from a GPU, through a host
  // chunk buffer.
  absl::StatusOr<std::vector<uint64_t>> WritePayload(const std::string& key,
                                                     const EncodedContext& ctx, Backend& backend,
                                                     uint64_t chunk_bytes) const;

  // Unlinks the blob's file; OK when there is none.
  absl::Status Remove(const std::string& key) const;

  struct Listing {
    std::vector<std::string> keys;              // committed files (regular files named <key>.kv)
    std::vector<std::filesystem::path> others;  // temporary files and any other entry
  };
  Listing List() const;
  // The size of the blob's file; NOT_FOUND when there is none.
  absl::StatusOr<uint64_t> SizeOf(const std::string& key) const;

  // Reads the blob's payload into `ctx` (allocated with AllocateContext in `memory` dtype),
  // verifying every chunk's size and XXH3-64 against `header` before the bytes are used:
  // NOT_FOUND when the file is gone (evicted since), DATA_LOSS naming the chunk when a check
  // fails. Into host memory, chunks are read by several threads straight into its tensors (or,
  // when the memory dtype is wider, into a buffer each, checked, then converted into them); into
  // a GPU, chunk by chunk through PayloadAssembler (pinned staging, conversion on the device).
  // The caller synchronizes the backend.
  absl::Status ReadPayload(const BlobHeader& header, EncodedContext& ctx, Backend& backend) const;

  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path PathOf(const std::string& key) const;

 private:
  explicit BlobFiles(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;
};

}  // namespace manyshot

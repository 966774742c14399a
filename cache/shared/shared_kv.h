// KV files in the shared directory: ROOT/kv/<cache key>.kv, immutable once published. The cache
// key is a hash of everything that determines the KV (engine/task/cache_key.h), so a name always
// stands for the same tensors; the file carries its own blob header (cache/blob_format.h: shapes,
// dtype and an XXH3-64 of every chunk), and every read verifies the chunks it returns, so a damaged
// file is reported (DATA_LOSS), never served. Layout: "MSKVSHR2", the header's length (u64 LE),
// the header, zero bytes up to the next multiple of kKvPayloadAlignment, the payload (every layer's
// K then V, in the header's dtype). The alignment lets a reader map the file and use the payload
// in place as tensors. Files of the first layout ("MSKVSHR1": the payload right after the header)
// are still read, by copying.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cache/blob_format.h"
#include "cache/shared/mapped_file.h"
#include "cache/shared/shared_directory.h"

namespace manyshot::shared {

// Where a KV file's payload starts: a multiple of this (a page on x86 and most arm64 systems).
inline constexpr uint64_t kKvPayloadAlignment = 4096;

// An open KV file: its header, and its chunks read with verification.
class SharedKvReader {
 public:
  ~SharedKvReader();
  SharedKvReader(const SharedKvReader&) = delete;
  SharedKvReader& operator=(const SharedKvReader&) = delete;

  const BlobHeader& header() const { return header_; }
  // Reads chunk `i` (header().ChunkSize(i) bytes) into `dst` and checks its XXH3-64: DATA_LOSS
  // naming the file and the chunk when it does not match or the file is short.
  absl::Status ReadChunk(uint64_t i, char* dst) const;
  // Every chunk, in order, into `dst` (header().total_bytes bytes).
  absl::Status ReadAll(char* dst) const;

  // Where the payload starts in the file; aligned to kKvPayloadAlignment in files of the current
  // layout.
  uint64_t payload_offset() const { return payload_offset_; }
  bool payload_aligned() const { return payload_offset_ % kKvPayloadAlignment == 0; }
  // The whole file mapped (see MappedFile), every chunk's XXH3-64 checked over the mapping, on
  // several threads, before it is returned: DATA_LOSS naming the chunk as ReadChunk.
  absl::StatusOr<std::shared_ptr<MappedFile>> MapVerified() const;

 private:
  friend class SharedKvFiles;
  SharedKvReader(int fd, std::filesystem::path path, BlobHeader header, uint64_t payload_offset)
      : fd_(fd),
        path_(std::move(path)),
        header_(std::move(header)),
        payload_offset_(payload_offset) {}
  int fd_;
  std::filesystem::path path_;
  BlobHeader header_;
  uint64_t payload_offset_;
};

class SharedKvFiles {
 public:
  explicit SharedKvFiles(const SharedDirectory* dir) : dir_(dir) {}

  // Writes the payload with `fill` (exactly header.total_bytes bytes, in chunks whose checksums
  // the header holds) and publishes it under header.key unless a file of that key exists: then
  // the existing one is kept, its time refreshed for the garbage collector, and `*published`
  // is false. Durable before it returns OK.
  using PayloadFill = std::function<absl::Status(FileSink&)>;
  absl::Status Put(const BlobHeader& header, const PayloadFill& fill, bool* published) const;
  // Atomically replaces the key's file (after a reader found it damaged).
  absl::Status Replace(const BlobHeader& header, const PayloadFill& fill) const;

  // NOT_FOUND when there is no file; DATA_LOSS when its header is damaged or names another key.
  absl::StatusOr<std::unique_ptr<SharedKvReader>> Open(const std::string& key) const;
  bool Exists(const std::string& key) const;
  // Refreshes the file's time (a manifest is about to name it again).
  absl::Status Touch(const std::string& key) const;

  std::filesystem::path PathOf(const std::string& key) const;
  std::filesystem::path dir() const { return dir_->root() / "kv"; }

 private:
  absl::Status Write(const BlobHeader& header, const PayloadFill& fill, PublishMode mode) const;
  const SharedDirectory* dir_;
};

// The key of a KV file name ("<key>.kv"); empty when `name` is not one.
std::string KeyOfKvFileName(const std::string& name);

}  // namespace manyshot::shared

#include "cache/shared/shared_kv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cache/byte_codec.h"
#include "cache/parallel_chunks.h"

namespace manyshot::shared {
namespace {

constexpr char kMagic[] = "MSKVSHR2";           // the payload at an aligned offset
constexpr char kUnalignedMagic[] = "MSKVSHR1";  // the payload right after the header
constexpr size_t kMagicSize = 8;
constexpr char kSuffix[] = ".kv";

uint64_t AlignedPayloadOffset(uint64_t header_end) {
  return (header_end + kKvPayloadAlignment - 1) / kKvPayloadAlignment * kKvPayloadAlignment;
}

absl::Status ChunkFailsChecksum(const std::filesystem::path& path, uint64_t i) {
  return absl::DataLossError(
      absl::StrCat("shared KV file ", path.string(), ": chunk ", i, " fails its checksum"));
}

absl::Status ReadAt(int fd, uint64_t offset, char* dst, size_t n,
                    const std::filesystem::path& path) {
  while (n > 0) {
    const ssize_t got = pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("read ", path.string(), ": ", std::strerror(errno)));
    }
    if (got == 0) {
      return absl::DataLossError(
          absl::StrCat("shared KV file ", path.string(), " ends at ", offset));
    }
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

}  // namespace

std::string KeyOfKvFileName(const std::string& name) {
  if (!absl::EndsWith(name, kSuffix) || name.size() == sizeof(kSuffix) - 1) return "";
  return name.substr(0, name.size() - (sizeof(kSuffix) - 1));
}

SharedKvReader::~SharedKvReader() { close(fd_); }

absl::Status SharedKvReader::ReadChunk(uint64_t i, char* dst) const {
  if (i >= header_.ChunkCount()) return absl::OutOfRangeError(absl::StrCat("no chunk ", i));
  const uint64_t size = header_.ChunkSize(i);
  if (absl::Status s = ReadAt(fd_, payload_offset_ + i * header_.chunk_bytes, dst, size, path_);
      !s.ok()) {
    return s;
  }
  if (ChunkChecksum(std::string_view(dst, size)) != header_.chunk_checksums[i]) {
    return ChunkFailsChecksum(path_, i);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<MappedFile>> SharedKvReader::MapVerified() const {
  // Checks every chunk of the payload, on several threads (the mapping's pages come in faster
  // that way too); run on the mapping, and on the copy that detaches it.
  auto verify = [header = header_, offset = payload_offset_, path = path_](const char* file) {
    return ForEachChunkInParallel(header.ChunkCount(), [&](uint64_t i, std::string&) {
      const std::string_view chunk(file + offset + i * header.chunk_bytes, header.ChunkSize(i));
      if (ChunkChecksum(chunk) == header.chunk_checksums[i]) return absl::OkStatus();
      return ChunkFailsChecksum(path, i);
    });
  };
  return MappedFile::Map(fd_, payload_offset_ + header_.total_bytes, path_, std::move(verify));
}

absl::Status SharedKvReader::ReadAll(char* dst) const {
  for (uint64_t i = 0; i < header_.ChunkCount(); ++i) {
    if (absl::Status s = ReadChunk(i, dst + i * header_.chunk_bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::filesystem::path SharedKvFiles::PathOf(const std::string& key) const {
  return dir() / absl::StrCat(key, kSuffix);
}

absl::Status SharedKvFiles::Write(const BlobHeader& header, const PayloadFill& fill,
                                  PublishMode mode) const {
  const std::string header_bytes = SerializeBlobHeader(header);
  return dir_->Publish(PathOf(header.key), mode, [&](FileSink& sink) -> absl::Status {
    std::string prefix(kMagic, kMagicSize);
    codec::PutU64(&prefix, header_bytes.size());
    if (absl::Status s = sink.Append(prefix); !s.ok()) return s;
    if (absl::Status s = sink.Append(header_bytes); !s.ok()) return s;
    const std::string padding(AlignedPayloadOffset(sink.written()) - sink.written(), '\0');
    if (absl::Status s = sink.Append(padding); !s.ok()) return s;
    const uint64_t before = sink.written();
    if (absl::Status s = fill(sink); !s.ok()) return s;
    if (sink.written() - before != header.total_bytes) {
      return absl::InternalError(absl::StrCat("shared KV ", header.key, ": wrote ",
                                              sink.written() - before,
                                              " payload bytes, header says ", header.total_bytes));
    }
    return absl::OkStatus();
  });
}

absl::Status SharedKvFiles::Put(const BlobHeader& header, const PayloadFill& fill,
                                bool* published) const {
  *published = false;
  if (Exists(header.key)) return Touch(header.key);
  const absl::Status status = Write(header, fill, PublishMode::kIfAbsent);
  if (absl::IsAlreadyExists(status)) return Touch(header.key);  // another replica was faster
  if (status.ok()) *published = true;
  return status;
}

absl::Status SharedKvFiles::Replace(const BlobHeader& header, const PayloadFill& fill) const {
  return Write(header, fill, PublishMode::kReplace);
}

// The bytes between the header and an aligned payload must be zero: no checksum covers them, and
// a file is either exactly what a writer wrote or damaged.
static absl::Status CheckPadding(int fd, uint64_t begin, uint64_t end,
                                 const std::filesystem::path& path) {
  std::string padding(end - begin, '\0');
  if (absl::Status s = ReadAt(fd, begin, padding.data(), padding.size(), path); !s.ok()) return s;
  if (padding.find_first_not_of('\0') == std::string::npos) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("shared KV file ", path.string(), ": bytes between header and payload"));
}

// The header of the open file at `path`, and where its payload starts: DATA_LOSS for a damaged
// prefix or header, a header of another key, or a file whose size disagrees with its header.
static absl::StatusOr<BlobHeader> ReadHeader(int fd, const std::filesystem::path& path,
                                             const std::string& key, uint64_t* payload_offset) {
  const auto damaged = [&](std::string_view what) {
    return absl::DataLossError(
        absl::StrCat("shared KV file ", path.string(), ": ", std::string(what)));
  };
  struct stat st {};
  if (fstat(fd, &st) != 0) return absl::UnavailableError(absl::StrCat("stat ", path.string()));
  const auto file_size = static_cast<uint64_t>(st.st_size);
  char prefix[kMagicSize + 8];
  if (file_size < sizeof(prefix)) return damaged("too short");
  if (absl::Status s = ReadAt(fd, 0, prefix, sizeof(prefix), path); !s.ok()) return s;
  uint64_t header_size = 0;
  codec::Reader in(std::string_view(prefix + kMagicSize, 8));
  const std::string_view magic(prefix, kMagicSize);
  const bool aligned = magic == std::string_view(kMagic, kMagicSize);
  if ((!aligned && magic != std::string_view(kUnalignedMagic, kMagicSize)) ||
      !in.U64(&header_size) || header_size > file_size - sizeof(prefix)) {
    return damaged("bad prefix");
  }
  std::string header_bytes(header_size, '\0');
  if (absl::Status s = ReadAt(fd, sizeof(prefix), header_bytes.data(), header_size, path);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<BlobHeader> header = ParseBlobHeader(header_bytes);
  if (!header.ok()) return damaged(std::string(header.status().message()));
  if (header->key != key) return damaged("holds the blob of another key");
  const uint64_t header_end = sizeof(prefix) + header_size;
  *payload_offset = aligned ? AlignedPayloadOffset(header_end) : header_end;
  if (file_size != *payload_offset + header->total_bytes) return damaged("wrong size");
  if (absl::Status s = CheckPadding(fd, header_end, *payload_offset, path); !s.ok()) return s;
  return header;
}

absl::StatusOr<std::unique_ptr<SharedKvReader>> SharedKvFiles::Open(const std::string& key) const {
  const std::filesystem::path path = PathOf(key);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    const std::string message = absl::StrCat("open ", path.string(), ": ", std::strerror(e));
    return e == ENOENT ? absl::NotFoundError(message) : absl::UnavailableError(message);
  }
  uint64_t payload_offset = 0;
  absl::StatusOr<BlobHeader> header = ReadHeader(fd, path, key, &payload_offset);
  if (!header.ok()) {
    close(fd);
    return header.status();
  }
  return std::unique_ptr<SharedKvReader>(
      new SharedKvReader(fd, path, *std::move(header), payload_offset));
}

bool SharedKvFiles::Exists(const std::string& key) const {
  struct stat st {};
  return stat(PathOf(key).c_str(), &st) == 0;
}

absl::Status SharedKvFiles::Touch(const std::string& key) const {
  return SharedDirectory::Touch(PathOf(key));
}

}  // namespace manyshot::shared

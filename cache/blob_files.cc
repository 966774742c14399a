#include "cache/blob_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "cache/kv_stream.h"
#include "cache/parallel_chunks.h"

namespace manyshot {
namespace {

constexpr char kSuffix[] = ".kv";
constexpr char kTempSuffix[] = ".kv.tmp";

absl::Status ErrnoError(const std::string& what, const std::filesystem::path& path) {
  const int e = errno;
  if (e == ENOSPC || e == EDQUOT) {
    // Clients read this: the file's name only, not where the data directory is.
    return absl::ResourceExhaustedError(
        absl::StrCat(what, " ", path.filename().string(), ": ", std::strerror(e),
                     " on the data directory's disk; delete tasks or free space and retry"));
  }
  const std::string message = absl::StrCat(what, " ", path.string(), ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(message);
  return absl::InternalError(message);
}

absl::Status SyncDirectory(const std::filesystem::path& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open directory", dir);
  const bool ok = fsync(fd) == 0;
  absl::Status s = ok ? absl::OkStatus() : ErrnoError("fsync directory", dir);
  close(fd);
  return s;
}

// Reads exactly `n` bytes at `offset`; a short file is DATA_LOSS.
absl::Status ReadFully(int fd, uint64_t offset, char* dst, size_t n,
                       const std::filesystem::path& path) {
  while (n > 0) {
    const ssize_t got = pread(fd, dst, n, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("read", path);
    }
    if (got == 0) {
      return absl::DataLossError(absl::StrCat("KV file ", path.string(), " ends at ", offset));
    }
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// Opens the blob's file for reading and checks its size against the header: NOT_FOUND when it is
// gone (evicted or deleted since the header was read), DATA_LOSS when the size differs.
absl::Status OpenPayload(const std::filesystem::path& path, uint64_t total_bytes, Fd& file) {
  file.fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (file.fd < 0) return ErrnoError("open", path);
  struct stat st {};
  if (fstat(file.fd, &st) != 0) return ErrnoError("stat", path);
  if (static_cast<uint64_t>(st.st_size) != total_bytes) {
    return absl::DataLossError(absl::StrCat("KV file ", path.string(), " has ", st.st_size,
                                            " bytes, expected ", total_bytes));
  }
  return absl::OkStatus();
}

absl::Status ChunkMismatch(const BlobHeader& header, uint64_t i) {
  return absl::DataLossError(
      absl::StrCat("KV blob ", header.key, " chunk ", i, " checksum mismatch"));
}

// Where each payload byte goes: the segments of a host context, back to back. Offsets are in
// storage bytes; a segment holds its elements in the memory dtype (wider when converting).
struct HostSegments {
  std::vector<char*> data;
  std::vector<uint64_t> start;  // payload offset of each segment; start.back() == total
  DType storage = DType::kF32;
  DType memory = DType::kF32;
};

// Reads chunk `i` into the segments it spans and checks its XXH3-64. In the storage dtype the
// bytes go straight into the segments (checksummed there: XXH3's streaming form gives the value
// ChunkChecksum gives the whole chunk); otherwise through `buffer`, checked, then converted.
absl::Status ReadChunkInto(int fd, const BlobHeader& header, uint64_t i, const HostSegments& dst,
                           std::string& buffer, const std::filesystem::path& path) {
  const uint64_t begin = i * header.chunk_bytes;
  const uint64_t end = begin + header.ChunkSize(i);
  const bool convert = dst.storage != dst.memory;
  uint64_t sum = 0;
  if (convert) {
    buffer.resize(end - begin);
    if (absl::Status s = ReadFully(fd, begin, buffer.data(), buffer.size(), path); !s.ok()) {
      return s;
    }
    if (ChunkChecksum(buffer) != header.chunk_checksums[i]) return ChunkMismatch(header, i);
  }
  XXH3_state_t* state = convert ? nullptr : XXH3_createState();
  if (!convert && state == nullptr) return absl::ResourceExhaustedError("XXH3 state");
  if (state != nullptr) XXH3_64bits_reset(state);
  const size_t in_size = DTypeSize(dst.storage), out_size = DTypeSize(dst.memory);
  auto seg = std::upper_bound(dst.start.begin(), dst.start.end(), begin) - dst.start.begin() - 1;
  absl::Status s;
  for (uint64_t at = begin; at < end && s.ok(); ++seg) {
    const auto k = static_cast<size_t>(seg);
    const uint64_t piece = std::min(end, dst.start[k + 1]) - at;
    char* into = dst.data[k] + (at - dst.start[k]) / in_size * out_size;
    if (convert) {
      ConvertElements(buffer.data() + (at - begin), dst.storage, into, dst.memory, piece / in_size);
    } else {
      s = ReadFully(fd, at, into, piece, path);
      if (s.ok()) XXH3_64bits_update(state, into, piece);
    }
    at += piece;
  }
  if (state != nullptr) {
    sum = XXH3_64bits_digest(state);
    XXH3_freeState(state);
  }
  if (!s.ok()) return s;
  // Direct bytes are in the context already: on a mismatch the caller drops it (and re-encodes).
  if (!convert && sum != header.chunk_checksums[i]) return ChunkMismatch(header, i);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BlobFiles> BlobFiles::Open(std::filesystem::path dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("create ", dir.string(), ": ", ec.message()));
  return BlobFiles(std::move(dir));
}

std::filesystem::path BlobFiles::PathOf(const std::string& key) const {
  return dir_ / (key + kSuffix);
}

BlobFiles::Writer::Writer(Writer&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      temp_(std::move(other.temp_)),
      final_(std::move(other.final_)),
      dir_(std::move(other.dir_)) {}

BlobFiles::Writer::~Writer() {
  if (fd_ < 0) return;
  close(fd_);
  unlink(temp_.c_str());  // never committed: nothing refers to it
}

absl::Status BlobFiles::Writer::Append(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write", temp_);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status BlobFiles::Writer::Commit() {
  if (fdatasync(fd_) != 0) return ErrnoError("fsync", temp_);
  if (close(std::exchange(fd_, -1)) != 0) {
    unlink(temp_.c_str());
    return ErrnoError("close", temp_);
  }
  if (rename(temp_.c_str(), final_.c_str()) != 0) {
    absl::Status s = ErrnoError("rename", temp_);
    unlink(temp_.c_str());
    return s;
  }
  return SyncDirectory(dir_);
}

absl::StatusOr<BlobFiles::Writer> BlobFiles::Create(const std::string& key) const {
  std::filesystem::path temp = dir_ / (key + kTempSuffix);
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoError("create", temp);
  return Writer(fd, std::move(temp), PathOf(key), dir_);
}

absl::StatusOr<std::vector<uint64_t>> BlobFiles::WritePayload(const std::string& key,
                                                              const EncodedContext& ctx,
                                                              Backend& backend,
                                                              uint64_t chunk_bytes) const {
  auto writer = Create(key);
  if (!writer.ok()) return writer.status();
  std::vector<uint64_t> checksums;
  absl::Status s;
  if (backend.device() != Device::kCPU) {
    s = ForEachPayloadChunk(ctx, backend, chunk_bytes, [&](uint64_t, std::string_view chunk) {
      checksums.push_back(ChunkChecksum(chunk));
      return writer->Append(chunk);
    });
  } else {
    // Host memory: chunk boundaries run across the segments; each piece is checksummed and
    // written where it lies, with no staging copy.
    XXH3_state_t* state = XXH3_createState();
    if (state == nullptr) return absl::ResourceExhaustedError("XXH3 state");
    XXH3_64bits_reset(state);
    uint64_t in_chunk = 0;
    for (const Tensor& segment : PayloadSegments(ctx)) {
      const char* p = static_cast<const char*>(segment.raw());
      uint64_t left = segment.bytes();
      while (left > 0 && s.ok()) {
        const uint64_t piece = std::min(left, chunk_bytes - in_chunk);
        XXH3_64bits_update(state, p, piece);
        s = writer->Append(std::string_view(p, piece));
        p += piece;
        left -= piece;
        if ((in_chunk += piece) == chunk_bytes) {
          checksums.push_back(XXH3_64bits_digest(state));
          XXH3_64bits_reset(state);
          in_chunk = 0;
        }
      }
    }
    if (in_chunk > 0) checksums.push_back(XXH3_64bits_digest(state));
    XXH3_freeState(state);
  }
  if (!s.ok()) return s;
  if (s = writer->Commit(); !s.ok()) return s;
  return checksums;
}

absl::Status BlobFiles::Remove(const std::string& key) const {
  const std::filesystem::path path = PathOf(key);
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("remove", path);
  return absl::OkStatus();
}

BlobFiles::Listing BlobFiles::List() const {
  Listing listing;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t n = sizeof(kSuffix) - 1;
    std::error_code type_error;
    // A directory (or anything but a file) named like a blob is no blob: it goes with the others.
    if (name.size() > n && name.compare(name.size() - n, n, kSuffix) == 0 &&
        entry.is_regular_file(type_error)) {
      listing.keys.push_back(name.substr(0, name.size() - n));
    } else {
      listing.others.push_back(entry.path());
    }
  }
  return listing;
}

absl::StatusOr<uint64_t> BlobFiles::SizeOf(const std::string& key) const {
  struct stat st {};
  const std::filesystem::path path = PathOf(key);
  if (stat(path.c_str(), &st) != 0) return ErrnoError("stat", path);
  return static_cast<uint64_t>(st.st_size);
}

absl::Status BlobFiles::ReadPayload(const BlobHeader& header, EncodedContext& ctx,
                                    Backend& backend) const {
  const std::filesystem::path path = PathOf(header.key);
  Fd file;
  if (absl::Status s = OpenPayload(path, header.total_bytes, file); !s.ok()) return s;
  posix_fadvise(file.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  const std::vector<Tensor> segments = PayloadSegments(ctx);
  const DType memory = segments.empty() ? header.shape.dtype : segments.front().dtype();
  const bool direct = backend.device() == Device::kCPU &&
                      std::all_of(segments.begin(), segments.end(),
                                  [&](const Tensor& t) { return t.dtype() == memory; });
  if (!direct) {
    // Bound for a GPU: chunk by chunk through the assembler (pinned staging, device converts).
    PayloadAssembler assembler(&ctx, header.shape.dtype, backend);
    std::string chunk;
    for (uint64_t i = 0; i < header.ChunkCount(); ++i) {
      chunk.resize(header.ChunkSize(i));
      absl::Status s = ReadFully(file.fd, i * header.chunk_bytes, chunk.data(), chunk.size(), path);
      if (!s.ok()) return s;
      if (ChunkChecksum(chunk) != header.chunk_checksums[i]) return ChunkMismatch(header, i);
      if (s = assembler.Feed(chunk); !s.ok()) return s;
    }
    if (assembler.consumed() != header.total_bytes) {
      return absl::DataLossError(absl::StrCat("KV blob ", header.key, " payload is short"));
    }
    return assembler.Finish();  // the pinned buffers are freed with the assembler
  }
  HostSegments dst;
  dst.storage = header.shape.dtype;
  dst.memory = memory;
  uint64_t at = 0;
  for (const Tensor& t : segments) {
    dst.data.push_back(static_cast<char*>(t.raw()));
    dst.start.push_back(at);
    at += static_cast<uint64_t>(t.numel()) * DTypeSize(dst.storage);
  }
  dst.start.push_back(at);
  if (at != header.total_bytes) {
    return absl::DataLossError(absl::StrCat("KV blob ", header.key, " holds ", header.total_bytes,
                                            " bytes for a context of ", at));
  }
  return ForEachChunkInParallel(header.ChunkCount(), [&](uint64_t i, std::string& buffer) {
    return ReadChunkInto(file.fd, header, i, dst, buffer, path);
  });
}

}  // namespace manyshot

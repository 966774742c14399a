// The on-disk form of one KV blob: a header (kept in the "kv_meta" column family) and the payload,
// split into chunks of at most `chunk_bytes` (the "kv" column family). The payload is every
// layer's K then V, `tokens` rows each, in the storage dtype, little endian. The header records the
// format version, dtype, shapes, chunking, and an XXH3-64 checksum of every chunk; it carries its
// own XXH3-64 checksum too, so a damaged header is detected before any of its fields is trusted.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cache/kv_convert.h"

namespace manyshot {

struct BlobHeader {
  uint32_t format_version = 0;
  std::string key;  // the cache key the blob was written under (guards against misfiled blobs)
  KvShape shape;    // shape.dtype is the storage dtype
  uint64_t chunk_bytes = 0;
  uint64_t total_bytes = 0;               // == shape.PayloadBytes()
  std::vector<uint64_t> chunk_checksums;  // XXH3-64 of each chunk
  uint64_t ChunkCount() const { return chunk_checksums.size(); }
  // Bytes of chunk i (the last one may be short).
  uint64_t ChunkSize(uint64_t i) const;
};

std::string SerializeBlobHeader(const BlobHeader& header);

// DATA_LOSS when the bytes are truncated, the checksum fails, the magic or version is wrong, or
// the fields are inconsistent (total bytes vs shape, chunk count vs chunk size).
absl::StatusOr<BlobHeader> ParseBlobHeader(std::string_view bytes);

uint64_t ChunkChecksum(std::string_view chunk);

// Chunk keys: the cache key followed by the chunk index as 8 big-endian bytes, so one blob's
// chunks are adjacent and in order.
std::string ChunkKey(std::string_view cache_key, uint64_t index);

}  // namespace manyshot

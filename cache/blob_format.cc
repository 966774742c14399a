#include "cache/blob_format.h"

#include <xxhash.h>

#include "absl/strings/str_cat.h"
#include "cache/byte_codec.h"

namespace manyshot {
namespace {

using codec::PutU64;
using codec::Reader;

constexpr char kMagic[4] = {'M', 'S', 'K', 'V'};

}  // namespace

uint64_t BlobHeader::ChunkSize(uint64_t i) const {
  const uint64_t begin = i * chunk_bytes;
  return std::min(chunk_bytes, total_bytes - begin);
}

uint64_t ChunkChecksum(std::string_view chunk) { return XXH3_64bits(chunk.data(), chunk.size()); }

std::string ChunkKey(std::string_view cache_key, uint64_t index) {
  std::string key(cache_key);
  for (int i = 7; i >= 0; --i) key.push_back(static_cast<char>((index >> (8 * i)) & 0xff));
  return key;
}

std::string SerializeBlobHeader(const BlobHeader& h) {
  std::string out(kMagic, sizeof(kMagic));
  PutU64(&out, h.format_version);
  PutU64(&out, h.key.size());
  out += h.key;
  PutU64(&out, static_cast<uint64_t>(h.shape.dtype));
  for (int64_t v : {h.shape.layers, h.shape.tokens, h.shape.kv_heads, h.shape.head_dim,
                    h.shape.groups, h.shape.group_length}) {
    PutU64(&out, static_cast<uint64_t>(v));
  }
  PutU64(&out, h.chunk_bytes);
  PutU64(&out, h.total_bytes);
  PutU64(&out, h.chunk_checksums.size());
  for (uint64_t c : h.chunk_checksums) PutU64(&out, c);
  PutU64(&out, XXH3_64bits(out.data(), out.size()));
  return out;
}

absl::StatusOr<BlobHeader> ParseBlobHeader(std::string_view bytes) {
  auto bad = [](std::string_view why) {
    return absl::DataLossError(absl::StrCat("corrupt KV blob header: ", std::string(why)));
  };
  if (bytes.size() < sizeof(kMagic) + 8) return bad("truncated");
  const std::string_view body = bytes.substr(0, bytes.size() - 8);
  Reader tail(bytes.substr(bytes.size() - 8));
  uint64_t stored = 0;
  tail.U64(&stored);
  if (stored != XXH3_64bits(body.data(), body.size())) return bad("header checksum mismatch");
  if (body.substr(0, sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic))) {
    return bad("bad magic");
  }
  Reader r(body.substr(sizeof(kMagic)));
  BlobHeader h;
  uint64_t version = 0, dtype = 0, chunks = 0;
  if (!r.U64(&version) || !r.Str(&h.key) || !r.U64(&dtype) || !r.I64(&h.shape.layers) ||
      !r.I64(&h.shape.tokens) || !r.I64(&h.shape.kv_heads) || !r.I64(&h.shape.head_dim) ||
      !r.I64(&h.shape.groups) || !r.I64(&h.shape.group_length) || !r.U64(&h.chunk_bytes) ||
      !r.U64(&h.total_bytes) || !r.U64(&chunks)) {
    return bad("truncated");
  }
  if (version > UINT32_MAX || dtype > static_cast<uint64_t>(DType::kBF16)) {
    return bad("bad version or dtype");
  }
  h.format_version = static_cast<uint32_t>(version);
  h.shape.dtype = static_cast<DType>(dtype);
  if (chunks > (body.size() - sizeof(kMagic) - r.pos()) / 8) return bad("truncated checksums");
  h.chunk_checksums.resize(chunks);
  for (uint64_t& c : h.chunk_checksums) r.U64(&c);
  if (r.pos() != body.size() - sizeof(kMagic)) return bad("trailing bytes");
  // Shapes must be sane before their product is trusted (no overflow from a forged header).
  double product = 2.0 * static_cast<double>(DTypeSize(h.shape.dtype));
  for (int64_t v : {h.shape.layers, h.shape.tokens, h.shape.kv_heads, h.shape.head_dim}) {
    product *= static_cast<double>(v);
  }
  if (product > 0x1p50) return bad("implausible shape");
  if (h.total_bytes != h.shape.PayloadBytes()) return bad("total bytes do not match the shape");
  if (h.chunk_bytes == 0 || h.chunk_bytes % 4 != 0) return bad("bad chunk size");
  if (chunks != (h.total_bytes + h.chunk_bytes - 1) / h.chunk_bytes) {
    return bad("chunk count does not match the size");
  }
  return h;
}

}  // namespace manyshot

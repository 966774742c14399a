#include "cache/shared/shared_context.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/blob_format.h"
#include "cache/kv_stream.h"
#include "engine/task/cache_key.h"

namespace manyshot::shared {

absl::Status WriteSharedContext(const SharedKvFiles& files, const std::string& key,
                                const EncodedContext& ctx, DType dtype, Backend& backend,
                                uint64_t chunk_bytes, WriteMode mode, bool* published) {
  if (published != nullptr) *published = false;
  if (mode == WriteMode::kKeepExisting && files.Exists(key)) return files.Touch(key);
  auto stored = ConvertContext(ctx, dtype, backend);
  if (!stored.ok()) return stored.status();
  auto shape = ShapeOf(*stored);
  if (!shape.ok()) return shape.status();
  BlobHeader header;
  header.format_version = kCacheFormatVersion;
  header.key = key;
  header.shape = *shape;
  header.chunk_bytes = chunk_bytes;
  header.total_bytes = shape->PayloadBytes();
  // The header, which comes first in the file, holds every chunk's checksum: one pass to
  // checksum, one to write (the context is immutable, so both see the same bytes).
  absl::Status s =
      ForEachPayloadChunk(*stored, backend, chunk_bytes, [&](uint64_t, std::string_view chunk) {
        header.chunk_checksums.push_back(ChunkChecksum(chunk));
        return absl::OkStatus();
      });
  if (!s.ok()) return s;
  const auto fill = [&](FileSink& sink) {
    return ForEachPayloadChunk(
        *stored, backend, chunk_bytes,
        [&](uint64_t, std::string_view chunk) { return sink.Append(chunk); });
  };
  if (mode == WriteMode::kReplace) {
    s = files.Replace(header, fill);
    if (s.ok() && published != nullptr) *published = true;
    return s;
  }
  bool wrote = false;
  s = files.Put(header, fill, &wrote);
  if (published != nullptr) *published = wrote;
  return s;
}

namespace {

// The file's payload used in place: every layer's K and V are views of the mapping, which lives
// as long as any of them.
SharedContext MappedContext(std::shared_ptr<MappedFile> mapped, uint64_t payload_offset,
                            const BlobHeader& header) {
  const KvShape& shape = header.shape;
  SharedContext out;
  out.mapping = mapped;
  out.bytes = header.total_bytes;
  out.context.tokens = shape.tokens;
  out.context.groups = shape.groups;
  out.context.group_length = shape.group_length;
  out.context.kv.len = shape.tokens;
  auto buffer = std::make_shared<Buffer>(mapped->data() + payload_offset, header.total_bytes,
                                         Device::kCPU, [mapped](void*, size_t) {});
  const uint64_t tensor_bytes = header.total_bytes / static_cast<uint64_t>(2 * shape.layers);
  size_t at = 0;
  for (int64_t l = 0; l < shape.layers; ++l) {
    for (auto* list : {&out.context.kv.k, &out.context.kv.v}) {
      list->emplace_back(buffer, shape.dtype,
                         std::vector<int64_t>{shape.tokens, shape.kv_heads, shape.head_dim}, at);
      at += tensor_bytes;
    }
  }
  return out;
}

// The file's payload copied, chunk by chunk, into tensors the backend allocates.
absl::StatusOr<SharedContext> CopiedContext(const SharedKvReader& reader, Backend& backend) {
  const BlobHeader& header = reader.header();
  SharedContext out;
  auto ctx = AllocateContext(backend, header.shape);
  if (!ctx.ok()) return ctx.status();
  out.context = *std::move(ctx);
  PayloadAssembler assembler(&out.context, header.shape.dtype, backend);
  std::vector<char> chunk(header.chunk_bytes);
  for (uint64_t i = 0; i < header.ChunkCount(); ++i) {
    if (absl::Status s = reader.ReadChunk(i, chunk.data()); !s.ok()) return s;
    const uint64_t size = header.ChunkSize(i);
    if (absl::Status s = assembler.Feed(std::string_view(chunk.data(), size)); !s.ok()) return s;
    out.bytes += size;
  }
  if (absl::Status s = assembler.Finish(); !s.ok()) return s;
  return out;
}

// Host tensors can be views of the file when its payload is aligned; an empty context has
// nothing to map.
bool CanMap(const SharedKvReader& reader, const Backend& backend) {
  return backend.device() == Device::kCPU && reader.payload_aligned() &&
         reader.header().total_bytes > 0 && reader.header().shape.layers > 0;
}

}  // namespace

absl::StatusOr<SharedContext> ReadSharedContext(const SharedKvFiles& files, const std::string& key,
                                                Backend& backend, ReadMode mode) {
  auto reader = files.Open(key);
  if (!reader.ok()) return reader.status();
  const BlobHeader& header = (*reader)->header();
  if (header.format_version != kCacheFormatVersion) {
    return absl::DataLossError(absl::StrCat("shared KV file of ", key, " is in format ",
                                            header.format_version, ", this server reads ",
                                            kCacheFormatVersion));
  }
  if (mode == ReadMode::kMapWhenPossible && CanMap(**reader, backend)) {
    auto mapped = (*reader)->MapVerified();
    if (!mapped.ok()) return mapped.status();
    return MappedContext(*std::move(mapped), (*reader)->payload_offset(), header);
  }
  return CopiedContext(**reader, backend);
}

absl::Status DetachFromFile(const std::weak_ptr<MappedFile>& mapping,
                            const std::function<bool()>& keep_going) {
  const std::shared_ptr<MappedFile> mapped = mapping.lock();
  if (mapped == nullptr) return absl::OkStatus();  // copied, or no longer used
  return mapped->Detach(keep_going);
}

}  // namespace manyshot::shared

#include "cache/kv_stream.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace manyshot {

std::vector<Tensor> PayloadSegments(const EncodedContext& ctx) {
  std::vector<Tensor> segments;
  for (size_t l = 0; l < ctx.kv.k.size(); ++l) {
    for (const Tensor* t : {&ctx.kv.k[l], &ctx.kv.v[l]}) {
      const int64_t per_row = t->numel() / t->dim(0);
      segments.push_back(t->Rows(0, ctx.tokens).Reshape({ctx.tokens * per_row}));
    }
  }
  return segments;
}

absl::Status ForEachPayloadChunk(
    const EncodedContext& ctx, Backend& backend, size_t chunk_bytes,
    const std::function<absl::Status(uint64_t, std::string_view)>& fn) {
  std::string chunk;
  chunk.reserve(chunk_bytes);
  uint64_t index = 0;
  for (const Tensor& segment : PayloadSegments(ctx)) {
    const size_t elem = DTypeSize(segment.dtype());
    int64_t e = 0;
    while (e < segment.numel()) {
      const int64_t room = static_cast<int64_t>((chunk_bytes - chunk.size()) / elem);
      const int64_t end = std::min(segment.numel(), e + room);
      const size_t old = chunk.size();
      chunk.resize(old + static_cast<size_t>(end - e) * elem);
      if (absl::Status s = backend.CopyToHost(segment.Rows(e, end), chunk.data() + old); !s.ok()) {
        return s;
      }
      e = end;
      if (chunk.size() + elem > chunk_bytes) {
        if (absl::Status s = fn(index++, chunk); !s.ok()) return s;
        chunk.clear();
      }
    }
  }
  if (!chunk.empty()) return fn(index, chunk);
  return absl::OkStatus();
}

namespace {

// Elements per pinned staging buffer (4 MiB of f32 or 2 MiB of 16-bit values, for each of two).
constexpr int64_t kPinnedElements = int64_t{1} << 20;

}  // namespace

PayloadAssembler::PayloadAssembler(EncodedContext* target, DType storage_dtype, Backend& backend)
    : PayloadAssembler(target, storage_dtype, backend, backend.device() != Device::kCPU) {}

PayloadAssembler::PayloadAssembler(EncodedContext* target, DType storage_dtype, Backend& backend,
                                   bool stage_through_pinned)
    : segments_(PayloadSegments(*target)),
      storage_dtype_(storage_dtype),
      backend_(backend),
      stage_through_pinned_(stage_through_pinned) {}

PayloadAssembler::~PayloadAssembler() {
  if (in_flight_[0] || in_flight_[1]) (void)backend_.Synchronize();
}

absl::Status PayloadAssembler::Finish() {
  if (!in_flight_[0] && !in_flight_[1]) return absl::OkStatus();
  in_flight_[0] = in_flight_[1] = false;
  return backend_.Synchronize();
}

absl::Status PayloadAssembler::StagePinned(const char* src, const Tensor& dst) {
  const size_t elem = DTypeSize(dst.dtype());
  for (int64_t e = 0; e < dst.numel(); e += kPinnedElements) {
    const int64_t n = std::min(kPinnedElements, dst.numel() - e);
    Tensor& buffer = pinned_[next_];
    if (!buffer.defined() || buffer.dtype() != dst.dtype()) {
      if (in_flight_[next_]) {
        if (absl::Status s = backend_.Synchronize(); !s.ok()) return s;
        in_flight_[0] = in_flight_[1] = false;
      }
      auto allocated = backend_.AllocateHost(dst.dtype(), {kPinnedElements});
      if (!allocated.ok()) return allocated.status();
      buffer = *std::move(allocated);
    }
    if (in_flight_[next_]) {
      // The DMA from this buffer was issued two pieces ago; waiting for it also waits for the
      // other buffer's newer copy (one stream), so both are free afterwards.
      if (absl::Status s = backend_.Synchronize(); !s.ok()) return s;
      in_flight_[0] = in_flight_[1] = false;
    }
    std::memcpy(buffer.raw(), src + static_cast<size_t>(e) * elem, static_cast<size_t>(n) * elem);
    backend_.CopyFromHostAsync(buffer.Rows(0, n), dst.Rows(e, e + n));
    in_flight_[next_] = true;
    next_ = 1 - next_;
  }
  return absl::OkStatus();
}

absl::Status PayloadAssembler::Feed(std::string_view bytes) {
  const size_t in_elem = DTypeSize(storage_dtype_);
  while (!bytes.empty() && segment_ < segments_.size()) {
    const Tensor& segment = segments_[segment_];
    const int64_t n =
        std::min(segment.numel() - element_, static_cast<int64_t>(bytes.size() / in_elem));
    if (n == 0 && element_ < segment.numel()) break;  // a partial element: not ours to split
    const Tensor dst = segment.Rows(element_, element_ + n);
    if (segment.dtype() == storage_dtype_ && stage_through_pinned_) {
      if (absl::Status s = StagePinned(bytes.data(), dst); !s.ok()) return s;
    } else if (segment.dtype() == storage_dtype_) {
      backend_.CopyFromHost(bytes.data(), dst);
    } else {
      staging_.resize(static_cast<size_t>(n) * DTypeSize(segment.dtype()));
      ConvertElements(bytes.data(), storage_dtype_, staging_.data(), segment.dtype(),
                      static_cast<size_t>(n));
      backend_.CopyFromHost(staging_.data(), dst);
    }
    bytes.remove_prefix(static_cast<size_t>(n) * in_elem);
    consumed_ += static_cast<size_t>(n) * in_elem;
    element_ += n;
    if (element_ == segment.numel()) {
      ++segment_;
      element_ = 0;
    }
  }
  return absl::OkStatus();
}

}  // namespace manyshot

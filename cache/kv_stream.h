// Streaming a context's K/V payload (every layer's K then V, `tokens` rows each) to and from
// fixed-size chunks, through the backend's host copies, converting between the storage dtype and
// the dtype held in memory on the way. Never materializes the whole payload on the host: a 2 GB
// context needs one chunk of staging.
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "cache/kv_convert.h"

namespace manyshot {

// Calls fn(index, bytes) for every chunk of `ctx`'s payload in its own dtype, in order. Stops at
// and returns the first error fn returns.
absl::Status ForEachPayloadChunk(const EncodedContext& ctx, Backend& backend, size_t chunk_bytes,
                                 const std::function<absl::Status(uint64_t, std::string_view)>& fn);

// Fills a context allocated with AllocateContext from payload bytes in `storage_dtype`, fed in
// order in pieces of any size that are whole elements. When the storage dtype is the target's
// and `stage_through_pinned` is set (the default for a GPU backend), bytes go through two
// page-locked host buffers in turn: each piece is copied into one while the device is still
// reading the other by DMA (asynchronously, on the calling thread's stream), so reading RocksDB and
// the transfer to the GPU overlap. Finish() after the last Feed waits for the copies still in
// flight; the pinned buffers are never freed before they have landed (the destructor waits too).
class PayloadAssembler {
 public:
  PayloadAssembler(EncodedContext* target, DType storage_dtype, Backend& backend);
  PayloadAssembler(EncodedContext* target, DType storage_dtype, Backend& backend,
                   bool stage_through_pinned);
  PayloadAssembler(const PayloadAssembler&) = delete;
  PayloadAssembler& operator=(const PayloadAssembler&) = delete;
  // Waits for the asynchronous copies out of the pinned buffers (ignoring the status, which an
  // error path has already replaced with its own) unless Finish() did.
  ~PayloadAssembler();
  absl::Status Feed(std::string_view bytes);
  // Waits for every copy issued so far (the backend's Synchronize: an asynchronous copy that
  // failed is reported here). The target is complete once this returns OK after the last Feed.
  absl::Status Finish();
  // Storage-dtype bytes consumed so far.
  size_t consumed() const { return consumed_; }

 private:
  std::vector<Tensor> segments_;  // flattened K/V tensors in payload order
  DType storage_dtype_;
  Backend& backend_;
  size_t segment_ = 0;
  int64_t element_ = 0;  // next element of segments_[segment_]
  size_t consumed_ = 0;
  std::vector<std::byte> staging_;
  // Pinned double buffer (stage_through_pinned): the buffer filled next, and whether each one
  // may still be read by an asynchronous copy.
  bool stage_through_pinned_ = false;
  Tensor pinned_[2];
  bool in_flight_[2] = {false, false};
  int next_ = 0;
  absl::Status StagePinned(const char* src, const Tensor& dst);
};

// The payload segments of `ctx` in order: each tensor's first `tokens` rows, flattened.
std::vector<Tensor> PayloadSegments(const EncodedContext& ctx);

}  // namespace manyshot

// The keys and values one sequence has produced so far, per layer, on the backend's device, in the
// model's KV dtype. Rows are tokens in sequence order; shape per layer [capacity, kv_heads,
// head_dim]. Memory is allocated by Reserve (which Transformer::Forward calls), so that running
// out of device memory is a status, not an exception.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"

namespace manyshot {

class KvCache {
 public:
  KvCache() = default;
  // `capacity` is a hint: the first Reserve allocates at least that many rows. With
  // `keep_positions` the cache also holds every row's position id (ALiBi attention reads them).
  KvCache(Backend& backend, int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t capacity,
          DType dtype, bool keep_positions = false);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t layers() const { return layers_; }
  DType dtype() const { return dtype_; }
  const Tensor& k(int64_t layer) const { return k_[layer]; }
  const Tensor& v(int64_t layer) const { return v_[layer]; }
  // kI32 [capacity]: the rows' position ids; undefined unless keep_positions.
  const Tensor& positions() const { return positions_; }

  // Makes room for `extra` more rows (growing geometrically, copying what is there).
  absl::Status Reserve(int64_t extra);
  // Writes rows of k/v ([n, kv_heads, head_dim], any float dtype: converted to the cache's) for
  // `layer` at [length, length + n); the length advances once per forward pass via Advance(n),
  // after every layer has written.
  void Write(int64_t layer, const Tensor& k_rows, const Tensor& v_rows);
  // Writes the new rows' position ids (kI32 [n]) at [length, length + n); keep_positions only.
  void WritePositions(const Tensor& position_rows);
  void Advance(int64_t n) { length_ += n; }
  // Drops rows past `length` (beam search rewinds, tests).
  void Truncate(int64_t length) { length_ = std::min(length_, length); }
  // A deep copy of the first length() rows (beam search forks).
  absl::StatusOr<KvCache> Clone() const;
  // Exact bytes held (capacity, not length).
  size_t bytes() const;

 private:
  Backend* backend_ = nullptr;
  int64_t layers_ = 0;
  int64_t kv_heads_ = 0;
  int64_t head_dim_ = 0;
  int64_t initial_capacity_ = 0;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  DType dtype_ = DType::kF32;
  bool keep_positions_ = false;
  std::vector<Tensor> k_, v_;
  Tensor positions_;
};

}  // namespace manyshot

// The keys and values one sequence has produced so far, per layer, on the backend's device.
// Rows are tokens in sequence order; shape per layer [capacity, kv_heads, head_dim].
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/backend.h"

namespace manyshot {

class KvCache {
 public:
  KvCache() = default;
  KvCache(Backend& backend, int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t capacity);

  int64_t length() const { return length_; }
  int64_t capacity() const { return capacity_; }
  int64_t layers() const { return static_cast<int64_t>(k_.size()); }
  const Tensor& k(int64_t layer) const { return k_[layer]; }
  const Tensor& v(int64_t layer) const { return v_[layer]; }

  // Makes room for `extra` more rows (growing geometrically, copying what is there).
  void Reserve(int64_t extra);
  // Writes rows of k/v ([n, kv_heads, head_dim]) for `layer` at [length, length + n); the length
  // advances once per forward pass via Advance(n), after every layer has written.
  void Write(int64_t layer, const Tensor& k_rows, const Tensor& v_rows);
  void Advance(int64_t n) { length_ += n; }
  // Drops rows past `length` (beam search rewinds, tests).
  void Truncate(int64_t length) { length_ = std::min(length_, length); }
  // A deep copy of the first length() rows (beam search forks).
  KvCache Clone() const;
  // Exact bytes held (capacity, not length).
  size_t bytes() const;

 private:
  Backend* backend_ = nullptr;
  int64_t kv_heads_ = 0;
  int64_t head_dim_ = 0;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<Tensor> k_, v_;
};

}  // namespace manyshot

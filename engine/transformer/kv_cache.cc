#include "engine/transformer/kv_cache.h"

#include <algorithm>

namespace manyshot {

KvCache::KvCache(Backend& backend, int64_t layers, int64_t kv_heads, int64_t head_dim,
                 int64_t capacity)
    : backend_(&backend), kv_heads_(kv_heads), head_dim_(head_dim), capacity_(capacity) {
  for (int64_t l = 0; l < layers; ++l) {
    k_.push_back(backend.Allocate(DType::kF32, {capacity, kv_heads, head_dim}));
    v_.push_back(backend.Allocate(DType::kF32, {capacity, kv_heads, head_dim}));
  }
}

void KvCache::Reserve(int64_t extra) {
  if (length_ + extra <= capacity_) return;
  int64_t capacity = std::max(length_ + extra, capacity_ * 2);
  for (size_t l = 0; l < k_.size(); ++l) {
    for (auto* t : {&k_[l], &v_[l]}) {
      Tensor grown = backend_->Allocate(DType::kF32, {capacity, kv_heads_, head_dim_});
      if (length_ > 0) backend_->Copy(t->Rows(0, length_), grown.Rows(0, length_));
      *t = std::move(grown);
    }
  }
  capacity_ = capacity;
}

void KvCache::Write(int64_t layer, const Tensor& k_rows, const Tensor& v_rows) {
  const int64_t n = k_rows.dim(0);
  backend_->Copy(k_rows, k_[layer].Rows(length_, length_ + n));
  backend_->Copy(v_rows, v_[layer].Rows(length_, length_ + n));
}

KvCache KvCache::Clone() const {
  KvCache copy(*backend_, layers(), kv_heads_, head_dim_, std::max<int64_t>(capacity_, 1));
  for (size_t l = 0; l < k_.size(); ++l) {
    if (length_ > 0) {
      backend_->Copy(k_[l].Rows(0, length_), copy.k_[l].Rows(0, length_));
      backend_->Copy(v_[l].Rows(0, length_), copy.v_[l].Rows(0, length_));
    }
  }
  copy.length_ = length_;
  return copy;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (size_t l = 0; l < k_.size(); ++l) total += k_[l].bytes() + v_[l].bytes();
  return total;
}

}  // namespace manyshot

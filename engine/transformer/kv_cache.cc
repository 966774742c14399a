#include "engine/transformer/kv_cache.h"

#include <algorithm>

namespace manyshot {

KvCache::KvCache(Backend& backend, int64_t layers, int64_t kv_heads, int64_t head_dim,
                 int64_t capacity, DType dtype, bool keep_positions)
    : backend_(&backend),
      layers_(layers),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      initial_capacity_(std::max<int64_t>(1, capacity)),
      dtype_(dtype),
      keep_positions_(keep_positions) {}

absl::Status KvCache::Reserve(int64_t extra) {
  if (length_ + extra <= capacity_) return absl::OkStatus();
  const int64_t capacity = std::max({length_ + extra, capacity_ * 2, initial_capacity_});
  std::vector<Tensor> k(layers_), v(layers_);
  for (int64_t l = 0; l < layers_; ++l) {
    for (auto [grown, old] : {std::pair{&k[l], &k_}, {&v[l], &v_}}) {
      auto t = backend_->Allocate(dtype_, {capacity, kv_heads_, head_dim_});
      if (!t.ok()) return t.status();
      *grown = *std::move(t);
      if (length_ > 0) backend_->Copy((*old)[l].Rows(0, length_), grown->Rows(0, length_));
    }
  }
  if (keep_positions_) {
    auto grown = backend_->Allocate(DType::kI32, {capacity});
    if (!grown.ok()) return grown.status();
    if (length_ > 0) backend_->Copy(positions_.Rows(0, length_), grown->Rows(0, length_));
    positions_ = *std::move(grown);
  }
  k_ = std::move(k);
  v_ = std::move(v);
  capacity_ = capacity;
  return absl::OkStatus();
}

void KvCache::Write(int64_t layer, const Tensor& k_rows, const Tensor& v_rows) {
  const int64_t n = k_rows.dim(0);
  backend_->Convert(k_rows, k_[layer].Rows(length_, length_ + n));
  backend_->Convert(v_rows, v_[layer].Rows(length_, length_ + n));
}

void KvCache::WritePositions(const Tensor& position_rows) {
  const int64_t n = position_rows.dim(0);
  backend_->Copy(position_rows, positions_.Rows(length_, length_ + n));
}

absl::StatusOr<KvCache> KvCache::Clone() const {
  KvCache copy(*backend_, layers_, kv_heads_, head_dim_, std::max<int64_t>(capacity_, 1), dtype_,
               keep_positions_);
  auto status = copy.Reserve(std::max<int64_t>(capacity_, 1));
  if (!status.ok()) return status;
  for (int64_t l = 0; l < layers_ && length_ > 0; ++l) {
    backend_->Copy(k_[l].Rows(0, length_), copy.k_[l].Rows(0, length_));
    backend_->Copy(v_[l].Rows(0, length_), copy.v_[l].Rows(0, length_));
  }
  if (keep_positions_ && length_ > 0) {
    backend_->Copy(positions_.Rows(0, length_), copy.positions_.Rows(0, length_));
  }
  copy.length_ = length_;
  return copy;
}

size_t KvCache::bytes() const {
  size_t total = 0;
  for (size_t l = 0; l < k_.size(); ++l) total += k_[l].bytes() + v_[l].bytes();
  return total + (positions_.defined() ? positions_.bytes() : 0);
}

}  // namespace manyshot

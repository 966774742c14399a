#include "cache/host_tier.h"

#include "cache/kv_convert.h"
#include "cache/memory_tier.h"

namespace manyshot {
namespace {

// An empty context with the same metadata as `ctx` (tensors are filled in by the caller).
EncodedContext SameMetadata(const EncodedContext& ctx) {
  EncodedContext out;
  out.groups = ctx.groups;
  out.group_length = ctx.group_length;
  out.tokens = ctx.tokens;
  out.kv.len = ctx.kv.len;
  out.kv.log_weight = ctx.kv.log_weight;
  // The keys' position ids (ALiBi models; 4 bytes a token) stay where they are, shared.
  out.kv.positions = ctx.kv.positions;
  return out;
}

}  // namespace

absl::Status HostTier::Put(const std::string& key, const EncodedContext& ctx) {
  const size_t bytes = ContextTensorBytes(ctx);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = index_.find(key); it != index_.end()) {
      lru_.splice(lru_.end(), lru_, it->second);
      return absl::OkStatus();
    }
    if (bytes > budget_) {
      ++counters_.rejected;
      return absl::OkStatus();
    }
  }
  // Copy outside the lock: the transfer takes milliseconds per gigabyte.
  EncodedContext host = SameMetadata(ctx);
  for (const auto* list : {&ctx.kv.k, &ctx.kv.v}) {
    auto& out = list == &ctx.kv.k ? host.kv.k : host.kv.v;
    for (const Tensor& t : *list) {
      auto pinned = backend_.AllocateHost(t.dtype(), t.shape());
      if (!pinned.ok()) return pinned.status();
      if (absl::Status s = backend_.CopyToHost(t, pinned->raw()); !s.ok()) return s;
      out.push_back(*std::move(pinned));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  if (index_.count(key) != 0) return absl::OkStatus();  // another thread put it meanwhile
  EvictFor(bytes);
  bytes_ += bytes;
  index_[key] = lru_.insert(lru_.end(), Entry{key, std::move(host), bytes});
  return absl::OkStatus();
}

void HostTier::EvictFor(size_t bytes) {
  while (!lru_.empty() && bytes_ + bytes > budget_) {
    bytes_ -= lru_.front().bytes;
    index_.erase(lru_.front().key);
    lru_.pop_front();
    ++counters_.evictions;
  }
}

absl::StatusOr<std::optional<EncodedContext>> HostTier::Restore(const std::string& key) {
  EncodedContext host;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      ++counters_.misses;
      return std::optional<EncodedContext>();
    }
    ++counters_.hits;
    lru_.splice(lru_.end(), lru_, it->second);
    host = it->second->host;  // shares the pinned buffers: safe if the entry is evicted meanwhile
  }
  auto shape = ShapeOf(host);
  if (!shape.ok()) return shape.status();
  auto device = AllocateContext(backend_, *shape);
  if (!device.ok()) return device.status();
  device->kv.log_weight = host.kv.log_weight;
  device->kv.positions = host.kv.positions;
  for (size_t l = 0; l < host.kv.k.size(); ++l) {
    backend_.CopyFromHostAsync(host.kv.k[l], device->kv.k[l]);
    backend_.CopyFromHostAsync(host.kv.v[l], device->kv.v[l]);
  }
  // The copies read `host`'s pinned buffers, which live until this returns.
  if (absl::Status s = backend_.Synchronize(); !s.ok()) return s;
  return std::optional<EncodedContext>(*std::move(device));
}

void HostTier::Erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
}

HostTier::Stats HostTier::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = counters_;
  s.budget_bytes = budget_;
  s.bytes = bytes_;
  s.entries = lru_.size();
  return s;
}

}  // namespace manyshot

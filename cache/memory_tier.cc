#include "cache/memory_tier.h"

namespace manyshot {

size_t ContextTensorBytes(const EncodedContext& ctx) {
  size_t total = 0;
  for (const Tensor& t : ctx.kv.k) total += t.bytes();
  for (const Tensor& t : ctx.kv.v) total += t.bytes();
  return total;
}

PinnedContext& PinnedContext::operator=(PinnedContext&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = other.tier_;
    entry_ = std::move(other.entry_);
    other.tier_ = nullptr;
  }
  return *this;
}

const EncodedContext* PinnedContext::get() const {
  return entry_ ? entry_->context.get() : nullptr;
}

void PinnedContext::Release() {
  if (entry_ && tier_) tier_->Unpin(entry_.get());
  entry_.reset();
  tier_ = nullptr;
}

std::optional<PinnedContext> MemoryTier::Lookup(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    ++counters_.misses;
    return std::nullopt;
  }
  ++counters_.hits;
  lru_.splice(lru_.end(), lru_, it->second);  // most recently used
  std::shared_ptr<Entry> entry = *it->second;
  ++entry->pins;
  return PinnedContext(this, std::move(entry));
}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& other) noexcept {
  if (this != &other) {
    Release();
    tier_ = other.tier_;
    bytes_ = other.bytes_;
    other.tier_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void MemoryReservation::Release() {
  if (tier_) tier_->Unreserve(bytes_);
  tier_ = nullptr;
  bytes_ = 0;
}

PinnedContext MemoryTier::Insert(const std::string& key,
                                 std::shared_ptr<const EncodedContext> ctx) {
  std::vector<std::shared_ptr<Entry>> evicted;
  PinnedContext pinned = InsertLocked(key, std::move(ctx), evicted);
  SendToSink(evicted);
  ReleaseDropped(evicted);
  return pinned;
}

std::optional<MemoryReservation> MemoryTier::Reserve(size_t bytes) {
  std::vector<std::shared_ptr<Entry>> evicted;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!MakeRoomLocked(bytes, evicted)) {
      ++counters_.rejected;
      return std::nullopt;
    }
    bytes_ += bytes;
    reserved_ += bytes;
  }
  SendToSink(evicted);
  ReleaseDropped(evicted);
  return MemoryReservation(this, bytes);
}

void MemoryTier::Unreserve(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  bytes_ -= bytes;
  reserved_ -= bytes;
}

void MemoryTier::SendToSink(const std::vector<std::shared_ptr<Entry>>& evicted) {
  if (!on_evict_) return;
  for (const auto& e : evicted) on_evict_(e->key, e->context);
}

void MemoryTier::ReleaseDropped(std::vector<std::shared_ptr<Entry>>& dropped) {
  if (dropped.empty()) return;
  dropped.clear();  // the tier's references: the contexts' tensors are freed unless held elsewhere
  if (allocator_ == nullptr) return;
  // Best effort: a failed trim leaves the bytes in the pool, where later allocations reuse them.
  const bool trimmed = allocator_->TrimMemory().ok();
  std::lock_guard<std::mutex> lock(mutex_);
  ++counters_.trims;
  if (!trimmed) ++counters_.failed_trims;
}

bool MemoryTier::MakeRoomLocked(size_t bytes, std::vector<std::shared_ptr<Entry>>& evicted) {
  size_t evictable = 0;
  for (const auto& e : lru_) {
    if (e->pins == 0) evictable += e->bytes;
  }
  if (bytes > budget_ || bytes_ - evictable + bytes > budget_) return false;
  for (auto it = lru_.begin(); it != lru_.end() && bytes_ + bytes > budget_;) {
    if ((*it)->pins > 0) {
      ++it;
      continue;
    }
    bytes_ -= (*it)->bytes;
    (*it)->resident = (*it)->counted = false;
    index_.erase((*it)->key);
    evicted.push_back(*it);
    it = lru_.erase(it);
    ++counters_.evictions;
  }
  return true;
}

PinnedContext MemoryTier::InsertLocked(const std::string& key,
                                       std::shared_ptr<const EncodedContext> ctx,
                                       std::vector<std::shared_ptr<Entry>>& evicted) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = index_.find(key); it != index_.end()) {
    lru_.splice(lru_.end(), lru_, it->second);
    std::shared_ptr<Entry> entry = *it->second;
    ++entry->pins;
    return PinnedContext(this, std::move(entry));
  }
  auto entry = std::make_shared<Entry>();
  entry->key = key;
  entry->bytes = ContextTensorBytes(*ctx);
  entry->context = std::move(ctx);
  entry->pins = 1;
  // Admit only if evicting unpinned entries can make room; otherwise evict nothing.
  if (!MakeRoomLocked(entry->bytes, evicted)) {
    ++counters_.rejected;
    return PinnedContext(nullptr, std::move(entry));
  }
  entry->resident = entry->counted = true;
  bytes_ += entry->bytes;
  index_[key] = lru_.insert(lru_.end(), entry);
  return PinnedContext(this, std::move(entry));
}

void MemoryTier::Erase(const std::string& key) {
  std::vector<std::shared_ptr<Entry>> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = index_.find(key);
    if (it == index_.end()) return;
    std::shared_ptr<Entry> entry = *it->second;
    lru_.erase(it->second);
    index_.erase(it);
    entry->resident = false;
    if (entry->pins > 0) return;  // its last Unpin drops it (and the pool keeps it until reused)
    bytes_ -= entry->bytes;
    entry->counted = false;
    dropped.push_back(std::move(entry));
  }
  ReleaseDropped(dropped);
}

void MemoryTier::Unpin(Entry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  --entry->pins;
  if (entry->pins == 0 && !entry->resident && entry->counted) {
    bytes_ -= entry->bytes;  // erased while pinned: its memory is released now
    entry->counted = false;
  }
}

bool MemoryTier::Contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return index_.count(key) > 0;
}

MemoryTier::Stats MemoryTier::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s = counters_;
  s.budget_bytes = budget_;
  s.bytes = bytes_;
  s.reserved_bytes = reserved_;
  s.entries = lru_.size();
  for (const auto& e : lru_) s.pinned_entries += e->pins > 0 ? 1 : 0;
  return s;
}

size_t MemoryTier::bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return bytes_;
}

std::vector<std::string> MemoryTier::KeysByRecency() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> keys;
  for (const auto& e : lru_) keys.push_back(e->key);
  return keys;
}

}  // namespace manyshot

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

PinnedContext MemoryTier::Insert(const std::string& key,
                                 std::shared_ptr<const EncodedContext> ctx) {
  std::vector<std::shared_ptr<Entry>> evicted;
  PinnedContext pinned = InsertLocked(key, std::move(ctx), evicted);
  if (on_evict_) {
    for (const auto& e : evicted) on_evict_(e->key, e->context);
  }
  return pinned;
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
  size_t evictable = 0;
  for (const auto& e : lru_) {
    if (e->pins == 0) evictable += e->bytes;
  }
  if (entry->bytes > budget_ || bytes_ - evictable + entry->bytes > budget_) {
    ++counters_.rejected;
    return PinnedContext(nullptr, std::move(entry));
  }
  for (auto it = lru_.begin(); it != lru_.end() && bytes_ + entry->bytes > budget_;) {
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
  entry->resident = entry->counted = true;
  bytes_ += entry->bytes;
  index_[key] = lru_.insert(lru_.end(), entry);
  return PinnedContext(this, std::move(entry));
}

void MemoryTier::Erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return;
  std::shared_ptr<Entry> entry = *it->second;
  lru_.erase(it->second);
  index_.erase(it);
  entry->resident = false;
  if (entry->pins == 0) {
    bytes_ -= entry->bytes;
    entry->counted = false;
  }
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

// The memory tier: encoded contexts held by shared ownership, indexed by cache key, with a byte
// budget and LRU eviction of unpinned entries. A PinnedContext (RAII) keeps its entry from being
// evicted while a batch uses it. The tier never allocates: contexts arrive already allocated by a
// Backend (the encoder's or the loader's), so with a CUDA backend the tier is GPU memory.
//
// Invariant: bytes() <= budget at all times, counting exactly the tensor bytes of every context
// the tier holds (resident entries plus entries erased while still pinned) and every live
// reservation. A context that cannot fit even after evicting every unpinned entry is not
// admitted: its handle owns it alone.
//
// Trimming: the contexts' memory comes from a backend that may keep freed bytes for reuse (the CUDA
// memory pool). Given that backend, the tier calls Backend::TrimMemory after evictions and erases
// drop contexts, so their bytes go back to the device instead of staying in the pool.
//
// A reservation (MemoryReservation, RAII) counts bytes the tier does not hold against the same
// budget: device memory a task keeps between queries outside any context (a T5 task's first-layer
// q|k|v), so that the budget bounds everything the served tasks keep, not the contexts alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/core/backend.h"
#include "engine/task/encoded_context.h"

namespace manyshot {

class MemoryTier;

// Exact bytes of every K/V tensor of `ctx` (allocated rows, so an empty context counts its one
// placeholder row per tensor).
size_t ContextTensorBytes(const EncodedContext& ctx);

// A context pinned for the lifetime of the handle. Move-only; the tier must outlive it.
class PinnedContext {
 public:
  PinnedContext() = default;
  ~PinnedContext() { Release(); }
  PinnedContext(PinnedContext&& other) noexcept { *this = std::move(other); }
  PinnedContext& operator=(PinnedContext&& other) noexcept;
  PinnedContext(const PinnedContext&) = delete;
  PinnedContext& operator=(const PinnedContext&) = delete;

  const EncodedContext* get() const;
  const EncodedContext& operator*() const { return *get(); }
  const EncodedContext* operator->() const { return get(); }
  explicit operator bool() const { return entry_ != nullptr; }
  // False when the context did not fit the memory budget and is owned by this handle alone.
  bool cached() const { return tier_ != nullptr; }
  // Unpins now (the destructor does it otherwise).
  void Release();

 private:
  friend class MemoryTier;
  struct Entry;
  PinnedContext(MemoryTier* tier, std::shared_ptr<Entry> entry)
      : tier_(tier), entry_(std::move(entry)) {}
  MemoryTier* tier_ = nullptr;
  std::shared_ptr<Entry> entry_;
};

// Bytes counted against a tier's budget for the lifetime of the handle. Move-only; the tier must
// outlive it.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  ~MemoryReservation() { Release(); }
  MemoryReservation(MemoryReservation&& other) noexcept { *this = std::move(other); }
  MemoryReservation& operator=(MemoryReservation&& other) noexcept;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;

  size_t bytes() const { return bytes_; }
  void Release();

 private:
  friend class MemoryTier;
  MemoryReservation(MemoryTier* tier, size_t bytes) : tier_(tier), bytes_(bytes) {}
  MemoryTier* tier_ = nullptr;
  size_t bytes_ = 0;
};

class MemoryTier {
 public:
  struct Stats {
    uint64_t budget_bytes = 0;
    uint64_t bytes = 0;  // contexts and reservations
    uint64_t reserved_bytes = 0;
    uint64_t entries = 0;         // resident (erased-but-pinned ones not included)
    uint64_t pinned_entries = 0;  // resident entries with at least one pin
    uint64_t hits = 0;
    uint64_t misses = 0;
    uint64_t evictions = 0;
    uint64_t rejected = 0;  // contexts too big to admit, and reservations refused
    uint64_t trims = 0;     // Backend::TrimMemory calls after entries were dropped
    uint64_t failed_trims = 0;
  };

  // Receives each entry the LRU evicts (not erased ones), after the tier's lock is released.
  using EvictionSink =
      std::function<void(const std::string& key, std::shared_ptr<const EncodedContext> ctx)>;

  // `allocator`, when set, is the backend the contexts' memory comes from (see Trimming); it must
  // outlive the tier.
  explicit MemoryTier(size_t budget_bytes, EvictionSink on_evict = nullptr,
                      Backend* allocator = nullptr)
      : budget_(budget_bytes), on_evict_(std::move(on_evict)), allocator_(allocator) {}
  ~MemoryTier() = default;  // every PinnedContext must be gone by now
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  // The entry for `key`, pinned and marked most recently used; nullopt (a miss) when absent.
  std::optional<PinnedContext> Lookup(const std::string& key);
  // Admits `ctx` under `key` (evicting least recently used unpinned entries to make room) and
  // returns it pinned. When `key` is already resident, that entry is pinned and returned instead.
  PinnedContext Insert(const std::string& key, std::shared_ptr<const EncodedContext> ctx);
  // Counts `bytes` against the budget (evicting least recently used unpinned entries to make
  // room) until the returned handle is released; nullopt when they cannot fit even after evicting
  // every unpinned entry (then nothing is evicted).
  std::optional<MemoryReservation> Reserve(size_t bytes);
  // Drops `key`: now when unpinned, else when its last pin is released (its bytes stay counted
  // until then, since the memory is still in use). No-op when absent.
  void Erase(const std::string& key);
  bool Contains(const std::string& key) const;

  Stats stats() const;
  size_t bytes() const;
  size_t budget() const { return budget_; }
  // Resident keys from least to most recently used (tests, debugging).
  std::vector<std::string> KeysByRecency() const;

 private:
  friend class PinnedContext;
  friend class MemoryReservation;
  using Entry = PinnedContext::Entry;
  void Unpin(Entry* entry);
  void Unreserve(size_t bytes);
  // Evicts least recently used unpinned entries (into `evicted`) until `bytes` more fit; false,
  // evicting nothing, when they cannot fit even after evicting every unpinned entry.
  bool MakeRoomLocked(size_t bytes, std::vector<std::shared_ptr<Entry>>& evicted);
  void SendToSink(const std::vector<std::shared_ptr<Entry>>& evicted);
  // Drops `dropped` (outside the lock) and, when any entry went, trims the allocator's memory.
  void ReleaseDropped(std::vector<std::shared_ptr<Entry>>& dropped);
  PinnedContext InsertLocked(const std::string& key, std::shared_ptr<const EncodedContext> ctx,
                             std::vector<std::shared_ptr<Entry>>& evicted);

  const size_t budget_;
  const EvictionSink on_evict_;
  Backend* const allocator_;
  mutable std::mutex mutex_;
  std::list<std::shared_ptr<Entry>> lru_;  // front: least recently used
  std::unordered_map<std::string, std::list<std::shared_ptr<Entry>>::iterator> index_;
  size_t bytes_ = 0;  // contexts and reservations
  size_t reserved_ = 0;
  Stats counters_;
};

struct PinnedContext::Entry {
  std::string key;
  std::shared_ptr<const EncodedContext> context;
  size_t bytes = 0;
  int pins = 0;
  bool resident = false;  // in the LRU list (false once evicted or erased)
  bool counted = false;   // its bytes are in the tier's total
};

}  // namespace manyshot

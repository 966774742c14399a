// Batch-1 and small-batch query passes as CUDA graphs (as vLLM and FlashInfer serve decode): the
// first pass of a shape is recorded once into tensors of its own (activations, K/V, ids and
// positions), and every later pass of that shape only uploads its ids, positions and logit rows,
// replays the recording in one launch and copies its K/V out to the caller's caches. A shape is
// the context (its tensors: another context, or the same one evicted and encoded again, is
// another shape), the number of sequences, each one's token count rounded up to a bucket, its
// logit-row count and its attention settings.
//
// Padding is exact: a sequence's pad tokens come after its real ones, and attention within a
// sequence is causal, so no real row sees a pad key; the logits of real rows are read alone.
//
// Only passes over empty caches (a query's first pass, its tokens and its prefix) are recorded;
// decode steps and candidate continuations run eagerly. A recording whose context tensors were
// freed is dropped at the next lookup, and at most kMaxGraphs are kept (the least recently used
// goes first), since each holds its activations and K/V for its bucket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/backend.h"
#include "engine/model/model_config.h"
#include "engine/task/context_kv.h"
#include "engine/transformer/model_weights.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

struct ForwardGraphStats {
  size_t graphs = 0;  // recordings held now
  uint64_t captures = 0;
  uint64_t replays = 0;
};

class ForwardGraphs {
 public:
  static constexpr size_t kMaxSequences = 8;
  static constexpr int64_t kMinBucket = 8;  // token buckets: powers of two from here
  static constexpr int64_t kMaxBucket = 256;
  static constexpr size_t kMaxGraphs = 32;

  // `new_cache`: an empty K/V cache of the model with at least that many rows.
  ForwardGraphs(Backend& backend, const ModelConfig& config, const ModelWeights& weights,
                DType compute_dtype, std::function<KvCache(int64_t)> new_cache);
  ~ForwardGraphs();

  // The pass through a recording, or nullopt when this pass is not one recordings serve (or its
  // recording is in use by another thread, or could not be made): the caller runs it eagerly.
  // `sequences` are validated and their caches reserved (FlattenBatch).
  std::optional<absl::StatusOr<ForwardResult>> Forward(absl::Span<const ForwardSequence> sequences,
                                                       const ContextKv* context);

  ForwardGraphStats stats() const;

 private:
  struct Entry;
  bool Serves(absl::Span<const ForwardSequence> sequences, const ContextKv* context) const;
  std::shared_ptr<Entry> Find(const std::string& key, const ContextKv* context,
                              absl::Span<const ForwardSequence> sequences);
  absl::Status Record(Entry& entry, absl::Span<const ForwardSequence> sequences,
                      const ContextKv* context);
  absl::StatusOr<ForwardResult> Replay(Entry& entry, absl::Span<const ForwardSequence> sequences);

  Backend& b_;
  const ModelConfig& c_;
  const ModelWeights& weights_;
  const DType dt_;
  std::function<KvCache(int64_t)> new_cache_;
  mutable std::mutex mutex_;  // guards entries_, clock_ and the counters
  std::unordered_map<std::string, std::shared_ptr<Entry>> entries_;
  uint64_t clock_ = 0;
  uint64_t captures_ = 0;
  uint64_t replays_ = 0;
};

// The token bucket of a sequence of n tokens (n <= kMaxBucket).
int64_t TokenBucket(int64_t n);

}  // namespace manyshot

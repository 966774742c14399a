#include "engine/transformer/forward_graphs.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_traits.h"
#include "engine/transformer/forward_pass.h"

namespace manyshot {

int64_t TokenBucket(int64_t n) {
  return std::max(
      ForwardGraphs::kMinBucket,
      static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(n, 1)))));
}

// One recorded shape: the pass's own tensors, its padded batch and the recording.
struct ForwardGraphs::Entry {
  std::mutex busy;  // held by the thread using the recording's tensors
  // Each sequence's padded tokens and positions (the pass reads their counts), its cache.
  std::vector<std::vector<int32_t>> tokens, positions;
  std::vector<KvCache> caches;
  std::vector<ForwardSequence> sequences;
  FlatBatch batch;  // padded; refilled before every replay
  std::unique_ptr<ForwardPass> pass;
  std::unique_ptr<CapturedWork> graph;
  bool failed = false;            // recording failed: this shape runs eagerly
  std::weak_ptr<Buffer> context;  // the context's memory; expired: the recording is stale
  bool has_context = false;
  uint64_t last_used = 0;
};

ForwardGraphs::ForwardGraphs(Backend& backend, const ModelConfig& config,
                             const ModelWeights& weights, DType compute_dtype,
                             std::function<KvCache(int64_t)> new_cache)
    : b_(backend),
      c_(config),
      weights_(weights),
      dt_(compute_dtype),
      new_cache_(std::move(new_cache)) {}

ForwardGraphs::~ForwardGraphs() = default;

namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The shape a recording is made for: what its ops bake in (addresses, lengths, settings).
std::string ShapeKey(absl::Span<const ForwardSequence> sequences, const ContextKv* context) {
  std::string key;
  if (context != nullptr) {
    absl::StrAppend(&key, "ctx ", context->len, " ", Bits(context->log_weight), ":");
    for (size_t l = 0; l < context->k.size(); ++l) {
      absl::StrAppend(&key, reinterpret_cast<uintptr_t>(context->k[l].raw()), ",",
                      reinterpret_cast<uintptr_t>(context->v[l].raw()), ";");
    }
    if (context->positions.defined()) {
      absl::StrAppend(&key, "pos", reinterpret_cast<uintptr_t>(context->positions.raw()));
    }
  }
  for (const ForwardSequence& s : sequences) {
    absl::StrAppend(&key, "|", TokenBucket(static_cast<int64_t>(s.tokens.size())), " ",
                    s.logit_rows.size(), " ", Bits(s.own_log_weight), " ", s.weighted_from, " ",
                    s.context_from);
  }
  return key;
}

}  // namespace

bool ForwardGraphs::Serves(absl::Span<const ForwardSequence> sequences,
                           const ContextKv* context) const {
  if (sequences.empty() || sequences.size() > kMaxSequences) return false;
  for (const ForwardSequence& s : sequences) {
    const auto n = static_cast<int64_t>(s.tokens.size());
    if (n == 0 || n > kMaxBucket || s.cache == nullptr || s.cache->length() != 0) return false;
  }
  if (context != nullptr && context->len > 0) {
    if (context->k.empty() || !context->k[0].defined()) return false;
    // ALiBi without the context's positions is refused by the eager pass, with its message.
    if (weights_.alibi_slopes.defined() && !context->positions.defined()) return false;
  }
  return true;
}

std::shared_ptr<ForwardGraphs::Entry> ForwardGraphs::Find(
    const std::string& key, const ContextKv* context, absl::Span<const ForwardSequence> sequences) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Recordings over freed contexts can never run again.
  std::erase_if(entries_, [](const auto& kv) {
    return kv.second->has_context && kv.second->context.expired();
  });
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxGraphs) {
      auto oldest = std::min_element(
          entries_.begin(), entries_.end(),
          [](const auto& a, const auto& b) { return a.second->last_used < b.second->last_used; });
      entries_.erase(oldest);  // a thread replaying it keeps it alive until done
    }
    auto entry = std::make_shared<Entry>();
    if (context != nullptr && context->len > 0) {
      entry->context = context->k[0].buffer();
      entry->has_context = true;
    }
    const size_t n = sequences.size();
    entry->tokens.resize(n);
    entry->positions.resize(n);
    for (size_t s = 0; s < n; ++s) {
      const int64_t bucket = TokenBucket(static_cast<int64_t>(sequences[s].tokens.size()));
      entry->tokens[s].assign(static_cast<size_t>(bucket), 0);
      entry->positions[s].assign(static_cast<size_t>(bucket), 0);
      entry->caches.push_back(new_cache_(bucket));
    }
    it = entries_.emplace(key, std::move(entry)).first;
  }
  it->second->last_used = ++clock_;
  return it->second;
}

absl::Status ForwardGraphs::Record(Entry& e, absl::Span<const ForwardSequence> sequences,
                                   const ContextKv* context) {
  const size_t n = e.tokens.size();
  e.sequences.assign(sequences.begin(), sequences.end());  // the attention settings (in the key)
  for (size_t s = 0; s < n; ++s) {
    MANYSHOT_RETURN_IF_ERROR(e.caches[s].Reserve(static_cast<int64_t>(e.tokens[s].size())));
    ForwardSequence& seq = e.sequences[s];
    seq.tokens = e.tokens[s];
    seq.positions = e.positions[s];
    seq.cache = &e.caches[s];
    seq.logit_rows = {};  // the batch holds them
  }
  // The pass keeps `context` only for Enqueue below; the recording keeps its tensors' addresses.
  e.pass = std::make_unique<ForwardPass>(b_, c_, weights_, dt_, e.sequences, e.batch, context);
  MANYSHOT_RETURN_IF_ERROR(e.pass->Allocate());
  MANYSHOT_RETURN_IF_ERROR(b_.Synchronize());
  MANYSHOT_RETURN_IF_ERROR(b_.BeginCapture());
  e.pass->Enqueue();
  absl::StatusOr<std::unique_ptr<CapturedWork>> graph = b_.EndCapture();
  if (!graph.ok()) return graph.status();
  e.graph = *std::move(graph);
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> ForwardGraphs::Replay(Entry& e,
                                                    absl::Span<const ForwardSequence> sequences) {
  e.pass->UploadIndices();
  b_.Replay(*e.graph);
  // The new K/V (and positions) to the caller's caches, which later passes extend.
  for (size_t s = 0; s < sequences.size(); ++s) {
    const auto n = static_cast<int64_t>(sequences[s].tokens.size());
    const KvCache& mine = e.caches[s];
    KvCache& theirs = *sequences[s].cache;
    for (int64_t l = 0; l < mine.layers(); ++l) {
      b_.Copy(mine.k(l).Rows(0, n), theirs.k(l).Rows(0, n));
      b_.Copy(mine.v(l).Rows(0, n), theirs.v(l).Rows(0, n));
    }
    if (mine.positions().defined()) {
      b_.Copy(mine.positions().Rows(0, n), theirs.positions().Rows(0, n));
    }
  }
  ForwardResult result;
  result.vocab_size = c_.vocab_size;
  MANYSHOT_RETURN_IF_ERROR(e.pass->Collect(result));
  for (const ForwardSequence& seq : sequences) {
    seq.cache->Advance(static_cast<int64_t>(seq.tokens.size()));
  }
  return result;
}

std::optional<absl::StatusOr<ForwardResult>> ForwardGraphs::Forward(
    absl::Span<const ForwardSequence> sequences, const ContextKv* context) {
  if (!Serves(sequences, context)) return std::nullopt;
  std::shared_ptr<Entry> entry = Find(ShapeKey(sequences, context), context, sequences);
  std::unique_lock<std::mutex> busy(entry->busy, std::try_to_lock);
  if (!busy.owns_lock() || entry->failed) return std::nullopt;
  // This pass's ids, positions and logit rows, each sequence padded to its bucket (pad tokens
  // repeat its last token and position: valid ids and positions that no real row sees).
  FlatBatch& batch = entry->batch;
  batch.ids.clear();
  batch.positions.clear();
  batch.begins.clear();
  batch.logit_rows.clear();
  for (size_t s = 0; s < sequences.size(); ++s) {
    const ForwardSequence& seq = sequences[s];
    const auto begin = static_cast<int64_t>(batch.ids.size());
    const size_t bucket = entry->tokens[s].size();
    batch.begins.push_back(begin);
    for (size_t i = 0; i < bucket; ++i) {
      const size_t from = std::min(i, seq.tokens.size() - 1);
      batch.ids.push_back(seq.tokens[from]);
      batch.positions.push_back(seq.positions[from]);
    }
    for (int64_t r : seq.logit_rows) batch.logit_rows.push_back(static_cast<int32_t>(begin + r));
  }
  if (entry->graph == nullptr) {
    absl::Status recorded = Record(*entry, sequences, context);
    if (!recorded.ok()) {
      entry->failed = true;  // e.g. out of memory for its tensors: the eager pass says so
      entry->pass.reset();
      entry->caches.clear();
      return std::nullopt;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++captures_;
  }
  absl::StatusOr<ForwardResult> result = Replay(*entry, sequences);
  if (result.ok()) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++replays_;
  }
  return result;
}

ForwardGraphStats ForwardGraphs::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  ForwardGraphStats s;
  for (const auto& [key, entry] : entries_) s.graphs += entry->graph != nullptr ? 1 : 0;
  s.captures = captures_;
  s.replays = replays_;
  return s;
}

}  // namespace manyshot

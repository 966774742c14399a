// A task a ServedModel prepared: what answers its queries, the context it keeps in the KV cache
// (if any), the bytes it keeps in memory besides, and the figures GetTask reports. The server
// wires all of it the same way whatever the model's architecture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/task/cache_key.h"
#include "engine/task/encoded_context.h"
#include "engine/task/served_task.h"

namespace manyshot {

// (groups done, groups total, tokens done) while a context encodes.
using ContextProgress = std::function<void(int64_t, int64_t, int64_t)>;

// A context encoded once and kept in the KV cache between queries (decoder-only tasks).
class CachedContext {
 public:
  virtual ~CachedContext() = default;
  // What determines the context's bytes (engine/task/cache_key.h hashes them).
  virtual CacheKeyInputs KeyInputs(DType kv_dtype, const std::string& sharing_scope) const = 0;
  // Bytes of the context with its K/V stored in `kv_dtype`.
  virtual size_t Bytes(DType kv_dtype) const = 0;
  virtual absl::StatusOr<EncodedContext> Encode(const ContextProgress& progress) const = 0;
  // OK when `context` (restored from the cache) has this task's shape; DATA_LOSS otherwise.
  virtual absl::Status Check(const EncodedContext& context) const = 0;
};

// What a prepared task is, as GetTask reports it; fields a kind has no use for stay 0.
struct TaskFigures {
  uint64_t demonstrations = 0;
  uint64_t groups = 0;  // groups of the cached context, or prompts the encoder reads per query
  uint64_t context_tokens = 0;
  uint32_t group_length = 0;
  std::vector<uint32_t> demonstrations_per_group;
  uint64_t truncated_demonstrations = 0;
  double effective_rescale_factor = 0;
  uint32_t segment_length = 0;
  uint32_t max_query_tokens = 0;
  uint32_t max_answer_tokens = 0;
  std::string cache_holds;  // what the task keeps between queries, when it is not a KV context
};

struct PreparedTask {
  std::shared_ptr<ServedTask> task;
  // Null when the task keeps nothing in the KV tiers (its encoder runs per query).
  std::shared_ptr<CachedContext> context;
  // Bytes the task itself keeps in memory between queries, outside the KV tiers, and what they are
  // (for messages); the server counts them against the memory tier's budget.
  size_t held_bytes = 0;
  std::string held_what;
  TaskFigures figures;
};

}  // namespace manyshot

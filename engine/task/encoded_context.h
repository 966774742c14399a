// A task's encoded context: the K/V every query of a decoder-only task attends to, as the cache
// keeps it between queries and across restarts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/task/context_kv.h"

namespace manyshot {

struct EncodedContext {
  ContextKv kv;              // per layer [tokens, kv_heads, head_dim]
  int64_t groups = 0;        // M
  int64_t group_length = 0;  // L
  int64_t tokens = 0;        // context tokens (== kv.len)
  // Exact bytes of the K/V tensors: 2 * layers * tokens * kv_heads * head_dim * sizeof(kv dtype).
  size_t bytes() const;
};

}  // namespace manyshot

// Content-addressed cache keys (DESIGN.md §3): a 128-bit XXH3 hash, in hex, of a canonical,
// length-prefixed serialization of everything that determines a task's KV bytes. Equal tasks get
// equal keys and share one cache entry; any change in an input gives a different key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/task/task_options.h"

namespace manyshot {

// Bumped whenever the blob layout, the encoding rules or the fingerprints change, so old blobs are
// never reused. 2: model and tokenizer fingerprints are XXH3 (engine/core/stable_hash.h). 3: KV
// payloads in files beside RocksDB (cache/blob_files.h); format 2 blobs are dropped at open.
inline constexpr uint32_t kCacheFormatVersion = 3;

struct CacheKeyInputs {
  uint32_t format_version = kCacheFormatVersion;
  std::string model_fingerprint;
  std::string tokenizer_fingerprint;
  // The demonstrations' token ids in packing order (after the shuffle). Token ids rather than
  // rendered texts: they are exactly what the model sees, so they pin the KV bytes even if the
  // renderer changes; the texts are still covered through the templates and separator below.
  std::vector<std::vector<int32_t>> demonstrations;
  std::string input_template;
  std::string answer_template;
  std::string separator;
  int64_t group_length = 0;  // L
  Alignment alignment = Alignment::kTruncate;
  LongDemonstrationPolicy long_demonstrations = LongDemonstrationPolicy::kReject;
  DType kv_dtype = DType::kF32;  // the storage dtype: a bf16 entry is not an f32 entry
  // Who may share the entry: the tenant, so that one tenant can never tell from timings, stats or
  // freed bytes that another registered the same demonstrations; "" when the server is told to
  // share KV across tenants (--share_kv_across_tenants).
  std::string sharing_scope;
};

// 32 lowercase hex digits of XXH3_128 over the canonical serialization of `inputs`.
std::string ComputeCacheKey(const CacheKeyInputs& inputs);

}  // namespace manyshot

// T5's relative position bias (transformers' T5Attention._relative_position_bucket and
// compute_bias): the signed distance key - query is mapped to one of num_buckets buckets (half of
// them exact small distances, the rest logarithmic up to max_distance; bidirectional in the
// encoder, where the sign takes half the buckets, causal in the decoder, where keys after the
// query share bucket 0), and each bucket has a learned bias per head.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace manyshot {

// The bucket of `relative_position` (key position - query position). Computed in float32 as
// transformers does (log of the distance ratio, truncated), so bucket edges fall where they fall
// there.
int64_t T5RelativePositionBucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                 int64_t max_distance);

struct T5BiasShape {
  int64_t num_buckets = 32;
  int64_t max_distance = 128;
  bool bidirectional = true;  // encoder: true; decoder self-attention: false
  // Decoder self-attention: keys after the query are hidden (-inf), as the causal mask does.
  bool causal = false;
};

// The additive attention bias of queries at positions q_offset .. q_offset + q_len - 1 against
// keys at 0 .. k_len - 1, from `table` [num_buckets, heads] (the checkpoint's
// relative_attention_bias.weight), as AttendBiased's relative_bias: [heads, q_len + k_len - 1],
// entry (h, j - r + q_len - 1) the bias of query row r and key j (it depends on j - r only).
std::vector<float> T5RelativeBias(absl::Span<const float> table, int64_t heads,
                                  const T5BiasShape& shape, int64_t q_offset, int64_t q_len,
                                  int64_t k_len);

}  // namespace manyshot

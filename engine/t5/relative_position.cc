#include "engine/t5/relative_position.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace manyshot {

int64_t T5RelativePositionBucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                 int64_t max_distance) {
  int64_t bucket = 0;
  int64_t distance = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (relative_position > 0) bucket += num_buckets;
    distance = std::llabs(relative_position);
  } else {
    distance = relative_position < 0 ? -relative_position : 0;
  }
  const int64_t max_exact = num_buckets / 2;
  if (distance < max_exact) return bucket + distance;
  // float32 throughout, as torch evaluates log(d / max_exact) / log(max_distance / max_exact)
  // * (num_buckets - max_exact) on a float tensor (the divisor a Python double made float).
  const float log_ratio = std::log(static_cast<float>(distance) / static_cast<float>(max_exact));
  const float log_span = static_cast<float>(
      std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)));
  const float scaled = log_ratio / log_span * static_cast<float>(num_buckets - max_exact);
  const int64_t large = max_exact + static_cast<int64_t>(scaled);
  return bucket + std::min(large, num_buckets - 1);
}

std::vector<float> T5PositionBias(absl::Span<const float> table, int64_t heads,
                                  const T5BiasShape& shape, int64_t q_offset, int64_t q_len,
                                  int64_t k_len) {
  // The bucket depends on key - query only: one lookup per distance, from -(last query) to the
  // last key.
  const int64_t lowest = -(q_offset + q_len - 1);
  std::vector<int64_t> buckets(static_cast<size_t>(std::max<int64_t>(0, k_len - lowest)));
  for (size_t i = 0; i < buckets.size(); ++i) {
    buckets[i] = T5RelativePositionBucket(lowest + static_cast<int64_t>(i), shape.bidirectional,
                                          shape.num_buckets, shape.max_distance);
  }
  std::vector<float> bias(static_cast<size_t>(heads * q_len * k_len));
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t query = q_offset + i;
      float* row = bias.data() + (h * q_len + i) * k_len;
      for (int64_t j = 0; j < k_len; ++j) {
        if (shape.causal && j > query) {
          row[j] = kNegInf;
          continue;
        }
        row[j] = table[buckets[j - query - lowest] * heads + h];
      }
    }
  }
  return bias;
}

}  // namespace manyshot

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

std::vector<float> T5RelativeBias(absl::Span<const float> table, int64_t heads,
                                  const T5BiasShape& shape, int64_t q_offset, int64_t q_len,
                                  int64_t k_len) {
  const int64_t diagonals = std::max<int64_t>(0, q_len + k_len - 1);
  std::vector<float> bias(static_cast<size_t>(heads * diagonals));
  const float kNegInf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < diagonals; ++i) {
    // Key position minus query position on this diagonal (key j, row r: j - r = i - q_len + 1).
    const int64_t distance = i - (q_len - 1) - q_offset;
    if (shape.causal && distance > 0) {
      for (int64_t h = 0; h < heads; ++h) bias[h * diagonals + i] = kNegInf;
      continue;
    }
    const int64_t bucket = T5RelativePositionBucket(distance, shape.bidirectional,
                                                    shape.num_buckets, shape.max_distance);
    for (int64_t h = 0; h < heads; ++h) bias[h * diagonals + i] = table[bucket * heads + h];
  }
  return bias;
}

}  // namespace manyshot

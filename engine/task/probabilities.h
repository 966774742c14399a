// Probabilities from scores, in double, as every task kind computes them.
#pragma once

#include <cstdint>
#include <vector>

namespace manyshot {

// Softmax of values.
std::vector<double> Softmax(const std::vector<double>& values);

// Natural-log softmax of one logits row.
std::vector<double> LogSoftmax(const float* logits, int64_t vocab);

}  // namespace manyshot

#include "engine/task/probabilities.h"

#include <algorithm>
#include <cmath>

namespace manyshot {

std::vector<double> Softmax(const std::vector<double>& values) {
  std::vector<double> out(values.size());
  if (values.empty()) return out;
  double max = *std::max_element(values.begin(), values.end());
  double sum = 0;
  for (size_t i = 0; i < values.size(); ++i) sum += out[i] = std::exp(values[i] - max);
  for (double& v : out) v /= sum;
  return out;
}

std::vector<double> LogSoftmax(const float* logits, int64_t vocab) {
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double lse = max + std::log(sum);
  std::vector<double> out(vocab);
  for (int64_t i = 0; i < vocab; ++i) out[i] = static_cast<double>(logits[i]) - lse;
  return out;
}

}  // namespace manyshot

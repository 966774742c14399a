// What every task kind answers: candidate scores, classifications and multi-choice results, and
// the tokenized queries they are computed from.
#pragma once

#include <cstdint>
#include <vector>

namespace manyshot {

struct CandidateScore {
  double sum_logprob = 0;
  double mean_logprob = 0;
  int64_t tokens = 0;
};

struct QueryWithCandidates {
  std::vector<int32_t> query;                    // q_1..q_T (no bos)
  std::vector<std::vector<int32_t>> candidates;  // each non-empty
  int64_t truncated_tokens = 0;                  // removed from the input to fit its room
};

struct LabelResult {
  CandidateScore score;
  double probability = 0;
  double calibrated_probability = 0;  // == probability when the task does not calibrate
};

struct ClassifyResult {
  std::vector<LabelResult> labels;
  int64_t prediction = 0;      // calibrated when the task calibrates
  int64_t raw_prediction = 0;  // argmax of the mean log-prob
  int64_t input_tokens = 0;
  int64_t truncated_tokens = 0;  // removed from the input to fit max_query_tokens
};

struct ChoiceResult {
  std::vector<CandidateScore> candidates;
  std::vector<double> probabilities;
  int64_t best = 0;
  int64_t truncated_tokens = 0;  // removed from the input to fit max_query_tokens
};

}  // namespace manyshot

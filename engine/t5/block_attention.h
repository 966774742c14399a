// Encoder self-attention given as blocks of (query rows, key rows), each with or without T5's
// relative position bias: what SAICL, FiD, ensemble and group-FiD need (engine/t5/
// prompt_modes.h), and plain full attention over a concatenated prompt as a special case.
//
// A query row attends to the union of the keys of its blocks with ONE softmax over that union:
// every block is one AttendBiased sequence, the blocks of a query range run in successive rounds,
// and each round's (o, lse) is merged into the first with Backend::MergeStates, which is exact.
// Why states and not one call per query range: AttendBiased reads one contiguous key range per
// sequence, and a SAICL demonstration's keys (its segment and the test segment) are not
// contiguous in the batch; merging two states costs O(rows x d) and copies no keys.
// Nothing of size [T, T] is built: the work and memory are those of the blocks (for SAICL,
// linear in the number of demonstrations), and a bias is the diagonal form of T5RelativeBias.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/t5/t5_model.h"

namespace manyshot {

struct T5AttentionBlock {
  int64_t q_begin = 0, q_len = 0;  // query rows of the encoder batch
  int64_t k_begin = 0, k_len = 0;  // key rows of the encoder batch
  // With position_bias: T5's bidirectional relative bias, the first query row being at position
  // query_position when the first key is at position 0 (so key j and query r are j - r -
  // query_position apart). Without: no bias (SAICL's links between segments).
  bool position_bias = false;
  int64_t query_position = 0;
};

class T5BlockAttention : public T5EncoderAttention {
 public:
  // Checks the blocks against a batch of `rows` rows: inside it, non-empty, and query ranges
  // that are either the same or disjoint (a row's blocks share its range). Rows in no block see
  // no key (o = 0). Uploads the biases and allocates the merge state once, for every layer.
  static absl::StatusOr<std::unique_ptr<T5BlockAttention>> Create(
      const T5Model& model, int64_t rows, std::vector<T5AttentionBlock> blocks);

  absl::Status Attend(const Tensor& q, const Tensor& k, const Tensor& v,
                      const AttentionState& out) const override;

  // How many AttendBiased calls each layer makes (the most blocks any query range has).
  int64_t rounds() const { return static_cast<int64_t>(rounds_.size()); }

  // Blocks by (first query row, query rows), in the order given within a range.
  using BlocksByRange = std::map<std::pair<int64_t, int64_t>, std::vector<T5AttentionBlock>>;

 private:
  struct Sequence {  // one AttendBiased sequence of a round; k_len 0 fills rows a round skips
    int64_t q_begin, q_len, k_begin, k_len;
    const Tensor* relative_bias;
  };
  explicit T5BlockAttention(Backend& backend) : backend_(&backend) {}
  // Query ranges in row order covering every row: a range of blocks, or rows between ranges that
  // get empty sequences in every round (blocks == nullptr).
  struct QueryRange {
    int64_t begin, end;
    const std::vector<T5AttentionBlock>* blocks;
  };
  // INVALID_ARGUMENT when two query ranges overlap.
  static absl::StatusOr<std::vector<QueryRange>> CoverRows(int64_t rows,
                                                           const BlocksByRange& by_range);
  // Create's steps: one round per block of the busiest query range (ranges with fewer blocks, and
  // rows in no range, get empty sequences), each block's bias uploaded once per shape, and the
  // state later rounds write before they are merged into the first.
  absl::Status BuildRounds(const T5Model& model, const std::vector<QueryRange>& ranges);
  absl::StatusOr<const Tensor*> UploadBias(const T5Model& model, const T5AttentionBlock& block);
  absl::Status AllocateMergeScratch(const T5Model& model);

  Backend* backend_;
  int64_t rows_ = 0;
  std::vector<std::vector<Sequence>> rounds_;
  std::vector<std::unique_ptr<Tensor>> biases_;  // stable addresses for relative_bias
  // Uploaded biases by (q_len, k_len, query_position).
  std::map<std::tuple<int64_t, int64_t, int64_t>, const Tensor*> bias_by_shape_;
  AttentionState scratch_;  // rounds after the first, before the merge
};

}  // namespace manyshot

#include "engine/t5/block_attention.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/t5/relative_position.h"

namespace manyshot {

namespace {

using BlocksByRange = T5BlockAttention::BlocksByRange;

// Blocks by (first query row, query rows), in the order given within a range; INVALID_ARGUMENT
// names a block that is empty or outside the batch.
absl::StatusOr<BlocksByRange> GroupByQueryRange(int64_t rows,
                                                const std::vector<T5AttentionBlock>& blocks) {
  BlocksByRange by_range;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const T5AttentionBlock& b = blocks[i];
    if (b.q_len <= 0 || b.k_len <= 0 || b.q_begin < 0 || b.k_begin < 0 ||
        b.q_begin + b.q_len > rows || b.k_begin + b.k_len > rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("attention block ", i, " (queries [", b.q_begin, ", ", b.q_begin + b.q_len,
                       "), keys [", b.k_begin, ", ", b.k_begin + b.k_len,
                       ")) is empty or outside the batch's ", rows, " rows"));
    }
    by_range[{b.q_begin, b.q_len}].push_back(b);
  }
  return by_range;
}

}  // namespace

absl::StatusOr<std::vector<T5BlockAttention::QueryRange>> T5BlockAttention::CoverRows(
    int64_t rows, const BlocksByRange& by_range) {
  std::vector<QueryRange> ranges;
  int64_t next = 0;
  for (const auto& [range, list] : by_range) {
    if (range.first < next) {
      return absl::InvalidArgumentError(absl::StrCat("attention blocks with query rows [",
                                                     range.first, ", ", range.first + range.second,
                                                     ") overlap another query range"));
    }
    if (range.first > next) ranges.push_back({next, range.first, nullptr});
    ranges.push_back({range.first, range.first + range.second, &list});
    next = range.first + range.second;
  }
  if (next < rows) ranges.push_back({next, rows, nullptr});
  return ranges;
}

absl::StatusOr<std::unique_ptr<T5BlockAttention>> T5BlockAttention::Create(
    const T5Model& model, int64_t rows, std::vector<T5AttentionBlock> blocks) {
  if (rows <= 0) return absl::InvalidArgumentError("block attention over an empty batch");
  if (blocks.empty()) return absl::InvalidArgumentError("block attention without blocks");
  BlocksByRange by_range;
  MANYSHOT_ASSIGN_OR_RETURN(by_range, GroupByQueryRange(rows, blocks));
  std::vector<QueryRange> ranges;
  MANYSHOT_ASSIGN_OR_RETURN(ranges, CoverRows(rows, by_range));
  std::unique_ptr<T5BlockAttention> attention(new T5BlockAttention(model.backend()));
  attention->rows_ = rows;
  MANYSHOT_RETURN_IF_ERROR(attention->BuildRounds(model, ranges));
  if (attention->rounds_.size() > 1) {
    MANYSHOT_RETURN_IF_ERROR(attention->AllocateMergeScratch(model));
  }
  MANYSHOT_RETURN_IF_ERROR(model.backend().Synchronize());
  return attention;
}

absl::Status T5BlockAttention::BuildRounds(const T5Model& model,
                                           const std::vector<QueryRange>& ranges) {
  size_t most = 0;
  for (const QueryRange& range : ranges) {
    if (range.blocks != nullptr) most = std::max(most, range.blocks->size());
  }
  rounds_.resize(most);
  for (size_t r = 0; r < most; ++r) {
    for (const QueryRange& range : ranges) {
      if (range.blocks == nullptr || r >= range.blocks->size()) {
        rounds_[r].push_back({range.begin, range.end - range.begin, 0, 0, nullptr});
        continue;
      }
      const T5AttentionBlock& b = (*range.blocks)[r];
      const Tensor* bias = nullptr;
      if (b.position_bias) MANYSHOT_ASSIGN_OR_RETURN(bias, UploadBias(model, b));
      rounds_[r].push_back({b.q_begin, b.q_len, b.k_begin, b.k_len, bias});
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const Tensor*> T5BlockAttention::UploadBias(const T5Model& model,
                                                           const T5AttentionBlock& b) {
  // Blocks of one shape and query position share a bias (segments of one length, say).
  const auto key = std::make_tuple(b.q_len, b.k_len, b.query_position);
  if (auto it = bias_by_shape_.find(key); it != bias_by_shape_.end()) return it->second;
  const T5Config& c = model.config();
  const T5BiasShape shape{c.relative_attention_num_buckets, c.relative_attention_max_distance,
                          /*bidirectional=*/true, /*causal=*/false};
  const std::vector<float> host = T5RelativeBias(model.encoder_bias_table(), c.num_heads, shape,
                                                 b.query_position, b.q_len, b.k_len);
  auto t = backend_->Allocate(DType::kF32, {c.num_heads, b.q_len + b.k_len - 1});
  if (!t.ok()) return t.status();
  backend_->CopyFromHost(host.data(), *t);
  biases_.push_back(std::make_unique<Tensor>(*std::move(t)));
  return bias_by_shape_[key] = biases_.back().get();
}

absl::Status T5BlockAttention::AllocateMergeScratch(const T5Model& model) {
  const T5Config& c = model.config();
  auto o = backend_->Allocate(model.compute_dtype(), {rows_, c.num_heads, c.d_kv});
  if (!o.ok()) return o.status();
  auto lse = backend_->Allocate(DType::kF32, {rows_, c.num_heads});
  if (!lse.ok()) return lse.status();
  scratch_ = {*std::move(o), *std::move(lse)};
  return absl::OkStatus();
}

absl::Status T5BlockAttention::Attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const AttentionState& out) const {
  if (q.rank() != 3 || q.dim(0) != rows_) {
    return absl::InvalidArgumentError(absl::StrCat("block attention built for ", rows_,
                                                   " rows was given queries ", q.ShapeString()));
  }
  for (size_t r = 0; r < rounds_.size(); ++r) {
    const std::vector<Sequence>& round = rounds_[r];
    std::vector<Tensor> ks, vs;  // views of each sequence's key rows, alive for the call
    ks.reserve(round.size());
    vs.reserve(round.size());
    std::vector<BiasedAttentionSequence> seqs;
    for (const Sequence& s : round) {
      ks.push_back(k.Rows(s.k_begin, s.k_begin + s.k_len));
      vs.push_back(v.Rows(s.k_begin, s.k_begin + s.k_len));
      BiasedAttentionSequence seq;
      seq.q_begin = s.q_begin;
      seq.q_len = s.q_len;
      seq.k = &ks.back();
      seq.v = &vs.back();
      seq.kv_len = s.k_len;
      seq.relative_bias = s.relative_bias;
      seqs.push_back(seq);
    }
    // T5 has no 1/sqrt(d_kv). The first round writes the state, later ones merge into it.
    backend_->AttendBiased(q, seqs, /*scale=*/1.0f, r == 0 ? out : scratch_);
    if (r > 0) backend_->MergeStates(out, scratch_, /*other_log_weight=*/0.0f);
  }
  return absl::OkStatus();
}

}  // namespace manyshot

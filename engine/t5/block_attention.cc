#include "engine/t5/block_attention.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/t5/relative_position.h"

namespace manyshot {

absl::StatusOr<std::unique_ptr<T5BlockAttention>> T5BlockAttention::Create(
    const T5Model& model, int64_t rows, std::vector<T5AttentionBlock> blocks) {
  if (rows <= 0) return absl::InvalidArgumentError("block attention over an empty batch");
  if (blocks.empty()) return absl::InvalidArgumentError("block attention without blocks");
  // Blocks by query range, in the order given within a range.
  std::map<std::pair<int64_t, int64_t>, std::vector<T5AttentionBlock>> by_range;
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
  std::unique_ptr<T5BlockAttention> attention(new T5BlockAttention(model.backend()));
  attention->rows_ = rows;
  // Query ranges in row order; the rows between them get empty sequences in every round.
  std::vector<std::pair<int64_t, int64_t>> ranges;  // [begin, end), blocks index or -1
  std::vector<const std::vector<T5AttentionBlock>*> range_blocks;
  int64_t next = 0;
  size_t most = 0;
  for (const auto& [range, list] : by_range) {
    if (range.first < next) {
      return absl::InvalidArgumentError(absl::StrCat("attention blocks with query rows [",
                                                     range.first, ", ", range.first + range.second,
                                                     ") overlap another query range"));
    }
    if (range.first > next) {
      ranges.emplace_back(next, range.first);
      range_blocks.push_back(nullptr);
    }
    ranges.emplace_back(range.first, range.first + range.second);
    range_blocks.push_back(&list);
    next = range.first + range.second;
    most = std::max(most, list.size());
  }
  if (next < rows) {
    ranges.emplace_back(next, rows);
    range_blocks.push_back(nullptr);
  }
  const T5Config& c = model.config();
  const T5BiasShape shape{c.relative_attention_num_buckets, c.relative_attention_max_distance,
                          /*bidirectional=*/true, /*causal=*/false};
  Backend& backend = model.backend();
  // One bias per distinct (q_len, k_len, query_position): segments of one length share it.
  std::map<std::tuple<int64_t, int64_t, int64_t>, const Tensor*> uploaded;
  auto bias_for = [&](const T5AttentionBlock& b) -> absl::StatusOr<const Tensor*> {
    const auto key = std::make_tuple(b.q_len, b.k_len, b.query_position);
    if (auto it = uploaded.find(key); it != uploaded.end()) return it->second;
    const std::vector<float> host = T5RelativeBias(model.encoder_bias_table(), c.num_heads, shape,
                                                   b.query_position, b.q_len, b.k_len);
    auto t = backend.Allocate(DType::kF32, {c.num_heads, b.q_len + b.k_len - 1});
    if (!t.ok()) return t.status();
    backend.CopyFromHost(host.data(), *t);
    attention->biases_.push_back(std::make_unique<Tensor>(*std::move(t)));
    return uploaded[key] = attention->biases_.back().get();
  };
  attention->rounds_.resize(most);
  for (size_t r = 0; r < most; ++r) {
    for (size_t i = 0; i < ranges.size(); ++i) {
      const auto [begin, end] = ranges[i];
      const std::vector<T5AttentionBlock>* list = range_blocks[i];
      if (list == nullptr || r >= list->size()) {
        attention->rounds_[r].push_back({begin, end - begin, 0, 0, nullptr});
        continue;
      }
      const T5AttentionBlock& b = (*list)[r];
      const Tensor* bias = nullptr;
      if (b.position_bias) {
        auto got = bias_for(b);
        if (!got.ok()) return got.status();
        bias = *got;
      }
      attention->rounds_[r].push_back({b.q_begin, b.q_len, b.k_begin, b.k_len, bias});
    }
  }
  if (most > 1) {
    auto o = backend.Allocate(model.compute_dtype(), {rows, c.num_heads, c.d_kv});
    if (!o.ok()) return o.status();
    auto lse = backend.Allocate(DType::kF32, {rows, c.num_heads});
    if (!lse.ok()) return lse.status();
    attention->scratch_ = {*std::move(o), *std::move(lse)};
  }
  auto status = backend.Synchronize();
  if (!status.ok()) return status;
  return attention;
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

// AttendBiased on the CPU: softmax(scale * q.k + bias) v for each sequence, head and block of
// query rows, with the block's whole score rows in memory (one GEMM for the scores, one for the
// output). The bias is arbitrary per (head, query, key), so the rows cannot be tiled over keys
// the way cpu_attention.cc's causal rule allows without re-reading it; a block of rows keeps its
// scores below kScoreBudget floats.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_util.h"
#include "engine/cpu/vector_math.h"

namespace manyshot {
namespace {

using cpu_internal::RequireF32;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int64_t kMaxRowBlock = 128;
constexpr int64_t kScoreBudget = int64_t{1} << 21;  // floats of scores per thread (8 MiB)

// One score row (plus its bias row, when there is one) into unnormalised probabilities
// exp(s - max), in two passes; returns the row's sum of them and sets its log-sum-exp. A row that
// sees no key (all -inf) becomes zeros with sum 0 and lse -inf. The caller divides the output by
// the sum (dim values) rather than the probabilities (kv_len values).
float ExpRow(float* s, const float* bias, int64_t n, float& lse) {
  float max = kNegInf;
  if (bias != nullptr) {
    for (int64_t j = 0; j < n; ++j) {
      s[j] += bias[j];
      max = std::max(max, s[j]);
    }
  } else {
    for (int64_t j = 0; j < n; ++j) max = std::max(max, s[j]);
  }
  if (max == kNegInf) {
    std::fill(s, s + n, 0.0f);
    lse = kNegInf;
    return 0.0f;
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = vmath::Exp(s[j] - max);
    sum += s[j];
  }
  lse = max + std::log(sum);
  return sum;
}

}  // namespace

absl::Status CpuBackend::AttendBiasedImpl(const Tensor& q,
                                          absl::Span<const BiasedAttentionSequence> sequences,
                                          float scale, const AttentionState& out) {
  if (auto st = RequireF32("AttendBiased", {&q}); !st.ok()) return st;
  const int64_t heads = q.dim(1);
  const int64_t dim = q.dim(2);
  const int64_t q_ld = heads * dim;
  // K/V as f32: in place when stored so, else widened once per call (the CPU computes in f32).
  std::vector<const float*> ks(sequences.size()), vs(sequences.size());
  std::vector<Tensor> widened;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const BiasedAttentionSequence& seq = sequences[s];
    if (seq.k->dtype() == DType::kF32) {
      ks[s] = seq.k->data<float>();
      vs[s] = seq.v->data<float>();
      continue;
    }
    for (const Tensor* t : {seq.k, seq.v}) {
      auto wide = AllocateImpl(DType::kF32, {seq.kv_len, t->dim(1), t->dim(2)});
      if (!wide.ok()) return wide.status();
      if (seq.kv_len > 0) {
        if (auto st = ConvertImpl(t->Rows(0, seq.kv_len), *wide); !st.ok()) return st;
      }
      widened.push_back(*std::move(wide));
    }
    ks[s] = widened[widened.size() - 2].data<float>();
    vs[s] = widened.back().data<float>();
  }
  struct Item {
    int64_t seq, head, r0, r1;
  };
  std::vector<Item> items;
  for (int64_t s = 0; s < static_cast<int64_t>(sequences.size()); ++s) {
    const BiasedAttentionSequence& seq = sequences[s];
    const int64_t block =
        std::clamp<int64_t>(kScoreBudget / std::max<int64_t>(1, seq.kv_len), 1, kMaxRowBlock);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r0 = 0; r0 < seq.q_len; r0 += block) {
        items.push_back({s, h, r0, std::min(seq.q_len, r0 + block)});
      }
    }
  }
  const float* qp = q.data<float>();
  float* op = out.o.data<float>();
  float* lp = out.lse.data<float>();
  std::vector<std::vector<float>> scratch(pool_->size());
  pool_->ParallelForEach(static_cast<int64_t>(items.size()), [&](int64_t i, int thread) {
    const Item& it = items[i];
    const BiasedAttentionSequence& seq = sequences[it.seq];
    const int64_t rows = it.r1 - it.r0;
    const int64_t n = seq.kv_len;
    const int64_t kv_heads = seq.k->dim(1);
    const int64_t kv_ld = kv_heads * dim;
    const int64_t kv_head = it.head / (heads / kv_heads);
    const int64_t row0 = seq.q_begin + it.r0;
    float* o = op + row0 * q_ld + it.head * dim;
    float* lse = lp + row0 * heads + it.head;
    if (n == 0) {
      for (int64_t r = 0; r < rows; ++r) {
        std::fill(o + r * q_ld, o + r * q_ld + dim, 0.0f);
        lse[r * heads] = kNegInf;
      }
      return;
    }
    std::vector<float>& s = scratch[thread];
    s.resize(static_cast<size_t>(rows * n));
    const float* k = ks[it.seq] + kv_head * dim;
    const float* v = vs[it.seq] + kv_head * dim;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                static_cast<int>(n), static_cast<int>(dim), scale, qp + row0 * q_ld + it.head * dim,
                static_cast<int>(q_ld), k, static_cast<int>(kv_ld), 0.0f, s.data(),
                static_cast<int>(n));
    float sums[kMaxRowBlock];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t row = it.r0 + r;  // within the sequence
      const float* br = nullptr;
      if (seq.bias != nullptr) {
        br = seq.bias->data<float>() + (it.head * seq.q_len + row) * n;
      } else if (seq.relative_bias != nullptr) {  // row r's keys are diagonals q_len-1-r, ...
        br = seq.relative_bias->data<float>() + it.head * (seq.q_len + n - 1) +
             (seq.q_len - 1 - row);
      }
      sums[r] = ExpRow(s.data() + r * n, br, n, lse[r * heads]);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                static_cast<int>(dim), static_cast<int>(n), 1.0f, s.data(), static_cast<int>(n), v,
                static_cast<int>(kv_ld), 0.0f, o, static_cast<int>(q_ld));
    for (int64_t r = 0; r < rows; ++r) {
      const float inv = sums[r] == 0.0f ? 0.0f : 1.0f / sums[r];
      for (int64_t d = 0; d < dim; ++d) o[r * q_ld + d] *= inv;
    }
  });
  return absl::OkStatus();
}

}  // namespace manyshot

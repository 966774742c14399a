// CPU attention: exact softmax attention computed tile by tile with an online (running max / sum)
// softmax, so the score matrix never exceeds one tile. A call has two parts that are merged by
// their log-sum-exp (DESIGN.md §1.7):
//   context: every query row of the call against the shared context keys, one GEMM per head and
//            tile for all rows at once (the context KV is read once per call);
//   own:     each sequence's rows against its own keys, causally, with ln(weight) added to the
//            logits of keys at index >= weighted_from.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/vector_math.h"

namespace manyshot {
namespace {

constexpr int64_t kRowBlock = 128;
constexpr int64_t kKeyTile = 512;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Running state of an online softmax over key tiles for a block of rows.
struct OnlineSoftmax {
  std::vector<float> o;    // [rows, dim] unnormalised output
  std::vector<float> max;  // running max of the logits per row
  std::vector<float> sum;  // running sum of exp(logit - max) per row
  std::vector<float> scores;
  void Reset(int64_t rows, int64_t dim) {
    o.assign(rows * dim, 0.0f);
    max.assign(rows, kNegInf);
    sum.assign(rows, 0.0f);
    scores.resize(rows * kKeyTile);
  }
};

// Which keys row r may see, and their extra log-weights: key j is visible when j < limit[r];
// keys j >= weighted_from get +log_weight.
struct KeyRule {
  const int64_t* limit = nullptr;  // per row; nullptr = all keys
  int64_t weighted_from = std::numeric_limits<int64_t>::max();
  float log_weight = 0.0f;
};

// Attends `rows` query rows (q, row stride q_ld) to keys [0, nkeys) of k/v (row stride kv_ld).
void AttendTiles(const float* q, int64_t q_ld, int64_t rows, const float* k, const float* v,
                 int64_t kv_ld, int64_t nkeys, int64_t dim, float scale, const KeyRule& rule,
                 OnlineSoftmax& state) {
  for (int64_t j0 = 0; j0 < nkeys; j0 += kKeyTile) {
    const int64_t tile = std::min(kKeyTile, nkeys - j0);
    float* s = state.scores.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
                static_cast<int>(tile), static_cast<int>(dim), scale, q, static_cast<int>(q_ld),
                k + j0 * kv_ld, static_cast<int>(kv_ld), 0.0f, s, static_cast<int>(tile));
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s + r * tile;
      const int64_t visible = rule.limit ? std::clamp<int64_t>(rule.limit[r] - j0, 0, tile) : tile;
      for (int64_t j = visible; j < tile; ++j) sr[j] = kNegInf;
      const int64_t wfrom = std::clamp<int64_t>(rule.weighted_from - j0, 0, visible);
      if (rule.log_weight != 0.0f) {
        for (int64_t j = wfrom; j < visible; ++j) sr[j] += rule.log_weight;
      }
      float tile_max = kNegInf;
      for (int64_t j = 0; j < visible; ++j) tile_max = std::max(tile_max, sr[j]);
      const float new_max = std::max(state.max[r], tile_max);
      if (new_max == kNegInf) {  // nothing visible yet for this row
        for (int64_t j = 0; j < tile; ++j) sr[j] = 0.0f;
        continue;
      }
      const float correction = vmath::Exp(state.max[r] - new_max);
      float tile_sum = 0.0f;
      for (int64_t j = 0; j < tile; ++j) {
        float p = vmath::Exp(sr[j] - new_max);
        sr[j] = p;
        tile_sum += p;
      }
      state.sum[r] = state.sum[r] * correction + tile_sum;
      state.max[r] = new_max;
      float* orow = state.o.data() + r * dim;
      if (correction != 1.0f) {
        for (int64_t d = 0; d < dim; ++d) orow[d] *= correction;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
                static_cast<int>(dim), static_cast<int>(tile), 1.0f, s, static_cast<int>(tile),
                v + j0 * kv_ld, static_cast<int>(kv_ld), 1.0f, state.o.data(),
                static_cast<int>(dim));
  }
}

// Normalises a block's state into out rows (stride out_ld) and lse values (stride lse_ld).
void Finish(const OnlineSoftmax& state, int64_t rows, int64_t dim, float* out, int64_t out_ld,
            float* lse, int64_t lse_ld) {
  for (int64_t r = 0; r < rows; ++r) {
    float* orow = out + r * out_ld;
    if (state.sum[r] == 0.0f) {
      for (int64_t d = 0; d < dim; ++d) orow[d] = 0.0f;
      lse[r * lse_ld] = kNegInf;
      continue;
    }
    const float inv = 1.0f / state.sum[r];
    const float* src = state.o.data() + r * dim;
    for (int64_t d = 0; d < dim; ++d) orow[d] = src[d] * inv;
    lse[r * lse_ld] = state.max[r] + std::log(state.sum[r]);
  }
}

}  // namespace

void CpuBackend::Attention(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                           const AttentionContext* context, float scale, const Tensor& out,
                           const Tensor& lse) {
  const int64_t tokens = q.dim(0);
  const int64_t heads = q.dim(1);
  const int64_t dim = q.dim(2);
  const int64_t q_ld = heads * dim;
  const float* qp = q.data<float>();
  float* op = out.data<float>();

  // Own part: written straight into out / own_lse.
  std::vector<float> own_lse(tokens * heads, kNegInf);
  struct Item {
    int64_t seq, head, r0, r1;
  };
  std::vector<Item> items;
  for (int64_t s = 0; s < static_cast<int64_t>(sequences.size()); ++s) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r0 = 0; r0 < sequences[s].q_len; r0 += kRowBlock) {
        items.push_back({s, h, r0, std::min(sequences[s].q_len, r0 + kRowBlock)});
      }
    }
  }
  std::vector<OnlineSoftmax> states(pool_->size());
  pool_->ParallelForEach(static_cast<int64_t>(items.size()), [&](int64_t i, int thread) {
    const Item& it = items[i];
    const AttentionSequence& seq = sequences[it.seq];
    const int64_t kv_heads = seq.k->dim(1);
    const int64_t group = heads / kv_heads;
    const int64_t kv_ld = kv_heads * dim;
    const int64_t kv_head = it.head / group;
    const int64_t base = seq.kv_len - seq.q_len;  // own index of query row 0
    const int64_t rows = it.r1 - it.r0;
    int64_t limits[kRowBlock];
    for (int64_t r = 0; r < rows; ++r) limits[r] = base + it.r0 + r + 1;
    KeyRule rule;
    rule.limit = limits;
    rule.weighted_from = seq.weighted_from;
    rule.log_weight = seq.own_log_weight;
    OnlineSoftmax& state = states[thread];
    state.Reset(rows, dim);
    const int64_t row0 = seq.q_begin + it.r0;
    AttendTiles(qp + row0 * q_ld + it.head * dim, q_ld, rows, seq.k->data<float>() + kv_head * dim,
                seq.v->data<float>() + kv_head * dim, kv_ld, base + it.r1, dim, scale, rule, state);
    Finish(state, rows, dim, op + row0 * q_ld + it.head * dim, q_ld,
           own_lse.data() + row0 * heads + it.head, heads);
  });

  if (context != nullptr && context->len > 0) {
    // Rows that see the context, gathered so every GEMM row is useful.
    std::vector<int64_t> rows_seeing;
    for (const auto& seq : sequences) {
      const int64_t base = seq.kv_len - seq.q_len;
      for (int64_t r = 0; r < seq.q_len; ++r) {
        if (base + r >= seq.context_from) rows_seeing.push_back(seq.q_begin + r);
      }
    }
    const int64_t n = static_cast<int64_t>(rows_seeing.size());
    const int64_t kv_heads = context->k->dim(1);
    const int64_t group = heads / kv_heads;
    const int64_t kv_ld = kv_heads * dim;
    // Gathered queries [n, heads, dim] (contiguous), context outputs and lse.
    std::vector<float> gq(n * q_ld), co(n * q_ld), clse(n * heads);
    for (int64_t i = 0; i < n; ++i) {
      std::copy(qp + rows_seeing[i] * q_ld, qp + (rows_seeing[i] + 1) * q_ld, gq.data() + i * q_ld);
    }
    std::vector<Item> citems;
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t r0 = 0; r0 < n; r0 += kRowBlock) {
        citems.push_back({0, h, r0, std::min(n, r0 + kRowBlock)});
      }
    }
    pool_->ParallelForEach(static_cast<int64_t>(citems.size()), [&](int64_t i, int thread) {
      const Item& it = citems[i];
      const int64_t rows = it.r1 - it.r0;
      OnlineSoftmax& state = states[thread];
      state.Reset(rows, dim);
      KeyRule rule;
      AttendTiles(gq.data() + it.r0 * q_ld + it.head * dim, q_ld, rows,
                  context->k->data<float>() + (it.head / group) * dim,
                  context->v->data<float>() + (it.head / group) * dim, kv_ld, context->len, dim,
                  scale, rule, state);
      Finish(state, rows, dim, co.data() + it.r0 * q_ld + it.head * dim, q_ld,
             clse.data() + it.r0 * heads + it.head, heads);
    });
    // Merge: the context's weight enters as an additive log-weight on its lse.
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = rows_seeing[i];
      for (int64_t h = 0; h < heads; ++h) {
        const float lc = clse[i * heads + h] + context->log_weight;
        float& ls = own_lse[row * heads + h];
        const float m = std::max(lc, ls);
        if (m == kNegInf) continue;
        const float wc = std::exp(lc - m);
        const float ws = std::exp(ls - m);
        const float total = wc + ws;
        float* o = op + row * q_ld + h * dim;
        const float* oc = co.data() + i * q_ld + h * dim;
        for (int64_t d = 0; d < dim; ++d) o[d] = (wc * oc[d] + ws * o[d]) / total;
        ls = m + std::log(total);
      }
    }
  }
  if (lse.defined()) std::copy(own_lse.begin(), own_lse.end(), lse.data<float>());
}

}  // namespace manyshot

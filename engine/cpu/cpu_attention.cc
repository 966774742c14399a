// CPU attention: exact softmax attention computed tile by tile with an online (running max / sum)
// softmax, so the score matrix never exceeds one tile. A call has two parts that are merged by
// their log-sum-exp (DESIGN.md §1.7):
//   context: every query row of the call against the shared context keys, read once per call:
//            for head dimensions in multiples of 16 the register-tiled kernels of
//            cpu_context_kernel.h (all heads sharing a kv head together), else one GEMM per head
//            and tile for all rows at once;
//   own:     each sequence's rows against its own keys, causally, with ln(weight) added to the
//            logits of keys at index >= weighted_from; a decode row (one new token) with the
//            split-K kernel of cpu_decode_attention.h.
// Both add ALiBi's slope * (key position - query position) when the sequences carry slopes, which
// only the tiled path here does. Soft-capped logits (Gemma 2) take the same kernels as the others:
// the Highway kernels instantiate the cap as a policy, the tiled path caps each tile's scores.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_context_kernel.h"
#include "engine/cpu/cpu_decode_attention.h"
#include "engine/cpu/cpu_soft_cap.h"
#include "engine/cpu/cpu_util.h"
#include "engine/cpu/vector_math.h"

namespace manyshot {
namespace {

using cpu_internal::ParallelRows;
using cpu_internal::RequireF32;

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
    scores.resize(std::min(rows, kRowBlock) * kKeyTile);
  }
};

// Which keys row r may see, and their extra log-weights: key j is visible when j < limit[r];
// keys j >= weighted_from get +log_weight; with ALiBi (key_pos set) every visible key gets
// slope * (key_pos[j] - query_pos[r]).
struct KeyRule {
  const int64_t* limit = nullptr;  // per row; nullptr = all keys
  int64_t weighted_from = std::numeric_limits<int64_t>::max();
  float log_weight = 0.0f;
  const int32_t* key_pos = nullptr;    // by key index; nullptr = no ALiBi
  const int32_t* query_pos = nullptr;  // by row of the AttendTile call
  float slope = 0.0f;
  float softcap = 0.0f;  // > 0: scaled logits become softcap * tanh(logit / softcap) first
};

// The ALiBi slope of `head`, or 0 without ALiBi.
float AlibiSlope(const AttentionSequence& seq, int64_t head) {
  return seq.alibi_slopes ? seq.alibi_slopes->data<float>()[head] : 0.0f;
}

// Folds one key tile (keys j0 .. j0+tile of k/v, row stride kv_ld) into the online softmax of
// `rows` query rows (q, row stride q_ld). `state.max/sum/o` rows start at `state_row`.
void AttendTile(const float* q, int64_t q_ld, int64_t rows, const float* k, const float* v,
                int64_t kv_ld, int64_t j0, int64_t tile, int64_t dim, float scale,
                const KeyRule& rule, OnlineSoftmax& state, int64_t state_row) {
  float* s = state.scores.data();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows),
              static_cast<int>(tile), static_cast<int>(dim), scale, q, static_cast<int>(q_ld), k,
              static_cast<int>(kv_ld), 0.0f, s, static_cast<int>(tile));
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = s + r * tile;
    const int64_t visible = rule.limit ? std::clamp<int64_t>(rule.limit[r] - j0, 0, tile) : tile;
    if (rule.softcap > 0.0f) cpu_internal::SoftCapScores(sr, visible, rule.softcap);
    for (int64_t j = visible; j < tile; ++j) sr[j] = kNegInf;
    const int64_t wfrom = std::clamp<int64_t>(rule.weighted_from - j0, 0, visible);
    if (rule.log_weight != 0.0f) {
      for (int64_t j = wfrom; j < visible; ++j) sr[j] += rule.log_weight;
    }
    if (rule.key_pos != nullptr) {
      // In locals: a float member could alias sr, which would keep the loop from vectorizing.
      const int32_t* kp = rule.key_pos + j0;
      const int32_t qp = rule.query_pos[r];
      const float slope = rule.slope;
      for (int64_t j = 0; j < visible; ++j) sr[j] += slope * static_cast<float>(kp[j] - qp);
    }
    float tile_max = kNegInf;
    for (int64_t j = 0; j < visible; ++j) tile_max = std::max(tile_max, sr[j]);
    float& row_max = state.max[state_row + r];
    const float new_max = std::max(row_max, tile_max);
    if (new_max == kNegInf) {  // nothing visible yet for this row
      for (int64_t j = 0; j < tile; ++j) sr[j] = 0.0f;
      continue;
    }
    const float correction = vmath::Exp(row_max - new_max);
    for (int64_t j = 0; j < tile; ++j) sr[j] = vmath::Exp(sr[j] - new_max);
    float tile_sum = 0.0f;
    for (int64_t j = 0; j < tile; ++j) tile_sum += sr[j];
    float& row_sum = state.sum[state_row + r];
    row_sum = row_sum * correction + tile_sum;
    row_max = new_max;
    float* orow = state.o.data() + (state_row + r) * dim;
    if (correction != 1.0f) {
      for (int64_t d = 0; d < dim; ++d) orow[d] *= correction;
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows),
              static_cast<int>(dim), static_cast<int>(tile), 1.0f, s, static_cast<int>(tile), v,
              static_cast<int>(kv_ld), 1.0f, state.o.data() + state_row * dim,
              static_cast<int>(dim));
}

// Attends `rows` query rows to keys [0, nkeys) of f32 k/v (row stride kv_ld).
void AttendTiles(const float* q, int64_t q_ld, int64_t rows, const float* k, const float* v,
                 int64_t kv_ld, int64_t nkeys, int64_t dim, float scale, const KeyRule& rule,
                 OnlineSoftmax& state) {
  for (int64_t j0 = 0; j0 < nkeys; j0 += kKeyTile) {
    const int64_t tile = std::min(kKeyTile, nkeys - j0);
    AttendTile(q, q_ld, rows, k + j0 * kv_ld, v + j0 * kv_ld, kv_ld, j0, tile, dim, scale, rule,
               state, 0);
  }
}

// Copies keys [j0, j0 + tile) of one kv head (any dtype) into a contiguous f32 [tile, dim] tile.
void LoadTile(const Tensor& t, int64_t kv_head, int64_t j0, int64_t tile, float* out) {
  const int64_t kv_heads = t.dim(1), dim = t.dim(2);
  const int64_t base = (j0 * kv_heads + kv_head) * dim;
  const int64_t ld = kv_heads * dim;
  switch (t.dtype()) {
    case DType::kF32: {
      const float* src = t.data<float>() + base;
      for (int64_t j = 0; j < tile; ++j) std::copy(src + j * ld, src + j * ld + dim, out + j * dim);
      break;
    }
    case DType::kBF16: {
      const uint16_t* src = t.data<uint16_t>() + base;
      for (int64_t j = 0; j < tile; ++j) {
        for (int64_t d = 0; d < dim; ++d) out[j * dim + d] = BF16ToF32(src[j * ld + d]);
      }
      break;
    }
    case DType::kF16: {
      const uint16_t* src = t.data<uint16_t>() + base;
      for (int64_t j = 0; j < tile; ++j) {
        for (int64_t d = 0; d < dim; ++d) out[j * dim + d] = F16ToF32(src[j * ld + d]);
      }
      break;
    }
    case DType::kI32:  // the fronts admit float K/V only
      break;
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

// A sequence's own K/V as f32: the tensors themselves when f32, else a widened copy of the first
// kv_len rows (the CPU computes in f32; 16-bit own K/V are a storage format here).
struct OwnKeys {
  const float* k = nullptr;
  const float* v = nullptr;
  std::vector<float> k_wide, v_wide;
};

void WidenRows(const Tensor& t, int64_t rows, std::vector<float>& out) {
  const int64_t n = rows * t.dim(1) * t.dim(2);
  out.resize(n);
  const uint16_t* src = t.data<uint16_t>();
  if (t.dtype() == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) out[i] = BF16ToF32(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = F16ToF32(src[i]);
  }
}

}  // namespace

absl::Status CpuBackend::AttendOwnImpl(const Tensor& q,
                                       absl::Span<const AttentionSequence> sequences, float scale,
                                       const AttentionState& out) {
  if (auto st = RequireF32("AttendOwn", {&q}); !st.ok()) return st;
  const int64_t heads = q.dim(1);
  const int64_t dim = q.dim(2);
  const int64_t q_ld = heads * dim;
  const float* qp = q.data<float>();
  float* op = out.o.data<float>();
  float* lp = out.lse.data<float>();
  // A decode row (one new token) goes to the split-K kernel (cpu_decode_attention.h), which reads
  // its K/V once in their storage dtype; the rest are tiled below.
  auto one_token = [&](const AttentionSequence& seq) {
    return seq.q_len == 1 && seq.alibi_slopes == nullptr && cpu_internal::DecodeKernelSupports(dim);
  };
  for (const AttentionSequence& seq : sequences) {
    if (!one_token(seq)) continue;
    cpu_internal::AttendOneToken(*pool_, qp + seq.q_begin * q_ld, heads, *seq.k, *seq.v, seq.kv_len,
                                 seq.weighted_from, seq.own_log_weight, scale, seq.logit_softcap,
                                 op + seq.q_begin * q_ld, lp + seq.q_begin * heads);
  }
  std::vector<OwnKeys> keys(sequences.size());
  for (size_t s = 0; s < sequences.size(); ++s) {
    const AttentionSequence& seq = sequences[s];
    if (one_token(seq)) continue;
    if (seq.k->dtype() == DType::kF32) {
      keys[s].k = seq.k->data<float>();
      keys[s].v = seq.v->data<float>();
    } else {
      WidenRows(*seq.k, seq.kv_len, keys[s].k_wide);
      WidenRows(*seq.v, seq.kv_len, keys[s].v_wide);
      keys[s].k = keys[s].k_wide.data();
      keys[s].v = keys[s].v_wide.data();
    }
  }
  struct Item {
    int64_t seq, head, r0, r1;
  };
  std::vector<Item> items;
  for (int64_t s = 0; s < static_cast<int64_t>(sequences.size()); ++s) {
    if (one_token(sequences[s])) continue;
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
    rule.softcap = seq.logit_softcap;
    if (seq.alibi_slopes != nullptr) {
      rule.key_pos = seq.positions->data<int32_t>();
      rule.query_pos = rule.key_pos + base + it.r0;
      rule.slope = AlibiSlope(seq, it.head);
    }
    OnlineSoftmax& state = states[thread];
    state.Reset(rows, dim);
    const int64_t row0 = seq.q_begin + it.r0;
    AttendTiles(qp + row0 * q_ld + it.head * dim, q_ld, rows, keys[it.seq].k + kv_head * dim,
                keys[it.seq].v + kv_head * dim, kv_ld, base + it.r1, dim, scale, rule, state);
    Finish(state, rows, dim, op + row0 * q_ld + it.head * dim, q_ld, lp + row0 * heads + it.head,
           heads);
  });
  return absl::OkStatus();
}

namespace {

constexpr int64_t kContextRowChunk = 1024;

// The rows of a context call that see the context, gathered so every GEMM row is useful: their
// queries [n, heads, dim] (contiguous), with ALiBi their positions, and room for their outputs.
struct GatheredRows {
  std::vector<int64_t> rows;  // in q
  std::vector<int32_t> positions;
  std::vector<float> q, o, lse;
};

// Gathers the rows that see the context; the others saw nothing (o = 0, lse = -inf).
GatheredRows GatherRowsSeeing(const Tensor& q, absl::Span<const AttentionSequence> sequences,
                              const AttentionContext& context, bool alibi,
                              const AttentionState& out) {
  const int64_t heads = q.dim(1);
  const int64_t q_ld = heads * q.dim(2);
  float* op = out.o.data<float>();
  float* lp = out.lse.data<float>();
  GatheredRows g;
  for (const auto& seq : sequences) {
    const int64_t base = seq.kv_len - seq.q_len;
    for (int64_t r = 0; r < seq.q_len; ++r) {
      const int64_t row = seq.q_begin + r;
      if (base + r >= seq.context_from && context.len > 0) {
        g.rows.push_back(row);
        if (alibi) g.positions.push_back(seq.positions->data<int32_t>()[base + r]);
      } else {
        std::fill(op + row * q_ld, op + (row + 1) * q_ld, 0.0f);
        std::fill(lp + row * heads, lp + (row + 1) * heads, kNegInf);
      }
    }
  }
  const int64_t n = static_cast<int64_t>(g.rows.size());
  g.q.resize(n * q_ld);
  g.o.resize(n * q_ld);
  g.lse.resize(n * heads);
  const float* qp = q.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    std::copy(qp + g.rows[i] * q_ld, qp + (g.rows[i] + 1) * q_ld, g.q.data() + i * q_ld);
  }
  return g;
}

// The gathered rows against the context on the register-tiled kernels (cpu_context_kernel.h).
void AttendGatheredKernels(ThreadPool& pool, GatheredRows& g, int64_t heads, int64_t dim,
                           const AttentionContext& context, float scale, float softcap) {
  const int64_t n = static_cast<int64_t>(g.rows.size());
  const int64_t q_ld = heads * dim;
  const int64_t kv_heads = context.k->dim(1);
  const int64_t group = heads / kv_heads;
  if (n * group <= cpu_internal::kSplitKeysMaxRows) {
    // Few rows (a query or two): threads split the keys and stream whole key rows.
    cpu_internal::AttendContextSplitKeys(pool, g.q.data(), n, heads, *context.k, *context.v,
                                         context.len, scale, softcap, g.o.data(), g.lse.data());
    return;
  }
  // One item per kv head and chunk of tokens, the rows of every query head sharing the kv head
  // together, so each context tile is read once per chunk for all of them.
  const int64_t chunk = std::max<int64_t>(1, kContextRowChunk / group);
  struct GroupItem {
    int64_t kv_head, t0, t1;
  };
  std::vector<GroupItem> items;
  for (int64_t kv = 0; kv < kv_heads; ++kv) {
    for (int64_t t0 = 0; t0 < n; t0 += chunk) items.push_back({kv, t0, std::min(n, t0 + chunk)});
  }
  std::vector<cpu_internal::ContextScratch> scratch(pool.size());
  pool.ParallelForEach(static_cast<int64_t>(items.size()), [&](int64_t i, int thread) {
    const GroupItem& it = items[i];
    const int64_t head0 = it.kv_head * group;
    cpu_internal::AttendContextRows(g.q.data() + it.t0 * q_ld + head0 * dim, q_ld, it.t1 - it.t0,
                                    group, *context.k, *context.v, it.kv_head, context.len, scale,
                                    softcap, g.o.data() + it.t0 * q_ld + head0 * dim, q_ld,
                                    g.lse.data() + it.t0 * heads + head0, heads, scratch[thread]);
  });
}

// The gathered rows against the context on the general tiled path (any head_dim, ALiBi). Per
// (head, chunk of rows): key tiles outer, row blocks inner, so each tile of the context is loaded
// (and, for 16-bit storage, converted) once per chunk and reused by every row block while it is
// hot in cache. f32 contexts are read in place.
void AttendGatheredTiles(ThreadPool& pool, GatheredRows& g, int64_t heads, int64_t dim,
                         absl::Span<const AttentionSequence> sequences,
                         const AttentionContext& context, float scale, float softcap, bool alibi) {
  const int64_t n = static_cast<int64_t>(g.rows.size());
  const int64_t q_ld = heads * dim;
  const int64_t kv_heads = context.k->dim(1);
  const int64_t group = heads / kv_heads;
  const int64_t kv_ld = kv_heads * dim;
  struct Item {
    int64_t head, r0, r1;
  };
  std::vector<Item> items;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r0 = 0; r0 < n; r0 += kContextRowChunk) {
      items.push_back({h, r0, std::min(n, r0 + kContextRowChunk)});
    }
  }
  const bool direct = context.k->dtype() == DType::kF32;
  std::vector<OnlineSoftmax> states(pool.size());
  std::vector<std::vector<float>> k_tiles(pool.size()), v_tiles(pool.size());
  pool.ParallelForEach(static_cast<int64_t>(items.size()), [&](int64_t i, int thread) {
    const Item& it = items[i];
    const int64_t rows = it.r1 - it.r0;
    const int64_t kv_head = it.head / group;
    OnlineSoftmax& state = states[thread];
    state.Reset(rows, dim);
    KeyRule rule;
    rule.softcap = softcap;
    if (alibi) {
      rule.key_pos = context.positions->data<int32_t>();
      rule.slope = AlibiSlope(sequences.front(), it.head);
    }
    for (int64_t j0 = 0; j0 < context.len; j0 += kKeyTile) {
      const int64_t tile = std::min(kKeyTile, context.len - j0);
      const float* k;
      const float* v;
      int64_t ld;
      if (direct) {
        k = context.k->data<float>() + (j0 * kv_heads + kv_head) * dim;
        v = context.v->data<float>() + (j0 * kv_heads + kv_head) * dim;
        ld = kv_ld;
      } else {
        k_tiles[thread].resize(kKeyTile * dim);
        v_tiles[thread].resize(kKeyTile * dim);
        LoadTile(*context.k, kv_head, j0, tile, k_tiles[thread].data());
        LoadTile(*context.v, kv_head, j0, tile, v_tiles[thread].data());
        k = k_tiles[thread].data();
        v = v_tiles[thread].data();
        ld = dim;
      }
      for (int64_t b0 = 0; b0 < rows; b0 += kRowBlock) {
        const int64_t block = std::min(kRowBlock, rows - b0);
        if (alibi) rule.query_pos = g.positions.data() + it.r0 + b0;
        AttendTile(g.q.data() + (it.r0 + b0) * q_ld + it.head * dim, q_ld, block, k, v, ld, j0,
                   tile, dim, scale, rule, state, b0);
      }
    }
    Finish(state, rows, dim, g.o.data() + it.r0 * q_ld + it.head * dim, q_ld,
           g.lse.data() + it.r0 * heads + it.head, heads);
  });
}

}  // namespace

absl::Status CpuBackend::AttendContextImpl(const Tensor& q,
                                           absl::Span<const AttentionSequence> sequences,
                                           const AttentionContext& context, float scale,
                                           const AttentionState& out) {
  if (auto st = RequireF32("AttendContext", {&q}); !st.ok()) return st;
  const int64_t heads = q.dim(1);
  const int64_t dim = q.dim(2);
  const bool alibi = !sequences.empty() && sequences.front().alibi_slopes != nullptr;
  const float softcap = sequences.empty() ? 0.0f : sequences.front().logit_softcap;
  GatheredRows g = GatherRowsSeeing(q, sequences, context, alibi, out);
  if (g.rows.empty()) return absl::OkStatus();
  if (!alibi && cpu_internal::ContextKernelSupports(dim)) {
    AttendGatheredKernels(*pool_, g, heads, dim, context, scale, softcap);
  } else {
    AttendGatheredTiles(*pool_, g, heads, dim, sequences, context, scale, softcap, alibi);
  }
  // Back to the rows they came from.
  const int64_t q_ld = heads * dim;
  float* op = out.o.data<float>();
  float* lp = out.lse.data<float>();
  for (size_t i = 0; i < g.rows.size(); ++i) {
    const int64_t row = g.rows[i];
    std::copy(g.o.data() + i * q_ld, g.o.data() + (i + 1) * q_ld, op + row * q_ld);
    std::copy(g.lse.data() + i * heads, g.lse.data() + (i + 1) * heads, lp + row * heads);
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::MergeStatesImpl(const AttentionState& into, const AttentionState& other,
                                         float other_log_weight) {
  if (auto st = RequireF32("MergeStates", {&into.o}); !st.ok()) return st;
  const int64_t rows = into.lse.numel();  // (token, head) pairs
  const int64_t dim = into.o.dim(2);
  float* oa = into.o.data<float>();
  float* la = into.lse.data<float>();
  const float* ob = other.o.data<float>();
  const float* lb = other.lse.data<float>();
  ParallelRows(*pool_, rows, dim, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float a = la[i];
      const float c = lb[i] + other_log_weight;
      const float m = std::max(a, c);
      if (m == kNegInf) continue;  // neither side saw a key
      const float wa = std::exp(a - m);
      const float wc = std::exp(c - m);
      const float total = wa + wc;
      float* o = oa + i * dim;
      const float* p = ob + i * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] = (wa * o[d] + wc * p[d]) / total;
      la[i] = m + std::log(total);
    }
  });
  return absl::OkStatus();
}

}  // namespace manyshot

#include "engine/cpu/cpu_context_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/dtype.h"
#include "engine/cpu/simd512.h"

namespace manyshot::cpu_internal {

#if MANYSHOT_AVX512
MANYSHOT_AVX512_BEGIN

namespace {

constexpr int64_t kRows = 32;   // query rows per block: two vectors of scores per key
constexpr int64_t kKeys = 128;  // keys per tile: K and V tiles of 128 x 128 f32 stay in L2
// Keys per tile of the split-keys path, every kv head: 64 keys x 12 heads x 64 dims x 4 bytes,
// K and V, is 384 KB (GPT-2), which stays in L2.
constexpr int64_t kSplitKeys = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// dim stored values at element `offset` of src (f32, bf16 or f16) as f32: 16-bit storage is read as
// 16 bits and widened here.
inline void WidenRow(const Tensor& src, int64_t offset, int64_t dim, float* dst) {
  switch (src.dtype()) {
    case DType::kF32: {  // inline: a memcpy call per row led a batch-1 query profile
      const float* p = src.data<float>() + offset;
      for (int64_t d = 0; d < dim; d += 16) _mm512_storeu_ps(dst + d, _mm512_loadu_ps(p + d));
      break;
    }
    case DType::kBF16: {
      const uint16_t* p = src.data<uint16_t>() + offset;
      for (int64_t d = 0; d < dim; d += 16) _mm512_storeu_ps(dst + d, simd512::LoadBF16(p + d));
      break;
    }
    default: {  // f16 (the fronts admit float K/V only)
      const uint16_t* p = src.data<uint16_t>() + offset;
      for (int64_t d = 0; d < dim; d += 16) _mm512_storeu_ps(dst + d, simd512::LoadF16(p + d));
      break;
    }
  }
}

// Keys [j0, j0 + count) of `kv_head` as a contiguous f32 [count, dim] tile.
void LoadTile(const Tensor& src, int64_t kv_head, int64_t j0, int64_t count, float* dst) {
  const int64_t kv_heads = src.dim(1), dim = src.dim(2);
  for (int64_t j = 0; j < count; ++j) {
    WidenRow(src, ((j0 + j) * kv_heads + kv_head) * dim, dim, dst + j * dim);
  }
}

// Each key row of one head is a short piece of a long stride (kv_heads of them per key), which the
// hardware prefetchers do not follow: the next tile's rows are prefetched into L2 explicitly,
// a few keys at a time while this tile's scores are computed, so the requests spread over the
// computation instead of queueing behind each other.
inline void PrefetchKeys(const Tensor& t, int64_t kv_head, int64_t j, int64_t n, int64_t len) {
  const int64_t end = std::min(j + n, len);
  const int64_t elem = static_cast<int64_t>(DTypeSize(t.dtype()));
  const int64_t kv_heads = t.dim(1), dim = t.dim(2);
  const char* base = static_cast<const char*>(t.raw());
  for (; j < end; ++j) {
    const char* row = base + ((j * kv_heads + kv_head) * dim) * elem;
    for (int64_t b = 0; b < dim * elem; b += 64) _mm_prefetch(row + b, _MM_HINT_T1);
  }
}

// acc[key][h] = the logits of KB keys (k rows of dim values, k_ld apart) against a transposed,
// pre-scaled query block q_t [dim, 32]: rows 16 h .. 16 h + 15 for the block's RV vectors of rows
// (a block of at most 16 rows is one vector: the second would be all padding).
template <int KB, int RV>
inline void KeyLogits(const float* k, int64_t k_ld, int64_t dim, const float* q_t,
                      __m512 (&acc)[KB][RV]) {
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) acc[kb][h] = _mm512_setzero_ps();
  }
  for (int64_t d = 0; d < dim; ++d) {
    __m512 q[RV];
    for (int h = 0; h < RV; ++h) q[h] = _mm512_loadu_ps(q_t + d * kRows + 16 * h);
    for (int kb = 0; kb < KB; ++kb) {
      const __m512 kd = _mm512_set1_ps(k[kb * k_ld + d]);
      for (int h = 0; h < RV; ++h) acc[kb][h] = _mm512_fmadd_ps(kd, q[h], acc[kb][h]);
    }
  }
}

// scores[key, 0..16 RV) for KB keys: the logits as they are.
template <int KB, int RV>
inline void ScoreKeys(const float* k, int64_t k_ld, int64_t dim, const float* q_t, float* scores) {
  __m512 acc[KB][RV];
  KeyLogits<KB, RV>(k, k_ld, dim, q_t, acc);
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) _mm512_storeu_ps(scores + kb * kRows + 16 * h, acc[kb][h]);
  }
}

// How far a logit may exceed its row's running maximum before the maximum must be raised: the
// softmax is the same for any subtracted constant, and exp(logit - max) <= e^8 keeps every
// partial sum (at most e^8 per key) far from f32 overflow and its rounding relative.
constexpr float kMaxSlack = 8.0f;

// scores[key, 0..16 RV) = exp(logit - max) for KB keys, added to sum, when no logit exceeds its
// row's limit (max + kMaxSlack); otherwise returns false having written nothing that counts (the
// caller redoes the tile with a raised maximum). Keeps the max pass and a store and reload of
// every logit out of the common case, where the running maximum is already (nearly) the maximum.
template <int KB, int RV>
inline bool ScoreKeysExp(const float* k, int64_t k_ld, int64_t dim, const float* q_t,
                         const __m512 (&max)[RV], const __m512 (&limit)[RV], float* scores,
                         __m512 (&sum)[RV]) {
  __m512 acc[KB][RV];
  KeyLogits<KB, RV>(k, k_ld, dim, q_t, acc);
  __mmask16 over = 0;
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) over |= _mm512_cmp_ps_mask(acc[kb][h], limit[h], _CMP_GT_OQ);
  }
  if (over != 0) return false;
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) {
      const __m512 e = simd512::Exp(_mm512_sub_ps(acc[kb][h], max[h]));
      _mm512_storeu_ps(scores + kb * kRows + 16 * h, e);
      sum[h] = _mm512_add_ps(sum[h], e);
    }
  }
  return true;
}

// o[rp, :] += sum over the tile's keys j of p[j, rp] * v[j, :] for RP rows (o rows dim apart, v
// rows v_ld apart; p holds the block's probabilities key-major, row stride kRows, offset to the
// first row).
template <int RP, int DV>
inline void AccumulateValues(const float* p, int64_t count, const float* v, int64_t v_ld,
                             float* o) {
  constexpr int64_t dim = 16 * DV;
  __m512 acc[RP][DV];
  for (int rp = 0; rp < RP; ++rp) {
    for (int dv = 0; dv < DV; ++dv) acc[rp][dv] = _mm512_loadu_ps(o + rp * dim + 16 * dv);
  }
  for (int64_t j = 0; j < count; ++j) {
    __m512 vv[DV];
    for (int dv = 0; dv < DV; ++dv) vv[dv] = _mm512_loadu_ps(v + j * v_ld + 16 * dv);
    for (int rp = 0; rp < RP; ++rp) {
      const __m512 pj = _mm512_set1_ps(p[j * kRows + rp]);
      for (int dv = 0; dv < DV; ++dv) acc[rp][dv] = _mm512_fmadd_ps(pj, vv[dv], acc[rp][dv]);
    }
  }
  for (int rp = 0; rp < RP; ++rp) {
    for (int dv = 0; dv < DV; ++dv) _mm512_storeu_ps(o + rp * dim + 16 * dv, acc[rp][dv]);
  }
}

// P·V for 0 <= rows < RP rows in one pass (the remainder of a block after its RP-row passes).
template <int DV, int RP, int R = 1>
void AccumulateRemainder(const float* p, int64_t count, const float* v, int64_t v_ld, float* o,
                         int64_t rows) {
  if (rows <= 0) return;
  if constexpr (R + 1 < RP) {
    if (rows > R) return AccumulateRemainder<DV, RP, R + 1>(p, count, v, v_ld, o, rows);
  }
  AccumulateValues<R, DV>(p, count, v, v_ld, o);
}

// P·V for the first `rows` rows of a block: as many rows at once as the registers hold
// (RP x DV accumulators plus DV value vectors within the 32 vector registers).
template <int DV>
void AccumulateBlock(const float* p, int64_t count, const float* v, int64_t v_ld, float* o,
                     int64_t rows) {
  constexpr int RP = DV <= 4 ? 6 : (DV <= 6 ? 4 : 2);
  int64_t r = 0;
  for (; r + RP <= rows; r += RP) {
    AccumulateValues<RP, DV>(p + r, count, v, v_ld, o + r * 16 * DV);
  }
  // The remaining rows in one pass, not one pass per row: one row's DV accumulators are DV chains
  // of dependent FMAs, one FMA per key each, and every pass re-reads the V tile (one row at a
  // time, AccumulateValues<1, 4> was 8.5% of a profile of batch-1 queries of 26 rows).
  AccumulateRemainder<DV, RP>(p + r, count, v, v_ld, o + r * 16 * DV, rows - r);
}

void AccumulateBlockAnyDim(int64_t dim, const float* p, int64_t count, const float* v, int64_t v_ld,
                           float* o, int64_t rows) {
  switch (dim / 16) {
    case 1:
      return AccumulateBlock<1>(p, count, v, v_ld, o, rows);
    case 2:
      return AccumulateBlock<2>(p, count, v, v_ld, o, rows);
    case 3:
      return AccumulateBlock<3>(p, count, v, v_ld, o, rows);
    case 4:
      return AccumulateBlock<4>(p, count, v, v_ld, o, rows);
    case 5:
      return AccumulateBlock<5>(p, count, v, v_ld, o, rows);
    case 6:
      return AccumulateBlock<6>(p, count, v, v_ld, o, rows);
    case 7:
      return AccumulateBlock<7>(p, count, v, v_ld, o, rows);
    default:
      return AccumulateBlock<8>(p, count, v, v_ld, o, rows);
  }
}

// Folds a tile's scores [count, kRows] (the first 16 RV rows used) into the block's running max /
// sum and rescales its output rows; leaves exp(score - new max) in `scores`.
template <int RV>
void OnlineSoftmax(float* scores, int64_t count, float* max, float* sum, float* o, int64_t dim,
                   int64_t rows) {
  // Two keys per step into 2 RV running maxima: one chain per vector of rows would make the pass
  // as long as count dependent max latencies. The max is exact in any order.
  __m512 tile_max[2][RV];
  for (auto& per_key : tile_max) {
    for (__m512& m : per_key) m = _mm512_set1_ps(kNegInf);
  }
  int64_t key = 0;
  for (; key < count; ++key) {
    for (int h = 0; h < RV; ++h) {
      tile_max[key & 1][h] =
          _mm512_max_ps(tile_max[key & 1][h], _mm512_loadu_ps(scores + key * kRows + 16 * h));
    }
  }
  __m512 new_max[RV], tile_sum[RV];
  alignas(64) float correction[kRows];
  for (int h = 0; h < RV; ++h) {
    const __m512 old_max = _mm512_loadu_ps(max + 16 * h);
    new_max[h] = _mm512_max_ps(old_max, _mm512_max_ps(tile_max[0][h], tile_max[1][h]));
    // First tile: exp(-inf) = 0.
    _mm512_store_ps(correction + 16 * h, simd512::Exp(_mm512_sub_ps(old_max, new_max[h])));
    _mm512_storeu_ps(max + 16 * h, new_max[h]);
    tile_sum[h] = _mm512_setzero_ps();
  }
  for (int64_t j = 0; j < count; ++j) {
    for (int h = 0; h < RV; ++h) {
      float* sj = scores + j * kRows + 16 * h;
      const __m512 e = simd512::Exp(_mm512_sub_ps(_mm512_loadu_ps(sj), new_max[h]));
      _mm512_storeu_ps(sj, e);
      tile_sum[h] = _mm512_add_ps(tile_sum[h], e);
    }
  }
  for (int h = 0; h < RV; ++h) {
    const __m512 c = _mm512_load_ps(correction + 16 * h);
    _mm512_storeu_ps(sum + 16 * h, _mm512_fmadd_ps(_mm512_loadu_ps(sum + 16 * h), c, tile_sum[h]));
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (correction[r] == 1.0f) continue;
    for (int64_t d = 0; d < dim; ++d) o[r * dim + d] *= correction[r];
  }
}

// The scores of a tile's keys for one block of 16 RV rows as exp(logit - the rows' running
// maximum), their sum added to `sum`, when no logit exceeds its row's maximum by more than
// kMaxSlack (the maximum then stays, and the block's output needs no rescaling); false otherwise,
// with `sum` untouched. The first tile of a block (maximum -inf) always returns false.
// prefetch(j) runs after the scores of keys [j, j + 8).
template <int RV, typename Prefetch>
bool ExpScoresUnderMax(const float* k, int64_t k_ld, int64_t count, const float* q_t, int64_t dim,
                       const float* max, float* sum, float* scores, Prefetch&& prefetch) {
  __m512 m[RV], limit[RV], tile_sum[RV];
  for (int h = 0; h < RV; ++h) {
    m[h] = _mm512_loadu_ps(max + 16 * h);
    limit[h] = _mm512_add_ps(m[h], _mm512_set1_ps(kMaxSlack));
    tile_sum[h] = _mm512_setzero_ps();
  }
  int64_t j = 0;
  for (; j + 8 <= count; j += 8) {
    if (!ScoreKeysExp<8, RV>(k + j * k_ld, k_ld, dim, q_t, m, limit, scores + j * kRows,
                             tile_sum)) {
      return false;
    }
    prefetch(j);
  }
  for (; j < count; ++j) {
    if (!ScoreKeysExp<1, RV>(k + j * k_ld, k_ld, dim, q_t, m, limit, scores + j * kRows,
                             tile_sum)) {
      return false;
    }
  }
  for (int h = 0; h < RV; ++h) {
    _mm512_storeu_ps(sum + 16 * h, _mm512_add_ps(_mm512_loadu_ps(sum + 16 * h), tile_sum[h]));
  }
  return true;
}

// One block of 16 RV rows (block_rows of them real) against one tile: ExpScoresUnderMax, or the
// logits and the online softmax with a raised maximum; then P·V.
template <int RV, typename Prefetch>
void FoldBlock(const float* k, int64_t k_ld, const float* v, int64_t v_ld, int64_t count,
               const float* qb, int64_t block_rows, int64_t dim, float* scores, float* ob,
               float* mb, float* sb, Prefetch&& prefetch) {
  if (!ExpScoresUnderMax<RV>(k, k_ld, count, qb, dim, mb, sb, scores, prefetch)) {
    int64_t j = 0;
    for (; j + 8 <= count; j += 8) {
      ScoreKeys<8, RV>(k + j * k_ld, k_ld, dim, qb, scores + j * kRows);
      prefetch(j);
    }
    for (; j < count; ++j) ScoreKeys<1, RV>(k + j * k_ld, k_ld, dim, qb, scores + j * kRows);
    OnlineSoftmax<RV>(scores, count, mb, sb, ob, dim, block_rows);
  }
  AccumulateBlockAnyDim(dim, scores, count, v, v_ld, ob, block_rows);
}

// Folds one tile of count keys (f32 K and V rows of dim values, k_ld and v_ld apart) into the
// state of every 32-row block of `rows` rows (a last block of at most 16 rows as one vector):
// prefetch(j) runs after the scores of keys [j, j + 8) of the first block.
template <typename Prefetch>
void FoldTile(const float* k, int64_t k_ld, const float* v, int64_t v_ld, int64_t count,
              const float* q_t, int64_t rows, int64_t dim, float* scores, float* o, float* max,
              float* sum, Prefetch&& prefetch) {
  const int64_t blocks = (rows + kRows - 1) / kRows;
  const auto no_prefetch = [](int64_t) {};
  for (int64_t b = 0; b < blocks; ++b) {
    const float* qb = q_t + b * dim * kRows;
    const int64_t block_rows = std::min(kRows, rows - b * kRows);
    float* ob = o + b * kRows * dim;
    float* mb = max + b * kRows;
    float* sb = sum + b * kRows;
    if (block_rows <= 16) {
      if (b == 0) {
        FoldBlock<1>(k, k_ld, v, v_ld, count, qb, block_rows, dim, scores, ob, mb, sb, prefetch);
      } else {
        FoldBlock<1>(k, k_ld, v, v_ld, count, qb, block_rows, dim, scores, ob, mb, sb, no_prefetch);
      }
    } else if (b == 0) {
      FoldBlock<2>(k, k_ld, v, v_ld, count, qb, block_rows, dim, scores, ob, mb, sb, prefetch);
    } else {
      FoldBlock<2>(k, k_ld, v, v_ld, count, qb, block_rows, dim, scores, ob, mb, sb, no_prefetch);
    }
  }
}

// Prefetches keys [from, to) of every kv head of K and V (one contiguous range each) into L2 in
// `calls` even slices, one per call.
class NextTilePrefetch {
 public:
  NextTilePrefetch(const Tensor& k, const Tensor& v, int64_t from, int64_t to, int64_t calls)
      : k_(static_cast<const char*>(k.raw())), v_(static_cast<const char*>(v.raw())) {
    const int64_t row_bytes = k.dim(1) * k.dim(2) * static_cast<int64_t>(DTypeSize(k.dtype()));
    at_ = from * row_bytes;
    end_ = std::max(at_, to * row_bytes);
    slice_ = ((end_ - at_) / calls + 63) / 64 * 64;
  }
  void operator()(int64_t) {
    const int64_t stop = std::min(end_, at_ + slice_);
    for (; at_ < stop; at_ += 64) {
      _mm_prefetch(k_ + at_, _MM_HINT_T1);
      _mm_prefetch(v_ + at_, _MM_HINT_T1);
    }
  }

 private:
  const char* k_;
  const char* v_;
  int64_t at_ = 0, end_ = 0, slice_ = 0;
};

// Query rows r = (token, head of the group) of kv head g transposed into 32-row blocks
// [dim, 32] and scaled (padding rows zero: their scores are computed and ignored).
void TransposeQueries(const float* q, int64_t q_ld, int64_t tokens, int64_t group, int64_t dim,
                      float scale, float* q_t) {
  const int64_t rows = tokens * group;
  for (int64_t r = 0; r < rows; ++r) {
    float* block = q_t + (r / kRows) * dim * kRows + r % kRows;
    const float* qr = q + (r / group) * q_ld + (r % group) * dim;
    for (int64_t d = 0; d < dim; ++d) block[d * kRows] = qr[d] * scale;
  }
}

}  // namespace

bool ContextKernelSupports(int64_t head_dim) {
  return head_dim >= 16 && head_dim <= 128 && head_dim % 16 == 0;
}

void AttendContextRows(const float* q, int64_t q_ld, int64_t tokens, int64_t group, const Tensor& k,
                       const Tensor& v, int64_t kv_head, int64_t len, float scale, float* out,
                       int64_t out_ld, float* lse, int64_t lse_ld, ContextScratch& scratch) {
  const int64_t rows = tokens * group;  // row r: token r / group, head r % group of the group
  const int64_t dim = k.dim(2);
  const int64_t blocks = (rows + kRows - 1) / kRows;
  const int64_t padded = blocks * kRows;
  scratch.q_t.assign(static_cast<size_t>(blocks * dim * kRows), 0.0f);
  TransposeQueries(q, q_ld, tokens, group, dim, scale, scratch.q_t.data());
  scratch.o.assign(static_cast<size_t>(padded * dim), 0.0f);
  scratch.max.assign(static_cast<size_t>(padded), kNegInf);
  scratch.sum.assign(static_cast<size_t>(padded), 0.0f);
  scratch.scores.resize(static_cast<size_t>(kKeys * kRows));
  scratch.k_tile.resize(static_cast<size_t>(kKeys * dim));
  scratch.v_tile.resize(static_cast<size_t>(kKeys * dim));
  float* scores = scratch.scores.data();
  for (int64_t j0 = 0; j0 < len; j0 += kKeys) {
    const int64_t count = std::min(kKeys, len - j0);
    LoadTile(k, kv_head, j0, count, scratch.k_tile.data());
    LoadTile(v, kv_head, j0, count, scratch.v_tile.data());
    FoldTile(scratch.k_tile.data(), dim, scratch.v_tile.data(), dim, count, scratch.q_t.data(),
             rows, dim, scores, scratch.o.data(), scratch.max.data(), scratch.sum.data(),
             [&](int64_t j) {
               PrefetchKeys(k, kv_head, j0 + kKeys + j, 8, len);
               PrefetchKeys(v, kv_head, j0 + kKeys + j, 8, len);
             });
  }
  for (int64_t r = 0; r < rows; ++r) {
    // Every key is visible, so sum >= 1 (the maximum's own term).
    const float inv = 1.0f / scratch.sum[r];
    float* orow = out + (r / group) * out_ld + (r % group) * dim;
    for (int64_t d = 0; d < dim; ++d) orow[d] = scratch.o[r * dim + d] * inv;
    lse[(r / group) * lse_ld + r % group] = scratch.max[r] + std::log(scratch.sum[r]);
  }
}

void AttendContextSplitKeys(ThreadPool& pool, const float* q, int64_t tokens, int64_t heads,
                            const Tensor& k, const Tensor& v, int64_t len, float scale, float* out,
                            float* lse) {
  const int64_t kv_heads = k.dim(1), dim = k.dim(2), group = heads / kv_heads;
  const int64_t rows = tokens * group;  // per kv head
  const int64_t blocks = (rows + kRows - 1) / kRows, padded = blocks * kRows;
  const int64_t q_ld = heads * dim;
  std::vector<float> q_t(static_cast<size_t>(kv_heads * blocks * dim * kRows), 0.0f);
  for (int64_t g = 0; g < kv_heads; ++g) {
    TransposeQueries(q + g * group * dim, q_ld, tokens, group, dim, scale,
                     q_t.data() + g * blocks * dim * kRows);
  }
  // Several chunks per thread (dynamic hand-out evens out a loaded machine), whole tiles each.
  const int64_t threads = pool.size();
  const int64_t per_chunk = (len + 4 * threads - 1) / (4 * threads);
  const int64_t chunk =
      (std::max(per_chunk, kSplitKeys) + kSplitKeys - 1) / kSplitKeys * kSplitKeys;
  const int64_t chunks = (len + chunk - 1) / chunk;
  struct Part {
    std::vector<float> o, max, sum;  // [kv head][padded row] (x dim for o)
  };
  struct Tiles {
    std::vector<float> k, v, scores;
  };
  std::vector<Part> parts(static_cast<size_t>(chunks));
  std::vector<Tiles> tiles(static_cast<size_t>(threads));
  const bool in_place = k.dtype() == DType::kF32 && v.dtype() == DType::kF32;
  const int64_t kv_ld = kv_heads * dim;
  pool.ParallelForEach(chunks, [&](int64_t c, int thread) {
    Part& p = parts[c];
    p.o.assign(static_cast<size_t>(kv_heads * padded * dim), 0.0f);
    p.max.assign(static_cast<size_t>(kv_heads * padded), kNegInf);
    p.sum.assign(static_cast<size_t>(kv_heads * padded), 0.0f);
    Tiles& t = tiles[thread];
    if (!in_place) {
      t.k.resize(static_cast<size_t>(kSplitKeys * dim));
      t.v.resize(t.k.size());
    }
    t.scores.resize(static_cast<size_t>(kSplitKeys * kRows));
    const int64_t end = std::min(len, (c + 1) * chunk);
    for (int64_t j0 = c * chunk; j0 < end; j0 += kSplitKeys) {
      const int64_t count = std::min(kSplitKeys, end - j0);
      // The next tile, one contiguous range of every head's rows, is prefetched into L2 in even
      // slices while this tile is folded. f32 K/V are then read where they are (a copy would
      // only add a write and a read per byte); 16-bit K/V are widened one head at a time from
      // L2 into a small f32 tile that stays in L1.
      NextTilePrefetch next(k, v, j0 + count, std::min(end, j0 + count + kSplitKeys),
                            kv_heads * std::max<int64_t>(1, count / 8));
      for (int64_t g = 0; g < kv_heads; ++g) {
        const float* k_rows = t.k.data();
        const float* v_rows = t.v.data();
        int64_t ld = dim;
        if (in_place) {
          k_rows = k.data<float>() + (j0 * kv_heads + g) * dim;
          v_rows = v.data<float>() + (j0 * kv_heads + g) * dim;
          ld = kv_ld;
        } else {
          LoadTile(k, g, j0, count, t.k.data());
          LoadTile(v, g, j0, count, t.v.data());
        }
        FoldTile(k_rows, ld, v_rows, ld, count, q_t.data() + g * blocks * dim * kRows, rows, dim,
                 t.scores.data(), p.o.data() + g * padded * dim, p.max.data() + g * padded,
                 p.sum.data() + g * padded, next);
      }
    }
  });
  // Merge the chunks' states by their log-sum-exp.
  for (int64_t g = 0; g < kv_heads; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = g * padded + r;
      float m = kNegInf;
      for (const Part& p : parts) m = std::max(m, p.max[i]);
      float total = 0.0f;
      float* orow = out + (r / group) * q_ld + (g * group + r % group) * dim;
      std::fill(orow, orow + dim, 0.0f);
      for (const Part& p : parts) {
        const float w = std::exp(p.max[i] - m);
        total += p.sum[i] * w;
        for (int64_t d = 0; d < dim; ++d) orow[d] += p.o[i * dim + d] * w;
      }
      const float inv = 1.0f / total;  // every key is visible: the maximum's own term is 1
      for (int64_t d = 0; d < dim; ++d) orow[d] *= inv;
      lse[(r / group) * heads + g * group + r % group] = m + std::log(total);
    }
  }
}

MANYSHOT_AVX512_END
#else  // no AVX-512 in this build: callers take the sgemm path

bool ContextKernelSupports(int64_t) { return false; }

void AttendContextRows(const float*, int64_t, int64_t, int64_t, const Tensor&, const Tensor&,
                       int64_t, int64_t, float, float*, int64_t, float*, int64_t, ContextScratch&) {
}

void AttendContextSplitKeys(ThreadPool&, const float*, int64_t, int64_t, const Tensor&,
                            const Tensor&, int64_t, float, float*, float*) {}

#endif

}  // namespace manyshot::cpu_internal

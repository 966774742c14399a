#include "engine/cpu/cpu_context_kernel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/dtype.h"

// Compiled once per instruction set (hwy/foreach_target.h); the entry points dispatch at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "engine/cpu/cpu_context_kernel.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// After foreach_target.h: included once per target.
#include "engine/cpu/simd-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
MANYSHOT_SIMD_BEGIN
namespace manyshot::cpu_internal::HWY_NAMESPACE {
namespace {

constexpr int64_t kRows = 2 * kLanes;  // query rows per block: two vectors of scores per key
// Keys whose logits one step of KeyLogits computes: 2 accumulators each, beside the two query
// vectors and a broadcast key value, within the target's registers.
constexpr int kKeyBlock = std::min(8, (kRegisters - 3) / 2);
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
      for (int64_t d = 0; d < dim; d += kLanes) hn::StoreU(LoadF32(p + d), DF(), dst + d);
      break;
    }
    case DType::kBF16: {
      const uint16_t* p = src.data<uint16_t>() + offset;
      for (int64_t d = 0; d < dim; d += kLanes) hn::StoreU(LoadBF16(p + d), DF(), dst + d);
      break;
    }
    default: {  // f16 (the fronts admit float K/V only)
      const uint16_t* p = src.data<uint16_t>() + offset;
      for (int64_t d = 0; d < dim; d += kLanes) hn::StoreU(LoadF16(p + d), DF(), dst + d);
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
    for (int64_t b = 0; b < dim * elem; b += 64) PrefetchL2(row + b);
  }
}

// acc[key][h] = the logits of KB keys (k rows of dim values, k_ld apart) against a transposed,
// pre-scaled query block q_t [dim, kRows]: rows kLanes h .. kLanes (h + 1) - 1 for the block's RV
// vectors of rows (a block of at most kLanes rows is one vector: the second would be all padding),
// passed through the Logits policy (simd-inl.h).
template <int KB, int RV, class Logits>
inline void KeyLogits(const float* k, int64_t k_ld, int64_t dim, const float* q_t,
                      const Logits& logits, VF (&acc)[KB][RV]) {
  const DF df;
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) acc[kb][h] = hn::Zero(df);
  }
  for (int64_t d = 0; d < dim; ++d) {
    VF q[RV];
    for (int h = 0; h < RV; ++h) q[h] = LoadF32(q_t + d * kRows + kLanes * h);
    for (int kb = 0; kb < KB; ++kb) {
      const VF kd = hn::Set(df, k[kb * k_ld + d]);
      for (int h = 0; h < RV; ++h) acc[kb][h] = hn::MulAdd(kd, q[h], acc[kb][h]);
    }
  }
  if constexpr (Logits::kCapped) {
    for (int kb = 0; kb < KB; ++kb) {
      for (int h = 0; h < RV; ++h) acc[kb][h] = logits(acc[kb][h]);
    }
  }
}

// scores[key, 0..kLanes RV) for KB keys: the logits as they are.
template <int KB, int RV, class Logits>
inline void ScoreKeys(const float* k, int64_t k_ld, int64_t dim, const float* q_t,
                      const Logits& logits, float* scores) {
  VF acc[KB][RV];
  KeyLogits<KB, RV>(k, k_ld, dim, q_t, logits, acc);
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) hn::StoreU(acc[kb][h], DF(), scores + kb * kRows + kLanes * h);
  }
}

// How far a logit may exceed its row's running maximum before the maximum must be raised: the
// softmax is the same for any subtracted constant, and exp(logit - max) <= e^8 keeps every
// partial sum (at most e^8 per key) far from f32 overflow and its rounding relative.
constexpr float kMaxSlack = 8.0f;

// scores[key, 0..kLanes RV) = exp(logit - max) for KB keys, added to sum, when no logit exceeds
// its row's limit (max + kMaxSlack); otherwise returns false having written nothing that counts
// (the caller redoes the tile with a raised maximum). Keeps the max pass and a store and reload
// of every logit out of the common case, where the running maximum is already (nearly) the
// maximum.
template <int KB, int RV, class Logits>
inline bool ScoreKeysExp(const float* k, int64_t k_ld, int64_t dim, const float* q_t,
                         const Logits& logits, const VF (&max)[RV], const VF (&limit)[RV],
                         float* scores, VF (&sum)[RV]) {
  VF acc[KB][RV];
  KeyLogits<KB, RV>(k, k_ld, dim, q_t, logits, acc);
  auto over = hn::Gt(acc[0][0], limit[0]);
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) over = hn::Or(over, hn::Gt(acc[kb][h], limit[h]));
  }
  if (!hn::AllFalse(DF(), over)) return false;
  for (int kb = 0; kb < KB; ++kb) {
    for (int h = 0; h < RV; ++h) {
      const VF e = Exp(hn::Sub(acc[kb][h], max[h]));
      hn::StoreU(e, DF(), scores + kb * kRows + kLanes * h);
      sum[h] = hn::Add(sum[h], e);
    }
  }
  return true;
}

// o[rp, c0 .. c0 + kLanes DC) += sum over the tile's keys j of p[j, rp] * v[j, same columns] for
// RP rows (o rows o_ld apart, v rows v_ld apart, both already offset to column c0; p holds the
// block's probabilities key-major, row stride kRows, offset to the first row).
template <int RP, int DC>
inline void AccumulateValues(const float* p, int64_t count, const float* v, int64_t v_ld, float* o,
                             int64_t o_ld) {
  const DF df;
  VF acc[RP][DC];
  for (int rp = 0; rp < RP; ++rp) {
    for (int dc = 0; dc < DC; ++dc) acc[rp][dc] = LoadF32(o + rp * o_ld + kLanes * dc);
  }
  for (int64_t j = 0; j < count; ++j) {
    VF vv[DC];
    for (int dc = 0; dc < DC; ++dc) vv[dc] = LoadF32(v + j * v_ld + kLanes * dc);
    for (int rp = 0; rp < RP; ++rp) {
      const VF pj = hn::Set(df, p[j * kRows + rp]);
      for (int dc = 0; dc < DC; ++dc) acc[rp][dc] = hn::MulAdd(pj, vv[dc], acc[rp][dc]);
    }
  }
  for (int rp = 0; rp < RP; ++rp) {
    for (int dc = 0; dc < DC; ++dc) hn::StoreU(acc[rp][dc], df, o + rp * o_ld + kLanes * dc);
  }
}

// Rows per AccumulateValues pass for DC vectors of columns: RP x DC accumulators, DC value
// vectors and a broadcast within the registers; at most 6.
template <int DC>
constexpr int kPassRows = std::min(6, (kRegisters - 1 - DC) / DC);

// P·V for 0 <= rows < RP rows in one pass (the remainder of a block after its RP-row passes).
template <int DC, int RP, int R = 1>
void AccumulateRemainder(const float* p, int64_t count, const float* v, int64_t v_ld, float* o,
                         int64_t o_ld, int64_t rows) {
  if (rows <= 0) return;
  if constexpr (R + 1 < RP) {
    if (rows > R) return AccumulateRemainder<DC, RP, R + 1>(p, count, v, v_ld, o, o_ld, rows);
  }
  AccumulateValues<R, DC>(p, count, v, v_ld, o, o_ld);
}

// P·V for the first `rows` rows of a block, DC vectors of columns: as many rows at once as the
// registers hold.
template <int DC>
void AccumulateColumns(const float* p, int64_t count, const float* v, int64_t v_ld, float* o,
                       int64_t o_ld, int64_t rows) {
  constexpr int RP = kPassRows<DC>;
  int64_t r = 0;
  for (; r + RP <= rows; r += RP)
    AccumulateValues<RP, DC>(p + r, count, v, v_ld, o + r * o_ld, o_ld);
  // The remaining rows in one pass, not one pass per row: one row's DC accumulators are DC chains
  // of dependent FMAs, one FMA per key each, and every pass re-reads the V tile (one row at a
  // time, AccumulateValues<1, 4> was 8.5% of a profile of batch-1 queries of 26 rows).
  AccumulateRemainder<DC, RP>(p + r, count, v, v_ld, o + r * o_ld, o_ld, rows - r);
}

// Widest column slice (in vectors) one pass keeps in registers: AVX-512 holds a 128-wide head's
// 8 vectors for two rows at once. With 16 registers, slices of 2 vectors leave room for 6 rows
// (12 accumulators): every pass re-reads its slice of the V tile from L2, and 6 rows a pass read
// it a third as often as the 2 rows that slices of 4 vectors left room for. With 4-vector slices
// P·V was half of a batch-32 query's time under AVX2, 1.6 times its Q·K; 2-vector slices took
// 30% off the batch-32 context attention (old and new alternated, 4 runs each, loaded machine).
constexpr int kMaxColumnVectors = kRegisters >= 32 ? 8 : 2;

// P·V for a slice of 1 <= vectors <= DC vectors of columns: AccumulateColumns instantiated for
// the slice's width.
template <int DC>
void AccumulateSlice(int64_t vectors, const float* p, int64_t count, const float* v, int64_t v_ld,
                     float* o, int64_t o_ld, int64_t rows) {
  if constexpr (DC > 1) {
    if (vectors < DC) return AccumulateSlice<DC - 1>(vectors, p, count, v, v_ld, o, o_ld, rows);
  }
  AccumulateColumns<DC>(p, count, v, v_ld, o, o_ld, rows);
}

// P·V over all dim columns (rows dim apart), in slices of at most kMaxColumnVectors vectors.
void AccumulateBlockAnyDim(int64_t dim, const float* p, int64_t count, const float* v, int64_t v_ld,
                           float* o, int64_t rows) {
  for (int64_t c = 0; c < dim; c += kMaxColumnVectors * kLanes) {
    const int64_t vectors = std::min<int64_t>(kMaxColumnVectors, (dim - c) / kLanes);
    AccumulateSlice<kMaxColumnVectors>(vectors, p, count, v + c, v_ld, o + c, dim, rows);
  }
}

// Folds a tile's scores [count, kRows] (the first 16 RV rows used) into the block's running max /
// sum and rescales its output rows; leaves exp(score - new max) in `scores`.
template <int RV>
void OnlineSoftmax(float* scores, int64_t count, float* max, float* sum, float* o, int64_t dim,
                   int64_t rows) {
  // Two keys per step into 2 RV running maxima: one chain per vector of rows would make the pass
  // as long as count dependent max latencies. The max is exact in any order.
  const DF df;
  VF tile_max[2][RV];
  for (auto& per_key : tile_max) {
    for (VF& m : per_key) m = hn::Set(df, kNegInf);
  }
  int64_t key = 0;
  for (; key < count; ++key) {
    for (int h = 0; h < RV; ++h) {
      tile_max[key & 1][h] =
          hn::Max(tile_max[key & 1][h], LoadF32(scores + key * kRows + kLanes * h));
    }
  }
  VF new_max[RV], tile_sum[RV];
  alignas(64) float correction[kRows];
  for (int h = 0; h < RV; ++h) {
    const VF old_max = LoadF32(max + kLanes * h);
    new_max[h] = hn::Max(old_max, hn::Max(tile_max[0][h], tile_max[1][h]));
    // First tile: exp(-inf) = 0.
    hn::Store(Exp(hn::Sub(old_max, new_max[h])), df, correction + kLanes * h);
    hn::StoreU(new_max[h], df, max + kLanes * h);
    tile_sum[h] = hn::Zero(df);
  }
  for (int64_t j = 0; j < count; ++j) {
    for (int h = 0; h < RV; ++h) {
      float* sj = scores + j * kRows + kLanes * h;
      const VF e = Exp(hn::Sub(LoadF32(sj), new_max[h]));
      hn::StoreU(e, df, sj);
      tile_sum[h] = hn::Add(tile_sum[h], e);
    }
  }
  for (int h = 0; h < RV; ++h) {
    const VF c = hn::Load(df, correction + kLanes * h);
    hn::StoreU(hn::MulAdd(LoadF32(sum + kLanes * h), c, tile_sum[h]), df, sum + kLanes * h);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (correction[r] == 1.0f) continue;
    for (int64_t d = 0; d < dim; ++d) o[r * dim + d] *= correction[r];
  }
}

// The scores of a tile's keys for one block of kLanes RV rows as exp(logit - the rows' running
// maximum), their sum added to `sum`, when no logit exceeds its row's maximum by more than
// kMaxSlack (the maximum then stays, and the block's output needs no rescaling); false otherwise,
// with `sum` untouched. The first tile of a block (maximum -inf) always returns false.
// prefetch(j) runs after the scores of keys [j, j + kKeyBlock).
template <int RV, class Logits, typename Prefetch>
bool ExpScoresUnderMax(const float* k, int64_t k_ld, int64_t count, const float* q_t, int64_t dim,
                       const Logits& logits, const float* max, float* sum, float* scores,
                       Prefetch&& prefetch) {
  const DF df;
  VF m[RV], limit[RV], tile_sum[RV];
  for (int h = 0; h < RV; ++h) {
    m[h] = LoadF32(max + kLanes * h);
    limit[h] = hn::Add(m[h], hn::Set(df, kMaxSlack));
    tile_sum[h] = hn::Zero(df);
  }
  int64_t j = 0;
  for (; j + kKeyBlock <= count; j += kKeyBlock) {
    if (!ScoreKeysExp<kKeyBlock, RV>(k + j * k_ld, k_ld, dim, q_t, logits, m, limit,
                                     scores + j * kRows, tile_sum)) {
      return false;
    }
    prefetch(j);
  }
  for (; j < count; ++j) {
    if (!ScoreKeysExp<1, RV>(k + j * k_ld, k_ld, dim, q_t, logits, m, limit, scores + j * kRows,
                             tile_sum)) {
      return false;
    }
  }
  for (int h = 0; h < RV; ++h) {
    hn::StoreU(hn::Add(LoadF32(sum + kLanes * h), tile_sum[h]), df, sum + kLanes * h);
  }
  return true;
}

// One block of kLanes RV rows (block_rows of them real) against one tile: ExpScoresUnderMax, or the
// logits and the online softmax with a raised maximum; then P·V.
template <int RV, class Logits, typename Prefetch>
void FoldBlock(const float* k, int64_t k_ld, const float* v, int64_t v_ld, int64_t count,
               const float* qb, int64_t block_rows, int64_t dim, const Logits& logits,
               float* scores, float* ob, float* mb, float* sb, Prefetch&& prefetch) {
  if (!ExpScoresUnderMax<RV>(k, k_ld, count, qb, dim, logits, mb, sb, scores, prefetch)) {
    int64_t j = 0;
    for (; j + kKeyBlock <= count; j += kKeyBlock) {
      ScoreKeys<kKeyBlock, RV>(k + j * k_ld, k_ld, dim, qb, logits, scores + j * kRows);
      prefetch(j);
    }
    for (; j < count; ++j) {
      ScoreKeys<1, RV>(k + j * k_ld, k_ld, dim, qb, logits, scores + j * kRows);
    }
    OnlineSoftmax<RV>(scores, count, mb, sb, ob, dim, block_rows);
  }
  AccumulateBlockAnyDim(dim, scores, count, v, v_ld, ob, block_rows);
}

// Folds one tile of count keys (f32 K and V rows of dim values, k_ld and v_ld apart) into the
// state of every kRows-row block of `rows` rows (a last block of at most kLanes rows as one
// vector): prefetch(j) runs after the scores of keys [j, j + kKeyBlock) of the first block.
template <class Logits, typename Prefetch>
void FoldTile(const float* k, int64_t k_ld, const float* v, int64_t v_ld, int64_t count,
              const float* q_t, int64_t rows, int64_t dim, const Logits& logits, float* scores,
              float* o, float* max, float* sum, Prefetch&& prefetch) {
  const int64_t blocks = (rows + kRows - 1) / kRows;
  const auto no_prefetch = [](int64_t) {};
  for (int64_t b = 0; b < blocks; ++b) {
    const float* qb = q_t + b * dim * kRows;
    const int64_t block_rows = std::min(kRows, rows - b * kRows);
    float* ob = o + b * kRows * dim;
    float* mb = max + b * kRows;
    float* sb = sum + b * kRows;
    if (block_rows <= kLanes) {
      if (b == 0) {
        FoldBlock<1>(k, k_ld, v, v_ld, count, qb, block_rows, dim, logits, scores, ob, mb, sb,
                     prefetch);
      } else {
        FoldBlock<1>(k, k_ld, v, v_ld, count, qb, block_rows, dim, logits, scores, ob, mb, sb,
                     no_prefetch);
      }
    } else if (b == 0) {
      FoldBlock<2>(k, k_ld, v, v_ld, count, qb, block_rows, dim, logits, scores, ob, mb, sb,
                   prefetch);
    } else {
      FoldBlock<2>(k, k_ld, v, v_ld, count, qb, block_rows, dim, logits, scores, ob, mb, sb,
                   no_prefetch);
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
      PrefetchL2(k_ + at_);
      PrefetchL2(v_ + at_);
    }
  }

 private:
  const char* k_;
  const char* v_;
  int64_t at_ = 0, end_ = 0, slice_ = 0;
};

// Query rows r = (token, head of the group) of kv head g transposed into kRows-row blocks
// [dim, kRows] and scaled (padding rows zero: their scores are computed and ignored).
void TransposeQueries(const float* q, int64_t q_ld, int64_t tokens, int64_t group, int64_t dim,
                      float scale, float* q_t) {
  const int64_t rows = tokens * group;
  for (int64_t r = 0; r < rows; ++r) {
    float* block = q_t + (r / kRows) * dim * kRows + r % kRows;
    const float* qr = q + (r / group) * q_ld + (r % group) * dim;
    for (int64_t d = 0; d < dim; ++d) block[d * kRows] = qr[d] * scale;
  }
}

template <class Logits>
void AttendRows(const float* q, int64_t q_ld, int64_t tokens, int64_t group, const Tensor& k,
                const Tensor& v, int64_t kv_head, int64_t len, float scale, const Logits& logits,
                float* out, int64_t out_ld, float* lse, int64_t lse_ld, ContextScratch& scratch) {
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
             rows, dim, logits, scores, scratch.o.data(), scratch.max.data(), scratch.sum.data(),
             [&](int64_t j) {
               PrefetchKeys(k, kv_head, j0 + kKeys + j, kKeyBlock, len);
               PrefetchKeys(v, kv_head, j0 + kKeys + j, kKeyBlock, len);
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

template <class Logits>
void AttendSplitKeys(ThreadPool& pool, const float* q, int64_t tokens, int64_t heads,
                     const Tensor& k, const Tensor& v, int64_t len, float scale,
                     const Logits& logits, float* out, float* lse) {
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
                            kv_heads * std::max<int64_t>(1, count / kKeyBlock));
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
                 logits, t.scores.data(), p.o.data() + g * padded * dim, p.max.data() + g * padded,
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

}  // namespace

bool ContextKernelSupportsImpl(int64_t head_dim) {
  return HWY_TARGET != HWY_SCALAR && head_dim >= 16 && head_dim <= 128 && head_dim % 16 == 0;
}

void AttendContextRowsImpl(const float* q, int64_t q_ld, int64_t tokens, int64_t group,
                           const Tensor& k, const Tensor& v, int64_t kv_head, int64_t len,
                           float scale, float softcap, float* out, int64_t out_ld, float* lse,
                           int64_t lse_ld, ContextScratch& scratch) {
  if (softcap > 0.0f) {
    AttendRows(q, q_ld, tokens, group, k, v, kv_head, len, scale, SoftCappedLogits{softcap}, out,
               out_ld, lse, lse_ld, scratch);
  } else {
    AttendRows(q, q_ld, tokens, group, k, v, kv_head, len, scale, LogitsAsIs{}, out, out_ld, lse,
               lse_ld, scratch);
  }
}

void AttendContextSplitKeysImpl(ThreadPool& pool, const float* q, int64_t tokens, int64_t heads,
                                const Tensor& k, const Tensor& v, int64_t len, float scale,
                                float softcap, float* out, float* lse) {
  if (softcap > 0.0f) {
    AttendSplitKeys(pool, q, tokens, heads, k, v, len, scale, SoftCappedLogits{softcap}, out, lse);
  } else {
    AttendSplitKeys(pool, q, tokens, heads, k, v, len, scale, LogitsAsIs{}, out, lse);
  }
}

}  // namespace manyshot::cpu_internal::HWY_NAMESPACE
MANYSHOT_SIMD_END
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace manyshot::cpu_internal {

HWY_EXPORT(ContextKernelSupportsImpl);
HWY_EXPORT(AttendContextRowsImpl);
HWY_EXPORT(AttendContextSplitKeysImpl);

// The scalar target (no SIMD) leaves context attention to the sgemm path.
bool ContextKernelSupports(int64_t head_dim) {
  return HWY_DYNAMIC_DISPATCH(ContextKernelSupportsImpl)(head_dim);
}

void AttendContextRows(const float* q, int64_t q_ld, int64_t tokens, int64_t group, const Tensor& k,
                       const Tensor& v, int64_t kv_head, int64_t len, float scale, float softcap,
                       float* out, int64_t out_ld, float* lse, int64_t lse_ld,
                       ContextScratch& scratch) {
  HWY_DYNAMIC_DISPATCH(AttendContextRowsImpl)
  (q, q_ld, tokens, group, k, v, kv_head, len, scale, softcap, out, out_ld, lse, lse_ld, scratch);
}

void AttendContextSplitKeys(ThreadPool& pool, const float* q, int64_t tokens, int64_t heads,
                            const Tensor& k, const Tensor& v, int64_t len, float scale,
                            float softcap, float* out, float* lse) {
  HWY_DYNAMIC_DISPATCH(AttendContextSplitKeysImpl)
  (pool, q, tokens, heads, k, v, len, scale, softcap, out, lse);
}

}  // namespace manyshot::cpu_internal
#endif  // HWY_ONCE

// ALiBi attention (BLOOM) on the CPU backend against a float64 loop over the definition: every
// logit of head h gets slope[h] * (key position - query position), for the sequence's own keys
// (causal, ln(weight) on keys >= weighted_from) and for the shared context's keys alike, with
// non-contiguous position ids (a structured-prompting query: bos at 0, its tokens at L, L+1, ..;
// context keys right-aligned below L). And the front's refusals.
#include <cmath>
#include <random>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/backend/backend_test_util.h"

namespace manyshot::testing {
namespace {

constexpr int64_t kHeads = 4, kKvHeads = 2, kDim = 8;

struct Case {
  std::vector<float> q, k, v, ck, cv;  // q [rows, H, D]; own k/v [n, KV, D]; context [c, KV, D]
  std::vector<int32_t> positions, context_positions;
  std::vector<float> slopes = {0.5f, 0.25f, 0.125f, 0.0625f};
  int64_t q_len = 0;
  float own_log_weight = std::log(3.0f);
  int64_t weighted_from = 1;
  int64_t context_from = 1;
  float context_log_weight = 0.0f;
  float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
};

// The attention output [q_len, H, D] in float64 from the definition.
std::vector<double> Reference(const Case& c) {
  const int64_t n = static_cast<int64_t>(c.positions.size());
  const int64_t clen = static_cast<int64_t>(c.context_positions.size());
  const int64_t group = kHeads / kKvHeads;
  std::vector<double> out(static_cast<size_t>(c.q_len * kHeads * kDim), 0.0);
  for (int64_t r = 0; r < c.q_len; ++r) {
    const int64_t own = n - c.q_len + r;
    for (int64_t h = 0; h < kHeads; ++h) {
      const int64_t g = h / group;
      const float* q = c.q.data() + (r * kHeads + h) * kDim;
      std::vector<double> logits;
      std::vector<const float*> values;
      auto add = [&](const float* k, const float* v, int32_t key_pos, double extra) {
        double dot = 0;
        for (int64_t d = 0; d < kDim; ++d) dot += static_cast<double>(q[d]) * k[d];
        logits.push_back(c.scale * dot + extra +
                         c.slopes[h] * static_cast<double>(key_pos - c.positions[own]));
        values.push_back(v);
      };
      for (int64_t j = 0; j <= own; ++j) {
        add(c.k.data() + (j * kKvHeads + g) * kDim, c.v.data() + (j * kKvHeads + g) * kDim,
            c.positions[j], j >= c.weighted_from ? c.own_log_weight : 0.0);
      }
      if (own >= c.context_from) {
        for (int64_t j = 0; j < clen; ++j) {
          add(c.ck.data() + (j * kKvHeads + g) * kDim, c.cv.data() + (j * kKvHeads + g) * kDim,
              c.context_positions[j], c.context_log_weight);
        }
      }
      double max = -INFINITY, sum = 0;
      for (double l : logits) max = std::max(max, l);
      for (double l : logits) sum += std::exp(l - max);
      for (size_t i = 0; i < logits.size(); ++i) {
        const double p = std::exp(logits[i] - max) / sum;
        for (int64_t d = 0; d < kDim; ++d) out[(r * kHeads + h) * kDim + d] += p * values[i][d];
      }
    }
  }
  return out;
}

Case MakeCase() {
  std::mt19937 rng(5);
  Case c;
  // A query of bos + 5 tokens after 12-token groups: bos at 0, q1.. at 12..16; the last 3 rows
  // are new (the first 3 came from an earlier pass).
  c.positions = {0, 12, 13, 14, 15, 16};
  c.q_len = 3;
  c.context_positions = {1, 2, 5, 6, 7, 8, 9, 10, 11, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const int64_t n = static_cast<int64_t>(c.positions.size());
  const int64_t clen = static_cast<int64_t>(c.context_positions.size());
  c.q = RandomValues(rng, c.q_len * kHeads * kDim, 2.0f);
  c.k = RandomValues(rng, n * kKvHeads * kDim, 2.0f);
  c.v = RandomValues(rng, n * kKvHeads * kDim);
  c.ck = RandomValues(rng, clen * kKvHeads * kDim, 2.0f);
  c.cv = RandomValues(rng, clen * kKvHeads * kDim);
  return c;
}

class AlibiAttentionTest : public ::testing::Test {
 protected:
  struct OnDevice {
    Tensor q, k, v, ck, cv, positions, context_positions, slopes, out;
    AttentionSequence seq;
    AttentionContext context;
  };
  OnDevice Upload(const Case& c) {
    OnDevice d;
    const int64_t n = static_cast<int64_t>(c.positions.size());
    const int64_t clen = static_cast<int64_t>(c.context_positions.size());
    d.q = testing::Upload(b_, c.q, DType::kF32, {c.q_len, kHeads, kDim});
    d.k = testing::Upload(b_, c.k, DType::kF32, {n, kKvHeads, kDim});
    d.v = testing::Upload(b_, c.v, DType::kF32, {n, kKvHeads, kDim});
    d.ck = testing::Upload(b_, c.ck, DType::kF32, {clen, kKvHeads, kDim});
    d.cv = testing::Upload(b_, c.cv, DType::kF32, {clen, kKvHeads, kDim});
    d.positions = UploadInts(b_, c.positions);
    d.context_positions = UploadInts(b_, c.context_positions);
    d.slopes = testing::Upload(b_, c.slopes, DType::kF32, {static_cast<int64_t>(c.slopes.size())});
    d.out = Poisoned(b_, DType::kF32, {c.q_len, kHeads, kDim});
    d.seq.q_begin = 0;
    d.seq.q_len = c.q_len;
    d.seq.k = &d.k;
    d.seq.v = &d.v;
    d.seq.kv_len = n;
    d.seq.own_log_weight = c.own_log_weight;
    d.seq.weighted_from = c.weighted_from;
    d.seq.context_from = c.context_from;
    d.seq.alibi_slopes = &d.slopes;
    d.seq.positions = &d.positions;
    d.context = {&d.ck, &d.cv, clen, c.context_log_weight, &d.context_positions};
    return d;
  }
  CpuBackend b_{2};
};

TEST_F(AlibiAttentionTest, OwnAndContextKeysMatchTheDefinition) {
  const Case c = MakeCase();
  OnDevice d = Upload(c);
  b_.Attention(d.q, {&d.seq, 1}, &d.context, c.scale, d.out, Tensor());
  const std::vector<float> got = Download(b_, d.out);
  const std::vector<double> want = Reference(c);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
  EXPECT_LT(worst, 1e-5);

  // The bias matters at these distances: the same call without slopes is far from the definition.
  d.seq.alibi_slopes = nullptr;
  b_.Attention(d.q, {&d.seq, 1}, &d.context, c.scale, d.out, Tensor());
  const std::vector<float> plain = Download(b_, d.out);
  double moved = 0;
  for (size_t i = 0; i < plain.size(); ++i) moved = std::max(moved, std::abs(plain[i] - want[i]));
  EXPECT_GT(moved, 1e-2);
}

TEST_F(AlibiAttentionTest, ShiftingEveryPositionChangesNothing) {
  Case c = MakeCase();
  OnDevice d = Upload(c);
  b_.Attention(d.q, {&d.seq, 1}, &d.context, c.scale, d.out, Tensor());
  const std::vector<float> base = Download(b_, d.out);
  for (auto& p : c.positions) p += 100;
  for (auto& p : c.context_positions) p += 100;
  OnDevice shifted = Upload(c);
  b_.Attention(shifted.q, {&shifted.seq, 1}, &shifted.context, c.scale, shifted.out, Tensor());
  const std::vector<float> moved = Download(b_, shifted.out);
  for (size_t i = 0; i < base.size(); ++i) EXPECT_NEAR(moved[i], base[i], 1e-5) << i;
}

TEST_F(AlibiAttentionTest, FrontRefusesIncompleteArguments) {
  const Case c = MakeCase();
  OnDevice d = Upload(c);
  // Slopes for the wrong number of heads.
  Tensor three = testing::Upload(b_, {0.5f, 0.25f, 0.125f}, DType::kF32, {3});
  d.seq.alibi_slopes = &three;
  b_.Attention(d.q, {&d.seq, 1}, nullptr, c.scale, d.out, Tensor());
  absl::Status s = b_.Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("3 ALiBi slopes for 4 heads"));
  // Positions that do not cover the keys.
  d.seq.alibi_slopes = &d.slopes;
  Tensor short_positions = UploadInts(b_, {0, 1});
  d.seq.positions = &short_positions;
  b_.Attention(d.q, {&d.seq, 1}, nullptr, c.scale, d.out, Tensor());
  s = b_.Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("key positions"));
  // A context without its keys' positions.
  d.seq.positions = &d.positions;
  d.context.positions = nullptr;
  b_.Attention(d.q, {&d.seq, 1}, &d.context, c.scale, d.out, Tensor());
  s = b_.Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("context keys' positions"));
}

}  // namespace
}  // namespace manyshot::testing

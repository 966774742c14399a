// The CPU backend's AttendOwn for decode rows (one new token: the split-K kernel of
// cpu_decode_attention.h), mixed in one call with a prefill sequence (the tiled sgemm path),
// against exact softmax attention within the rounding bound of exact_attention.h: every K/V
// storage dtype, GQA, structured prompting's log-weight on keys >= weighted_from, key counts
// around the 64-key tiles and one long enough to be split across threads, with and without Gemma
// 2's soft-capped logits; on every kernel target this machine executes.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_decode_attention.h"
#include "gtest/gtest.h"
#include "tests/engine/backend/backend_test_util.h"
#include "tests/engine/backend/cpu_target_param.h"
#include "tests/engine/backend/exact_attention.h"

namespace manyshot {
namespace {

using testing::Download;
using testing::Poisoned;
using testing::RandomValues;
using testing::RoundedTo;
using testing::Upload;

struct Seq {
  int64_t q_len, kv_len, weighted_from;
};

void CheckCall(CpuBackend& backend, std::mt19937& rng, int64_t H, int64_t KH, int64_t D, DType kv,
               const std::vector<Seq>& shapes, float softcap = 0.0f) {
  const float log_weight = std::log(5.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<std::vector<float>> ks, vs;
  std::vector<Tensor> kt, vt;
  kt.reserve(shapes.size());
  vt.reserve(shapes.size());
  std::vector<AttentionSequence> seqs;
  int64_t tokens = 0;
  for (const Seq& sh : shapes) {
    const int64_t cap = sh.kv_len + 5;  // capacity beyond kv_len must never be read
    // Capped: keys spread wider, so that the cap bends most logits.
    const float key_spread = softcap > 0.0f ? 6.0f : 2.0f;
    ks.push_back(RoundedTo(RandomValues(rng, cap * KH * D, key_spread), kv));
    vs.push_back(RoundedTo(RandomValues(rng, cap * KH * D), kv));
    for (int64_t i = sh.kv_len * KH * D; i < cap * KH * D; ++i) ks.back()[i] = 1e30f;
    kt.push_back(Upload(backend, ks.back(), kv, {cap, KH, D}));
    vt.push_back(Upload(backend, vs.back(), kv, {cap, KH, D}));
    AttentionSequence s;
    s.q_begin = tokens;
    s.q_len = sh.q_len;
    s.kv_len = sh.kv_len;
    s.own_log_weight = log_weight;
    s.weighted_from = sh.weighted_from;
    s.logit_softcap = softcap;
    seqs.push_back(s);
    tokens += sh.q_len;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].k = &kt[i];
    seqs[i].v = &vt[i];
  }
  const auto q = RandomValues(rng, tokens * H * D);
  AttentionState out{Poisoned(backend, DType::kF32, {tokens, H, D}),
                     Poisoned(backend, DType::kF32, {tokens, H})};
  backend.AttendOwn(Upload(backend, q, DType::kF32, {tokens, H, D}), seqs, scale, out);
  ASSERT_TRUE(backend.Synchronize().ok());
  const std::vector<float> o = Download(backend, out.o), lse = Download(backend, out.lse);
  for (size_t s = 0; s < shapes.size(); ++s) {
    const Seq& sh = shapes[s];
    for (int64_t r = 0; r < sh.q_len; ++r) {
      const int64_t t = seqs[s].q_begin + r;
      const int64_t visible = sh.kv_len - sh.q_len + r + 1;  // causal
      std::vector<double> extra(static_cast<size_t>(visible));
      for (int64_t j = 0; j < visible; ++j) extra[j] = j >= sh.weighted_from ? log_weight : 0.0;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / (H / KH);
        ASSERT_TRUE(testing::MatchesExactAttention(
            q.data() + (t * H + h) * D, ks[s].data() + kvh * D, vs[s].data() + kvh * D, KH * D,
            visible, D, scale, extra, o.data() + (t * H + h) * D, lse[t * H + h], softcap))
            << "sequence " << s << " row " << r << " head " << h;
      }
    }
  }
}

class CpuDecodeAttentionTest : public testing::CpuTargetTest {};
MANYSHOT_FOR_EVERY_CPU_TARGET(CpuDecodeAttentionTest);

TEST_P(CpuDecodeAttentionTest, DecodeRowsMatchExactAttention) {
  CpuBackend backend(2);
  std::mt19937 rng(7);
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(kv)));
    // Decode rows of several lengths (1 key; tile edges; 5000 keys x 8 heads: split across
    // threads) beside a 9-row prefill, in one call.
    CheckCall(backend, rng, 12, 12, 64, kv, {{1, 1, 1}, {1, 64, 1}, {1, 65, 30}, {9, 20, 1}});
    CheckCall(backend, rng, 8, 2, 64, kv, {{1, 5000, 1}, {1, 129, 0}});
    CheckCall(backend, rng, 6, 2, 80, kv, {{1, 300, 1}});
    CheckCall(backend, rng, 4, 1, 128, kv, {{1, 1000, 999}});
    CheckCall(backend, rng, 4, 2, 40, kv, {{1, 70, 1}});  // not a multiple of 16: the tiled path
  }
}

TEST_P(CpuDecodeAttentionTest, SoftCappedDecodeRowsMatchExactAttention) {
  // A cap of 2 against keys spread to +-6: most logits are bent by the cap, and the log-weight
  // comes after it (a kernel that capped the weighted logit, or skipped the cap, fails).
  CpuBackend backend(2);
  std::mt19937 rng(28);
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(kv)));
    CheckCall(backend, rng, 12, 12, 64, kv, {{1, 1, 1}, {1, 65, 30}, {9, 20, 1}}, 2.0f);
    CheckCall(backend, rng, 8, 2, 64, kv, {{1, 5000, 1}, {1, 129, 0}}, 2.0f);
    CheckCall(backend, rng, 4, 1, 256, kv, {{1, 1000, 999}, {1, 77, 40}}, 2.0f);
    CheckCall(backend, rng, 4, 2, 40, kv, {{1, 70, 1}, {3, 70, 9}}, 2.0f);  // the tiled path
  }
}

TEST_P(CpuDecodeAttentionTest, TheKernelCoversHeadDimensionsInSixteens) {
  // Every vector target; the scalar one leaves all head dimensions to the sgemm path.
  for (int64_t d = 16; d <= 256; d += 16) {
    EXPECT_EQ(cpu_internal::DecodeKernelSupports(d), GetParam() != "scalar") << d;
  }
  for (int64_t d : {8, 40, 72, 272}) EXPECT_FALSE(cpu_internal::DecodeKernelSupports(d)) << d;
}

}  // namespace
}  // namespace manyshot

// The CPU backend's AttendContext (the register-tiled kernels of cpu_context_kernel.h for head
// dimensions that are multiples of 16, the sgemm path otherwise) against exact softmax attention
// over the same stored K/V, within the rounding bound of exact_attention.h, on every kernel target
// this machine executes; with and without Gemma 2's soft-capped logits.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_context_kernel.h"
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

struct Case {
  int64_t heads, kv_heads, dim, len;
  std::vector<int64_t> q_lens;  // one sequence per entry
  DType kv;
  // Key j is scaled by 1 + growth * j / len, so later tiles' logits exceed the running maximum
  // by more than the kernels' slack again and again (the maximum is raised mid-context).
  float growth = 0.0f;
  float softcap = 0.0f;  // > 0: logits cap * tanh(logit / cap)
};

std::string Name(const Case& c) {
  std::string lens;
  for (int64_t l : c.q_lens) lens += std::to_string(l) + ",";
  return "heads=" + std::to_string(c.heads) + " kv_heads=" + std::to_string(c.kv_heads) +
         " dim=" + std::to_string(c.dim) + " len=" + std::to_string(c.len) + " q_lens=" + lens +
         " kv=" + std::string(DTypeName(c.kv)) + " growth=" + std::to_string(c.growth) +
         " softcap=" + std::to_string(c.softcap);
}

void CheckCase(CpuBackend& backend, std::mt19937& rng, const Case& c) {
  SCOPED_TRACE(Name(c));
  const int64_t D = c.dim, H = c.heads, KH = c.kv_heads, group = H / KH;
  int64_t tokens = 0;
  for (int64_t l : c.q_lens) tokens += l;
  // The sequences' own K/V are not read by AttendContext, but the front checks them.
  std::vector<Tensor> own_k, own_v;
  own_k.reserve(c.q_lens.size());
  own_v.reserve(c.q_lens.size());
  std::vector<AttentionSequence> seqs;
  int64_t begin = 0;
  for (int64_t l : c.q_lens) {
    own_k.push_back(Upload(backend, RandomValues(rng, l * KH * D), DType::kF32, {l, KH, D}));
    own_v.push_back(Upload(backend, RandomValues(rng, l * KH * D), DType::kF32, {l, KH, D}));
    AttentionSequence s;
    s.q_begin = begin;
    s.q_len = l;
    s.kv_len = l;
    s.context_from = 0;
    s.logit_softcap = c.softcap;
    seqs.push_back(s);
    begin += l;
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].k = &own_k[i];
    seqs[i].v = &own_v[i];
  }
  const auto q = RandomValues(rng, tokens * H * D);
  // Keys spread wider than values so the softmax is far from uniform.
  auto k_values = RandomValues(rng, c.len * KH * D, 2.0f);
  for (int64_t j = 0; j < c.len; ++j) {
    const float g = 1.0f + c.growth * static_cast<float>(j) / static_cast<float>(c.len);
    for (int64_t i = 0; i < KH * D; ++i) k_values[j * KH * D + i] *= g;
  }
  const auto k = RoundedTo(k_values, c.kv);
  const auto v = RoundedTo(RandomValues(rng, c.len * KH * D), c.kv);
  Tensor kt = Upload(backend, k, c.kv, {c.len, KH, D});
  Tensor vt = Upload(backend, v, c.kv, {c.len, KH, D});
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  AttentionState out{Poisoned(backend, DType::kF32, {tokens, H, D}),
                     Poisoned(backend, DType::kF32, {tokens, H})};
  backend.AttendContext(Upload(backend, q, DType::kF32, {tokens, H, D}), seqs,
                        AttentionContext{&kt, &vt, c.len, 0.0f}, scale, out);
  ASSERT_TRUE(backend.Synchronize().ok());
  const std::vector<float> o = Download(backend, out.o), lse = Download(backend, out.lse);

  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kvh = h / group;
      ASSERT_TRUE(testing::MatchesExactAttention(
          q.data() + (t * H + h) * D, k.data() + kvh * D, v.data() + kvh * D, KH * D, c.len, D,
          scale, {}, o.data() + (t * H + h) * D, lse[t * H + h], c.softcap))
          << "token " << t << " head " << h;
    }
  }
}

class CpuContextAttentionTest : public testing::CpuTargetTest {};
MANYSHOT_FOR_EVERY_CPU_TARGET(CpuContextAttentionTest);

TEST_P(CpuContextAttentionTest, MatchesExactAttentionForEveryKvDtypeShapeAndBatch) {
  CpuBackend backend(2);
  std::mt19937 rng(99);
  std::vector<Case> cases;
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16}) {
    // Batch 1 (one query's rows, a decode row), a batch crossing the 32-row blocks, and GQA
    // groups whose rows share a kv head; context lengths around the 128-key tiles.
    cases.push_back({12, 12, 64, 1000, {26}, kv});
    cases.push_back({4, 4, 64, 1, {1}, kv});
    cases.push_back({4, 4, 32, 129, {5, 1, 33}, kv});
    cases.push_back({8, 2, 64, 700, {6, 1}, kv});
    cases.push_back({6, 2, 80, 127, {9, 30}, kv});
    cases.push_back({8, 2, 128, 300, {3, 4}, kv});
    cases.push_back({2, 1, 16, 257, {40}, kv});
    cases.push_back({4, 2, 40, 200, {7}, kv});  // not a multiple of 16: the sgemm path
    // Queries of 1 to 5 rows and 35 (32 + 3): every remainder after the P·V passes of 6 rows.
    cases.push_back({4, 4, 64, 300, {1, 2, 3, 4, 5, 35}, kv});
  }
  for (const Case& c : cases) CheckCase(backend, rng, c);
}

TEST_P(CpuContextAttentionTest, MatchesExactAttentionWhenLaterKeysRaiseTheMaximum) {
  // Logits growing along the context (to 11x and 301x their first tile's spread): the running
  // maximum is raised by more than the kernels' slack in tile after tile and differs between the
  // split-keys chunks, for one query (split keys) and for many rows (row blocks).
  CpuBackend backend(2);
  std::mt19937 rng(7);
  for (DType kv : {DType::kF32, DType::kBF16}) {
    for (float growth : {10.0f, 300.0f}) {
      CheckCase(backend, rng, {12, 12, 64, 3000, {26}, kv, growth});
      CheckCase(backend, rng, {4, 2, 64, 1000, {1, 3}, kv, growth});
      CheckCase(backend, rng, {4, 4, 32, 777, {70, 9}, kv, growth});
    }
  }
}

TEST_P(CpuContextAttentionTest, SoftCappedLogitsMatchExactAttention) {
  // A cap of 1 against logits spread over several units (and growing along the context): most
  // logits are bent by the cap, so a kernel that skipped it, or capped after the max, fails.
  CpuBackend backend(2);
  std::mt19937 rng(28);
  for (DType kv : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (float growth : {0.0f, 10.0f}) {
      CheckCase(backend, rng, {12, 12, 64, 1000, {26}, kv, growth, 1.0f});  // split keys
      CheckCase(backend, rng, {8, 2, 64, 700, {6, 1}, kv, growth, 1.0f});
      CheckCase(backend, rng, {4, 4, 32, 777, {70, 9}, kv, growth, 1.0f});  // row blocks
      CheckCase(backend, rng, {8, 2, 128, 300, {40, 3}, kv, growth, 1.0f});
      CheckCase(backend, rng, {4, 2, 40, 200, {7, 90}, kv, growth, 1.0f});  // the sgemm path
    }
  }
}

TEST_P(CpuContextAttentionTest, TheTiledKernelCoversHeadDimensionsInSixteens) {
  // Every vector target; the scalar one leaves all head dimensions to the sgemm path.
  for (int64_t d = 16; d <= 128; d += 16) {
    EXPECT_EQ(cpu_internal::ContextKernelSupports(d), GetParam() != "scalar") << d;
  }
  for (int64_t d : {8, 40, 72, 144}) EXPECT_FALSE(cpu_internal::ContextKernelSupports(d)) << d;
}

}  // namespace
}  // namespace manyshot

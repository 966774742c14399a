// The biased-attention kernel of engine/cuda/biased_attention_kernels.cu (T5's AttendBiased and
// BLOOM's ALiBi on the GPU), run on the SIMT emulator through LaunchBiasedAttention, against a
// double-precision reference of the contract in biased_attention_kernels.h: every bias kind,
// causal and not, log-weights, rows whose every key is masked, f32 and 16-bit K/V, head_dim up
// to 256 (over the default shared memory), GQA, several problems in one launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "engine/cuda/biased_attention_kernels.h"
#include "testing/simt/simt.h"
#include "tests/cuda/device_buffer.h"

namespace {

using manyshot::cuda::BiasedAttnParams;
using manyshot::cuda::BiasedProblem;
using manyshot::cuda::BiasKind;
using manyshot::cuda::ElemType;
using simt::Buffer;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Problem {
  int rows, num_keys;
  BiasKind kind = BiasKind::kNone;
  int causal_base = -1;
  int weighted_from = INT32_MAX;
  float log_weight = 0.0f;
};

struct Case {
  std::string name;
  ElemType kv_type;
  int heads, kv_heads, head_dim;
  std::vector<Problem> problems;
};

struct ProblemData {
  Buffer k, v, bias, slopes, key_pos, query_pos;
  int bias_row_len = 0;  // elements per (head, row) of a dense bias, or per head of a relative one
};

double BiasOf(const Problem& pr, const ProblemData& d, int h, int c, int j) {
  switch (pr.kind) {
    case BiasKind::kDense:
      return d.bias.Get((int64_t{h} * pr.rows + c) * pr.num_keys + j);
    case BiasKind::kRelative:
      return d.bias.Get(int64_t{h} * (pr.rows + pr.num_keys - 1) + j - c + pr.rows - 1);
    case BiasKind::kAlibi: {
      const auto* kp = static_cast<const int32_t*>(d.key_pos.p);
      const auto* qp = static_cast<const int32_t*>(d.query_pos.p);
      return d.slopes.Get(h) * static_cast<float>(kp[j] - qp[c]);
    }
    default:
      return 0.0;
  }
}

void RunCase(const Case& c, simt::Order order) {
  SCOPED_TRACE(c.name + (order == simt::Order::kForward ? " (forward)" : " (reverse)"));
  simt::SetOrder(order);
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(c.name)));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int dim = c.head_dim, group = c.heads / c.kv_heads;
  int tokens = 0;
  for (const Problem& pr : c.problems) tokens += pr.rows;
  Buffer q(ElemType::kF32, int64_t{tokens} * c.heads * dim);
  q.Fill(rng, -1.0f, 1.0f);
  Buffer o(ElemType::kF32, int64_t{tokens} * c.heads * dim);
  Buffer lse(ElemType::kF32, int64_t{tokens} * c.heads);

  BiasedAttnParams p;
  p.q = q.p;
  p.tokens = tokens;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = dim;
  p.scale = 2.0f / std::sqrt(static_cast<float>(dim));
  p.o = o.p;
  p.lse = static_cast<float*>(lse.p);
  p.kv_type = c.kv_type;
  p.num_problems = static_cast<int>(c.problems.size());
  std::vector<ProblemData> data(c.problems.size());
  int row = 0;
  for (size_t i = 0; i < c.problems.size(); ++i) {
    const Problem& pr = c.problems[i];
    ProblemData& d = data[i];
    d.k = Buffer(c.kv_type, int64_t{pr.num_keys} * c.kv_heads * dim);
    d.v = Buffer(c.kv_type, int64_t{pr.num_keys} * c.kv_heads * dim);
    d.k.Fill(rng, -1.0f, 1.0f);
    d.v.Fill(rng, -1.0f, 1.0f);
    BiasedProblem& b = p.problems[i];
    b.q_begin = row;
    b.rows = pr.rows;
    b.num_keys = pr.num_keys;
    b.causal_base = pr.causal_base;
    b.weighted_from = pr.weighted_from;
    b.log_weight = pr.log_weight;
    b.bias_kind = pr.kind;
    b.k = d.k.p;
    b.v = d.v.p;
    if (pr.kind == BiasKind::kDense || pr.kind == BiasKind::kRelative) {
      const int64_t per_head =
          pr.kind == BiasKind::kDense ? int64_t{pr.rows} * pr.num_keys : pr.rows + pr.num_keys - 1;
      d.bias = Buffer(ElemType::kF32, c.heads * per_head);
      for (int64_t e = 0; e < d.bias.n; ++e) {
        // Some -inf masks; in a dense bias, row 0 of head 0 fully masked (o = 0, lse = -inf).
        const bool masked = pr.kind == BiasKind::kDense && e < pr.num_keys;
        d.bias.Set(e, masked || e % 7 == 3 ? -std::numeric_limits<float>::infinity() : u(rng));
      }
      b.bias = static_cast<const float*>(d.bias.p);
    }
    if (pr.kind == BiasKind::kAlibi) {
      d.slopes = Buffer(ElemType::kF32, c.heads);
      for (int h = 0; h < c.heads; ++h) d.slopes.Set(h, std::exp2(-8.0f * (h + 1) / c.heads));
      d.key_pos = Buffer(ElemType::kF32, pr.num_keys);  // int32 storage, 4 bytes each
      d.query_pos = Buffer(ElemType::kF32, pr.rows);
      auto* kp = static_cast<int32_t*>(d.key_pos.p);
      auto* qp = static_cast<int32_t*>(d.query_pos.p);
      for (int j = 0; j < pr.num_keys; ++j) kp[j] = 3 + j;  // right-aligned groups: shifted
      for (int r = 0; r < pr.rows; ++r) qp[r] = 3 + pr.num_keys - pr.rows + r;
      b.slopes = static_cast<const float*>(d.slopes.p);
      b.key_pos = kp;
      b.query_pos = qp;
    }
    row += pr.rows;
  }

  ASSERT_EQ(manyshot::cuda::LaunchBiasedAttention(p, nullptr), cudaSuccess)
      << simt::LastLaunchError();

  simt::AttentionErrors errors;
  row = 0;
  for (size_t i = 0; i < c.problems.size(); ++i) {
    const Problem& pr = c.problems[i];
    const ProblemData& d = data[i];
    for (int r = 0; r < pr.rows; ++r, ++row) {
      for (int h = 0; h < c.heads; ++h) {
        const int64_t off = int64_t{row} * c.heads + h;
        const int kvh = h / group;
        std::vector<double> logit(pr.num_keys, -kInf);
        double mx = -kInf;
        for (int j = 0; j < pr.num_keys; ++j) {
          if (pr.causal_base >= 0 && j > pr.causal_base + r) continue;
          double dot = 0.0;
          for (int e = 0; e < dim; ++e) {
            dot += q.Get(off * dim + e) * d.k.Get((int64_t{j} * c.kv_heads + kvh) * dim + e);
          }
          logit[j] = p.scale * dot + (j >= pr.weighted_from ? pr.log_weight : 0.0) +
                     BiasOf(pr, d, h, r, j);
          mx = std::max(mx, logit[j]);
        }
        std::vector<double> ref(dim, 0.0);
        double ref_lse = -kInf;
        if (mx > -kInf) {
          double sum = 0.0;
          for (int j = 0; j < pr.num_keys; ++j) {
            const double w = std::exp(logit[j] - mx);
            sum += w;
            for (int e = 0; e < dim; ++e) {
              ref[e] += w * d.v.Get((int64_t{j} * c.kv_heads + kvh) * dim + e);
            }
          }
          for (double& x : ref) x /= sum;
          ref_lse = mx + std::log(sum);
        }
        ASSERT_TRUE(errors.Add(o, lse, off, dim, ref, ref_lse)) << "row " << row << " head " << h;
      }
    }
  }
  errors.ExpectWithin(c.kv_type);
}

// gtest prints a failing case by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EmulatedBiasedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(EmulatedBiasedAttentionTest, MatchesTheDoublePrecisionReference) {
  RunCase(GetParam(), simt::Order::kForward);
  RunCase(GetParam(), simt::Order::kReverse);
  simt::SetOrder(simt::Order::kForward);
}

std::vector<Case> Cases() {
  const ElemType bf16 = ElemType::kBF16, f16 = ElemType::kF16, f32 = ElemType::kF32;
  std::vector<Case> cases;
  // T5 encoder self-attention: a relative bias over all keys; T5 decoder: causal.
  cases.push_back({"RelativeF32D64", f32, 4, 4, 64, {{9, 9, BiasKind::kRelative}}});
  cases.push_back({"RelativeCausalBf16D64", bf16, 2, 2, 64, {{40, 40, BiasKind::kRelative, 0}}});
  // A dense bias with masks and a fully masked row; two problems of different lengths.
  cases.push_back({"DenseTwoProblemsF32D48",
                   f32,
                   2,
                   1,
                   48,
                   {{5, 37, BiasKind::kDense}, {3, 70, BiasKind::kDense}}});
  cases.push_back({"NoBiasF16D100Gqa", f16, 4, 2, 100, {{6, 33, BiasKind::kNone}}});
  // ALiBi (BLOOM): own keys causal with a log-weight from weighted_from, shifted positions.
  Problem alibi{20, 26, BiasKind::kAlibi, 6, 4, std::log(5.0f)};
  cases.push_back({"AlibiOwnBf16D64", bf16, 4, 4, 64, {alibi}});
  cases.push_back({"AlibiContextF32D64", f32, 2, 1, 64, {{3, 50, BiasKind::kAlibi}}});
  // head_dim 256: shared memory over the default 48 KiB.
  cases.push_back({"NoBiasF32D256", f32, 2, 1, 256, {{4, 20, BiasKind::kNone}}});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Kernel, EmulatedBiasedAttentionTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.name;
                         });

}  // namespace

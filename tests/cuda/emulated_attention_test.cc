// The rescaled-attention kernels of engine/cuda/attention_kernels.cu (FlashKernel on tensor
// cores, GenericKernel, the split-K FinalizeKernel), run on the SIMT emulator through their real
// launch functions, against a double-precision reference of the contract in
// attention_kernels.h. Every shape that picks another kernel configuration is here: 16-bit K/V at
// head_dim 64 / 80 / 128 in the three tile configurations (rows per kv head <= 16, <= 64, more),
// f32 and misaligned K/V on the generic kernel, unsplit and split key ranges, GQA, rows that see
// no context, and both thread schedules of the emulator.
//
// Tolerances (relative to the largest |v|, and absolute on lse) follow the backend parity suite:
// f32 2e-5, f16 4e-3, bf16 2e-2 for o (the tensor-core kernel rounds q and the probabilities to
// the K/V type); lse 1e-4, 1e-2 and 5e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "engine/core/dtype.h"
#include "engine/cuda/attention_kernels.h"
#include "testing/simt/simt.h"
#include "tests/cuda/device_buffer.h"

namespace {

using manyshot::cuda::AttnParams;
using manyshot::cuda::AttnSequence;
using manyshot::cuda::ElemType;
using simt::Buffer;

struct Seq {
  int q_len, kv_len;
  int weighted_from = 0;        // own
  float own_log_weight = 0.0f;  // own
  int context_from = 0;         // context
};

struct Case {
  std::string name;
  ElemType kv_type;
  int heads, kv_heads, head_dim;
  std::vector<Seq> seqs;
  int context_len = -1;  // >= 0: AttendContext over a shared context of this many keys
  ElemType o_type = ElemType::kF32;
  size_t misalign = 0;   // bytes added to the K/V addresses (16-bit K/V: 2 leaves the fast path)
  int sms = 132;         // device size the runtime reports (small: fewer splits)
  float softcap = 0.0f;  // > 0: logits soft-capped (Gemma 2)
};

// Softmax attention of one q row over keys [0, n) of (k, v) at kv head kvh, in double.
void Reference(const Buffer& q, int64_t q_off, const Buffer& k, const Buffer& v, int kvh,
               int kv_heads, int dim, int n, double scale, int weighted_from, double weight,
               double softcap, std::vector<double>& o, double& lse) {
  o.assign(dim, 0.0);
  if (n <= 0) {
    lse = -std::numeric_limits<double>::infinity();
    return;
  }
  std::vector<double> logit(n);
  double mx = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < n; ++j) {
    double dot = 0.0;
    const int64_t kb = (static_cast<int64_t>(j) * kv_heads + kvh) * dim;
    for (int d = 0; d < dim; ++d) dot += q.Get(q_off + d) * k.Get(kb + d);
    double capped = scale * dot;
    if (softcap > 0.0) capped = softcap * std::tanh(capped / softcap);
    logit[j] = capped + (j >= weighted_from ? weight : 0.0);
    mx = std::max(mx, logit[j]);
  }
  double sum = 0.0;
  for (int j = 0; j < n; ++j) {
    const double w = std::exp(logit[j] - mx);
    sum += w;
    const int64_t vb = (static_cast<int64_t>(j) * kv_heads + kvh) * dim;
    for (int d = 0; d < dim; ++d) o[d] += w * v.Get(vb + d);
  }
  for (double& x : o) x /= sum;
  lse = mx + std::log(sum);
}

void RunCase(const Case& c, simt::Order order,
             simt::CopyTiming timing = simt::CopyTiming::kAtWait) {
  SCOPED_TRACE(c.name + (order == simt::Order::kForward ? " (forward" : " (reverse") +
               (timing == simt::CopyTiming::kAtWait ? ", copies at wait)" : ", copies at issue)"));
  simt::SetOrder(order);
  simt::SetCopyTiming(timing);
  simt::Props().sms = c.sms;
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(c.name)));
  const int dim = c.head_dim, group = c.heads / c.kv_heads;
  // Two rows of q nobody attends for (before and after the sequences): they stay untouched.
  int tokens = 1;
  for (const Seq& s : c.seqs) tokens += s.q_len;
  tokens += 1;
  Buffer q(ElemType::kF32, int64_t{tokens} * c.heads * dim);
  q.Fill(rng, -1.0f, 1.0f);
  Buffer o(c.o_type, int64_t{tokens} * c.heads * dim);
  Buffer lse(ElemType::kF32, int64_t{tokens} * c.heads);

  const bool context = c.context_len >= 0;
  std::vector<Buffer> ks, vs;
  auto make_kv = [&](int keys) {
    ks.emplace_back(c.kv_type, int64_t{keys} * c.kv_heads * dim, c.misalign);
    vs.emplace_back(c.kv_type, int64_t{keys} * c.kv_heads * dim, c.misalign);
    ks.back().Fill(rng, -1.0f, 1.0f);
    vs.back().Fill(rng, -1.0f, 1.0f);
  };
  if (context) make_kv(c.context_len);

  AttnParams p;
  p.q = q.p;
  p.q_type = ElemType::kF32;
  p.tokens = tokens;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = dim;
  p.scale = 2.0f / std::sqrt(static_cast<float>(dim));  // sharper than 1/sqrt(d): a real max
  p.softcap = c.softcap;
  p.o = o.p;
  p.o_type = c.o_type;
  p.lse = static_cast<float*>(lse.p);
  p.kv_type = c.kv_type;
  p.num_sequences = static_cast<int>(c.seqs.size());
  int row = 1;
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    const Seq& s = c.seqs[i];
    AttnSequence& a = p.sequences[i];
    a.q_begin = row;
    a.q_len = s.q_len;
    a.kv_len = s.kv_len;
    a.weighted_from = s.weighted_from;
    a.own_log_weight = s.own_log_weight;
    a.context_from = s.context_from;
    if (!context) {
      make_kv(s.kv_len);
      a.k = ks.back().p;
      a.v = vs.back().p;
    }
    row += s.q_len;
  }

  const cudaError_t err =
      context ? manyshot::cuda::LaunchAttendContext(p, ks[0].p, vs[0].p, c.context_len, nullptr)
              : manyshot::cuda::LaunchAttendOwn(p, nullptr);
  ASSERT_EQ(err, cudaSuccess) << simt::LastLaunchError();

  simt::AttentionErrors errors;
  std::vector<double> ref;
  row = 1;
  for (size_t i = 0; i < c.seqs.size(); ++i) {
    const Seq& s = c.seqs[i];
    for (int r = 0; r < s.q_len; ++r, ++row) {
      const int own = s.kv_len - s.q_len + r;
      for (int h = 0; h < c.heads; ++h) {
        const int64_t off = int64_t{row} * c.heads + h;
        double ref_lse;
        if (context) {
          const int n = own >= s.context_from ? c.context_len : 0;
          Reference(q, off * dim, ks[0], vs[0], h / group, c.kv_heads, dim, n, p.scale, 0, 0.0,
                    c.softcap, ref, ref_lse);
        } else {
          Reference(q, off * dim, ks[i], vs[i], h / group, c.kv_heads, dim,
                    std::min(own + 1, s.kv_len), p.scale, s.weighted_from, s.own_log_weight,
                    c.softcap, ref, ref_lse);
        }
        ASSERT_TRUE(errors.Add(o, lse, off, dim, ref, ref_lse)) << "row " << row << " head " << h;
      }
    }
  }
  errors.ExpectWithin(c.kv_type);
  for (int untouched_row : {0, tokens - 1}) {
    for (int64_t i = 0; i < int64_t{c.heads} * dim; ++i) {
      ASSERT_TRUE(o.Untouched(int64_t{untouched_row} * c.heads * dim + i))
          << "row " << untouched_row << " was written";
    }
  }
}

// gtest prints a failing case by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EmulatedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(EmulatedAttentionTest, MatchesTheDoublePrecisionReference) {
  const simt::Counters before = simt::Count();
  for (simt::Order order : {simt::Order::kForward, simt::Order::kReverse}) {
    for (simt::CopyTiming timing : {simt::CopyTiming::kAtWait, simt::CopyTiming::kAtIssue}) {
      RunCase(GetParam(), order, timing);
    }
  }
  simt::SetOrder(simt::Order::kForward);
  simt::SetCopyTiming(simt::CopyTiming::kAtWait);
  simt::Props().sms = 132;
  // A 16-bit case on the fast path really ran on (emulated) tensor cores.
  const Case& c = GetParam();
  const bool fast = c.kv_type != ElemType::kF32 && c.misalign == 0 && c.context_len != 0 &&
                    (c.head_dim == 64 || c.head_dim == 80 || c.head_dim == 128);
  if (fast) {
    EXPECT_GT(simt::Count().mma, before.mma);
    EXPECT_GT(simt::Count().cp_async, before.cp_async);
  } else {
    EXPECT_EQ(simt::Count().mma, before.mma);
  }
}

// The generic kernel's shared memory grows with head_dim: a launch at head_dim 256 (84 KiB, over
// the default 48 KiB) after launches of the same kernel at smaller head_dims must still be
// allowed its shared memory (the limit is raised for the kernel, not for one launch size).
TEST(EmulatedAttentionLaunchTest, ALargerHeadDimAfterASmallerOneOnTheSameKernel) {
  const ElemType f32 = ElemType::kF32;
  RunCase({"GrowF32D32", f32, 2, 1, 32, {{2, 2}}, 33}, simt::Order::kForward);
  RunCase({"GrowF32D128", f32, 2, 1, 128, {{2, 2}}, 33}, simt::Order::kForward);
  RunCase({"GrowF32D256", f32, 2, 1, 256, {{2, 2}}, 33}, simt::Order::kForward);
  RunCase({"GrowF32D200", f32, 2, 1, 200, {{2, 2}}, 33}, simt::Order::kForward);
  simt::Props().sms = 132;
}

// A launch that fails is reported by its own call only: the next good launch succeeds (the
// runtime's last error is taken when a launch fails, not left for the next cudaGetLastError).
TEST(EmulatedAttentionLaunchTest, AFailedLaunchIsNotReportedAgainByTheNextOne) {
  const ElemType bf16 = ElemType::kBF16;
  const size_t saved = simt::Props().max_param_bytes;
  simt::Props().max_param_bytes = 256;  // every attention launch is refused
  Buffer q(ElemType::kF32, 2 * 64), o(ElemType::kF32, 2 * 64), k(bf16, 64), v(bf16, 64);
  AttnParams p;
  p.q = q.p;
  p.tokens = 2;
  p.heads = 1;
  p.kv_heads = 1;
  p.head_dim = 64;
  p.o = o.p;
  p.kv_type = bf16;
  p.num_sequences = 1;
  p.sequences[0].q_len = 2;
  p.sequences[0].kv_len = 2;
  EXPECT_EQ(manyshot::cuda::LaunchAttendContext(p, k.p, v.p, 1, nullptr), cudaErrorInvalidValue);
  simt::Props().max_param_bytes = saved;
  RunCase({"AfterAFailedLaunch", bf16, 2, 1, 64, {{2, 2}}, 20}, simt::Order::kForward);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

std::vector<Case> Cases() {
  const ElemType bf16 = ElemType::kBF16, f16 = ElemType::kF16, f32 = ElemType::kF32;
  std::vector<Case> cases;
  // Context attention (AttendContext), tensor-core kernel: decode (1 row, config small), a few
  // rows (config mid), a batch (config big); context lengths off the 64-key tiles; split and not.
  cases.push_back({"ContextDecodeBf16D64", bf16, 4, 2, 64, {{1, 40}}, 700});
  cases.push_back({"ContextDecodeF16D128", f16, 2, 1, 128, {{1, 9}, {1, 30}}, 333});
  cases.push_back({"ContextFewRowsBf16D80", bf16, 4, 2, 80, {{6, 6}, {5, 20}}, 301});
  cases.push_back({"ContextBatchF16D64Gqa", f16, 8, 2, 64, {{12, 12}, {9, 40}, {16, 16}}, 200});
  cases.push_back({"ContextBatchBf16D128", bf16, 2, 1, 128, {{40, 40}, {30, 30}}, 130});
  cases.push_back({"ContextBatchBf16D80", bf16, 4, 2, 80, {{25, 25}, {15, 15}}, 100});
  // A long context at batch 1: many splits merged by FinalizeKernel.
  cases.push_back({"ContextLongDecodeBf16D128", bf16, 2, 1, 128, {{1, 1}}, 3000});
  // Rows before context_from see nothing (o = 0, lse = -inf), the rest the whole context.
  Case from{"ContextFromBf16D64", bf16, 2, 1, 64, {{8, 8}, {4, 4}}, 150};
  from.seqs[0].context_from = 5;  // rows 0..4 blind
  from.seqs[1].context_from = 9;  // all blind
  cases.push_back(from);
  cases.push_back({"EmptyContextBf16D64", bf16, 2, 1, 64, {{3, 3}}, 0});
  // Unsplit on a one-SM device; bf16 output.
  Case unsplit{"ContextUnsplitBf16D64BfOut", bf16, 2, 1, 64, {{3, 3}}, 600};
  unsplit.sms = 1;
  unsplit.o_type = bf16;
  cases.push_back(unsplit);
  // Generic kernel: f32 K/V (several head dims), 16-bit K/V misaligned or at another head_dim.
  cases.push_back({"ContextF32D64", f32, 4, 2, 64, {{1, 1}, {5, 5}}, 90});
  cases.push_back({"ContextF32D40", f32, 2, 2, 40, {{3, 7}}, 70});
  Case mis{"ContextMisalignedBf16D64", bf16, 2, 1, 64, {{2, 2}}, 80};
  mis.misalign = 2;
  cases.push_back(mis);
  cases.push_back({"ContextF16D96", f16, 2, 1, 96, {{2, 2}}, 50});
  // Own attention (AttendOwn): causal, log-weight from weighted_from, several sequences.
  Case own{"OwnPrefillBf16D64", bf16, 4, 2, 64, {{20, 20}, {7, 30}, {1, 45}}};
  own.seqs[0].weighted_from = 1;
  own.seqs[0].own_log_weight = std::log(7.0f);
  own.seqs[1].weighted_from = 1;
  own.seqs[1].own_log_weight = std::log(3.0f);
  cases.push_back(own);
  cases.push_back({"OwnDecodeF16D128", f16, 2, 1, 128, {{1, 70}, {1, 5}}});
  cases.push_back({"OwnLongBf16D80", bf16, 2, 2, 80, {{70, 70}}});
  Case own32{"OwnF32D64", f32, 4, 2, 64, {{9, 9}, {3, 40}}};
  own32.seqs[0].weighted_from = 2;
  own32.seqs[0].own_log_weight = 1.5f;
  cases.push_back(own32);
  // Soft-capped logits (Gemma 2), a cap of 1 against logits of about that size: on the tensor-core
  // kernel (own with a log-weight, and context) and on the generic one.
  Case capped_own{"OwnSoftcapBf16D64", bf16, 4, 2, 64, {{20, 20}, {1, 45}}};
  capped_own.softcap = 1.0f;
  capped_own.seqs[0].weighted_from = 1;
  capped_own.seqs[0].own_log_weight = std::log(5.0f);
  cases.push_back(capped_own);
  Case capped_context{"ContextSoftcapBf16D128", bf16, 2, 1, 128, {{3, 3}, {2, 2}}, 300};
  capped_context.softcap = 1.0f;
  cases.push_back(capped_context);
  Case capped_generic{"OwnSoftcapF32D40", f32, 2, 1, 40, {{9, 9}, {1, 33}}};
  capped_generic.softcap = 1.0f;
  capped_generic.seqs[0].weighted_from = 2;
  capped_generic.seqs[0].own_log_weight = 1.5f;
  cases.push_back(capped_generic);
  Case capped_generic_context{"ContextSoftcapF32D64", f32, 4, 2, 64, {{4, 4}}, 90};
  capped_generic_context.softcap = 1.0f;
  cases.push_back(capped_generic_context);
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Kernels, EmulatedAttentionTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.name;
                         });

}  // namespace

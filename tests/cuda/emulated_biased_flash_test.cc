// The tensor-core path of biased attention (attention_kernels.cu's flash kernel with the bias as
// its variant, attention_variants.cuh) on the SIMT emulator, for each variant against a
// double-precision reference and against the scalar BiasedKernel on the same inputs: T5's
// relative bias from bidirectional and causal buckets, dense biases with -inf masks (SAICL) and
// fully masked rows, ALiBi with BLOOM's slopes for several head counts, own keys with a
// log-weight from weighted_from (structured prompting's rescaling), soft-capping with ALiBi, the
// three tile configurations, split-K on and off, odd lengths, f16 and bf16, GQA; and the cases
// that stay on the scalar kernel (f32 K/V, other head_dims, misaligned K/V).
#include <gtest/gtest.h>

#include <algorithm>
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

// How a problem's bias is made.
enum class Bias {
  kNone,
  kT5Bidirectional,  // diagonals from T5's encoder buckets (kRelative)
  kT5Causal,         // diagonals from T5's decoder buckets (kRelative)
  kDenseMasked,      // dense, with -inf masks and row 0 of head 0 fully masked (kDense)
  kAlibi,
};

struct Problem {
  int rows, num_keys;
  Bias bias = Bias::kNone;
  int causal_base = -1;
  int weighted_from = INT32_MAX;
  float log_weight = 0.0f;
};

struct Case {
  std::string name;
  ElemType kv_type;
  int heads, kv_heads, head_dim;
  std::vector<Problem> problems;
  int sms = 132;  // device size the runtime reports: 1 keeps a launch unsplit
  float softcap = 0.0f;
  size_t misalign = 0;  // bytes added to the K/V addresses (2 leaves the tensor-core path)
  bool expect_split = false;
};

// T5's relative position bucket of key - query (HF's _relative_position_bucket): exact buckets
// for small distances, logarithmic ones up to max_distance; bidirectional splits the buckets
// between keys before and after the query.
int T5Bucket(int relative, bool bidirectional, int num_buckets = 32, int max_distance = 128) {
  int bucket = 0;
  int n = num_buckets;
  if (bidirectional) {
    n /= 2;
    if (relative > 0) bucket += n;
    relative = std::abs(relative);
  } else {
    relative = -std::min(relative, 0);
  }
  const int max_exact = n / 2;
  if (relative < max_exact) return bucket + relative;
  const int large =
      max_exact +
      static_cast<int>(std::log(static_cast<float>(relative) / max_exact) /
                       std::log(static_cast<float>(max_distance) / max_exact) * (n - max_exact));
  return bucket + std::min(large, n - 1);
}

// BLOOM's ALiBi slopes for any head count (the power-of-two closest below, then interleaved).
std::vector<float> AlibiSlopes(int heads) {
  int pow2 = 1;
  while (pow2 * 2 <= heads) pow2 *= 2;
  std::vector<float> slopes;
  const double base = std::pow(2.0, -8.0 / pow2);
  for (int i = 1; i <= pow2; ++i) slopes.push_back(static_cast<float>(std::pow(base, i)));
  const double extra = std::pow(2.0, -4.0 / pow2);
  for (int i = 1; static_cast<int>(slopes.size()) < heads; i += 2) {
    slopes.push_back(static_cast<float>(std::pow(extra, i)));
  }
  return slopes;
}

BiasKind KindOf(Bias b) {
  switch (b) {
    case Bias::kT5Bidirectional:
    case Bias::kT5Causal:
      return BiasKind::kRelative;
    case Bias::kDenseMasked:
      return BiasKind::kDense;
    case Bias::kAlibi:
      return BiasKind::kAlibi;
    default:
      return BiasKind::kNone;
  }
}

struct ProblemData {
  Buffer k, v, bias, slopes, key_pos, query_pos;
};

double BiasOf(const Problem& pr, const ProblemData& d, int h, int c, int j) {
  switch (KindOf(pr.bias)) {
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

// The bias inputs of problem pr as the models make them.
void MakeBias(const Case& c, const Problem& pr, std::mt19937& rng, ProblemData& d,
              BiasedProblem& b) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (pr.bias == Bias::kT5Bidirectional || pr.bias == Bias::kT5Causal) {
    // A learned [bucket, head] table, spread over the diagonals key - query.
    const bool bidirectional = pr.bias == Bias::kT5Bidirectional;
    std::vector<float> table(32 * c.heads);
    for (float& x : table) x = 2.0f * u(rng);
    const int diagonals = pr.rows + pr.num_keys - 1;
    d.bias = Buffer(ElemType::kF32, int64_t{c.heads} * diagonals);
    for (int h = 0; h < c.heads; ++h) {
      for (int e = 0; e < diagonals; ++e) {
        const int relative = e - (pr.rows - 1);  // key - query of diagonal e
        d.bias.Set(int64_t{h} * diagonals + e,
                   table[T5Bucket(relative, bidirectional) * c.heads + h]);
      }
    }
    b.bias = static_cast<const float*>(d.bias.p);
  } else if (pr.bias == Bias::kDenseMasked) {
    d.bias = Buffer(ElemType::kF32, int64_t{c.heads} * pr.rows * pr.num_keys);
    for (int64_t e = 0; e < d.bias.n; ++e) {
      const bool masked = e < pr.num_keys || e % 5 == 2;
      d.bias.Set(e, masked ? -std::numeric_limits<float>::infinity() : u(rng));
    }
    b.bias = static_cast<const float*>(d.bias.p);
  } else if (pr.bias == Bias::kAlibi) {
    const std::vector<float> slopes = AlibiSlopes(c.heads);
    d.slopes = Buffer(ElemType::kF32, c.heads);
    for (int h = 0; h < c.heads; ++h) d.slopes.Set(h, slopes[h]);
    d.key_pos = Buffer(ElemType::kF32, std::max(1, pr.num_keys));  // int32 storage
    d.query_pos = Buffer(ElemType::kF32, pr.rows);
    auto* kp = static_cast<int32_t*>(d.key_pos.p);
    auto* qp = static_cast<int32_t*>(d.query_pos.p);
    for (int j = 0; j < pr.num_keys; ++j) kp[j] = 5 + j;  // shifted, as right-aligned groups are
    for (int r = 0; r < pr.rows; ++r) qp[r] = 5 + pr.num_keys - pr.rows + r;
    b.slopes = static_cast<const float*>(d.slopes.p);
    b.key_pos = kp;
    b.query_pos = qp;
  }
}

// One case's inputs on the device and its launch parameters.
struct Inputs {
  Buffer q;
  std::vector<ProblemData> data;
  BiasedAttnParams p;
};

void MakeInputs(const Case& c, Inputs& in) {
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(c.name)));
  const int dim = c.head_dim;
  int tokens = 0;
  for (const Problem& pr : c.problems) tokens += pr.rows;
  in.q = Buffer(ElemType::kF32, int64_t{tokens} * c.heads * dim);
  in.q.Fill(rng, -1.0f, 1.0f);
  BiasedAttnParams& p = in.p;
  p.q = in.q.p;
  p.tokens = tokens;
  p.heads = c.heads;
  p.kv_heads = c.kv_heads;
  p.head_dim = dim;
  p.scale = 2.0f / std::sqrt(static_cast<float>(dim));  // sharper than 1/sqrt(d): a real max
  p.softcap = c.softcap;
  p.kv_type = c.kv_type;
  p.num_problems = static_cast<int>(c.problems.size());
  in.data.resize(c.problems.size());
  int row = 0;
  for (size_t i = 0; i < c.problems.size(); ++i) {
    const Problem& pr = c.problems[i];
    ProblemData& d = in.data[i];
    const int64_t kv_elems = std::max<int64_t>(1, int64_t{pr.num_keys} * c.kv_heads * dim);
    d.k = Buffer(c.kv_type, kv_elems, c.misalign);
    d.v = Buffer(c.kv_type, kv_elems, c.misalign);
    d.k.Fill(rng, -1.0f, 1.0f);
    d.v.Fill(rng, -1.0f, 1.0f);
    BiasedProblem& b = p.problems[i];
    b.q_begin = row;
    b.rows = pr.rows;
    b.num_keys = pr.num_keys;
    b.causal_base = pr.causal_base;
    b.weighted_from = pr.weighted_from;
    b.log_weight = pr.log_weight;
    b.bias_kind = KindOf(pr.bias);
    b.k = d.k.p;
    b.v = d.v.p;
    MakeBias(c, pr, rng, d, b);
    row += pr.rows;
  }
}

// The double-precision reference of row c of problem pr at q head h (q row offset off).
void Reference(const Case& c, const Inputs& in, size_t i, int r, int h, std::vector<double>& o,
               double& lse) {
  const Problem& pr = c.problems[i];
  const ProblemData& d = in.data[i];
  const int dim = c.head_dim, kvh = h / (c.heads / c.kv_heads);
  const int64_t off = int64_t{in.p.problems[i].q_begin + r} * c.heads + h;
  std::vector<double> logit(pr.num_keys, -kInf);
  double mx = -kInf;
  for (int j = 0; j < pr.num_keys; ++j) {
    if (pr.causal_base >= 0 && j > pr.causal_base + r) continue;
    double dot = 0.0;
    for (int e = 0; e < dim; ++e) {
      dot += in.q.Get(off * dim + e) * d.k.Get((int64_t{j} * c.kv_heads + kvh) * dim + e);
    }
    double s = in.p.scale * dot;
    if (c.softcap > 0.0f) s = c.softcap * std::tanh(s / c.softcap);
    logit[j] = s + (j >= pr.weighted_from ? pr.log_weight : 0.0) + BiasOf(pr, d, h, r, j);
    mx = std::max(mx, logit[j]);
  }
  o.assign(dim, 0.0);
  lse = -kInf;
  if (mx == -kInf) return;
  double sum = 0.0;
  for (int j = 0; j < pr.num_keys; ++j) {
    const double w = std::exp(logit[j] - mx);
    sum += w;
    for (int e = 0; e < dim; ++e) o[e] += w * d.v.Get((int64_t{j} * c.kv_heads + kvh) * dim + e);
  }
  for (double& x : o) x /= sum;
  lse = mx + std::log(sum);
}

// Runs the case through LaunchBiasedAttention (scalar = false) or the scalar kernel into o / lse.
void Launch(const Case& c, Inputs& in, bool scalar, Buffer& o, Buffer& lse) {
  o = Buffer(ElemType::kF32, int64_t{in.p.tokens} * c.heads * c.head_dim);
  lse = Buffer(ElemType::kF32, int64_t{in.p.tokens} * c.heads);
  in.p.o = o.p;
  in.p.lse = static_cast<float*>(lse.p);
  const cudaError_t err = scalar ? manyshot::cuda::LaunchBiasedAttentionScalar(in.p, nullptr)
                                 : manyshot::cuda::LaunchBiasedAttention(in.p, nullptr);
  ASSERT_EQ(err, cudaSuccess) << simt::LastLaunchError();
}

void RunCase(const Case& c, simt::Order order, simt::CopyTiming timing) {
  SCOPED_TRACE(c.name + (order == simt::Order::kForward ? " (forward" : " (reverse") +
               (timing == simt::CopyTiming::kAtWait ? ", copies at wait)" : ", copies at issue)"));
  simt::SetOrder(order);
  simt::SetCopyTiming(timing);
  simt::Props().sms = c.sms;
  Inputs in;
  MakeInputs(c, in);
  const bool flash = manyshot::cuda::BiasedFlashTakes(in.p);
  EXPECT_EQ(flash, c.kv_type != ElemType::kF32 && c.misalign == 0 &&
                       (c.head_dim == 64 || c.head_dim == 80 || c.head_dim == 128));

  const simt::Counters before = simt::Count();
  Buffer o, lse;
  Launch(c, in, /*scalar=*/false, o, lse);
  const simt::Counters after = simt::Count();
  if (flash) {
    EXPECT_GT(after.mma, before.mma) << "not on (emulated) tensor cores";
    // A split launch is the kernel and FinalizeKernel's merge.
    EXPECT_EQ(after.launches - before.launches, c.expect_split ? 2 : 1);
  } else {
    EXPECT_EQ(after.mma, before.mma);
  }
  Buffer o_scalar, lse_scalar;
  Launch(c, in, /*scalar=*/true, o_scalar, lse_scalar);

  simt::AttentionErrors errors, against_scalar;
  std::vector<double> ref, scalar_row(c.head_dim);
  for (size_t i = 0; i < c.problems.size(); ++i) {
    for (int r = 0; r < c.problems[i].rows; ++r) {
      for (int h = 0; h < c.heads; ++h) {
        const int64_t off = int64_t{in.p.problems[i].q_begin + r} * c.heads + h;
        double ref_lse;
        Reference(c, in, i, r, h, ref, ref_lse);
        ASSERT_TRUE(errors.Add(o, lse, off, c.head_dim, ref, ref_lse))
            << "problem " << i << " row " << r << " head " << h;
        for (int e = 0; e < c.head_dim; ++e) scalar_row[e] = o_scalar.Get(off * c.head_dim + e);
        ASSERT_TRUE(against_scalar.Add(o, lse, off, c.head_dim, scalar_row, lse_scalar.Get(off)))
            << "problem " << i << " row " << r << " head " << h << " against the scalar kernel";
      }
    }
  }
  errors.ExpectWithin(c.kv_type);
  against_scalar.ExpectWithin(c.kv_type);
}

// gtest prints a failing case by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class EmulatedBiasedFlashTest : public ::testing::TestWithParam<Case> {};

TEST_P(EmulatedBiasedFlashTest, MatchesTheReferenceAndTheScalarKernel) {
  for (simt::Order order : {simt::Order::kForward, simt::Order::kReverse}) {
    for (simt::CopyTiming timing : {simt::CopyTiming::kAtWait, simt::CopyTiming::kAtIssue}) {
      RunCase(GetParam(), order, timing);
    }
  }
  simt::SetOrder(simt::Order::kForward);
  simt::SetCopyTiming(simt::CopyTiming::kAtWait);
  simt::Props().sms = 132;
}

std::vector<Case> Cases() {
  const ElemType bf16 = ElemType::kBF16, f16 = ElemType::kF16, f32 = ElemType::kF32;
  const Bias t5 = Bias::kT5Bidirectional, t5c = Bias::kT5Causal;
  std::vector<Case> cases;
  // T5 encoder self-attention (bidirectional buckets), odd length: small tile configuration.
  cases.push_back({"T5EncoderBf16D64", bf16, 2, 2, 64, {{7, 7, t5}}});
  // T5 decoder self-attention (causal buckets, causal keys), 40 rows x 2 heads: mid tiles.
  cases.push_back({"T5DecoderCausalF16D64", f16, 2, 2, 64, {{40, 40, t5c, 0}}});
  // SAICL-style: several demonstrations of odd lengths in one launch, big tiles (GQA 4:1).
  cases.push_back(
      {"T5ManyProblemsBf16D128Gqa", bf16, 8, 2, 128, {{37, 37, t5}, {21, 21, t5}, {3, 3, t5}}});
  // FiD / cross attention over a long encoder output: split-K merged by FinalizeKernel; and
  // unsplit on a one-SM device (f16: a kernel no other case launches, as the launcher keeps
  // each kernel's device capacity from its first launch).
  cases.push_back({"T5LongKeysSplitBf16D64", bf16, 2, 2, 64, {{3, 601, t5}}, 132, 0.0f, 0, true});
  cases.push_back({"T5LongKeysUnsplitF16D64", f16, 2, 2, 64, {{3, 601, t5}}, 1});
  // Dense biases with -inf masks and a fully masked row; a problem without a bias beside them.
  cases.push_back({"DenseMaskedF16D80",
                   f16,
                   4,
                   4,
                   80,
                   {{5, 37, Bias::kDenseMasked}, {9, 70, Bias::kDenseMasked}, {4, 19}}});
  // ALiBi (BLOOM) own keys: causal, log-weight from weighted_from, head counts 4, 6 and 12.
  Problem own{20, 26, Bias::kAlibi, 6, 4, std::log(5.0f)};
  cases.push_back({"AlibiOwnHeads4Bf16D64", bf16, 4, 4, 64, {own}});
  cases.push_back({"AlibiOwnHeads6F16D80", f16, 6, 6, 80, {own, {9, 9, Bias::kAlibi, 0}}});
  cases.push_back({"AlibiOwnHeads12Bf16D128", bf16, 12, 12, 128, {{70, 70, Bias::kAlibi, 0}}});
  // ALiBi context keys: blind rows (no keys), then the rest over a long context, split.
  cases.push_back({"AlibiContextSplitBf16D64",
                   bf16,
                   8,
                   8,
                   64,
                   {{2, 0, Bias::kAlibi}, {3, 555, Bias::kAlibi}},
                   132,
                   0.0f,
                   0,
                   true});
  // ALiBi with soft-capping: the variant composes with the kernel's own transform.
  cases.push_back({"AlibiSoftCapBf16D64", bf16, 4, 4, 64, {own}, 132, 1.5f});
  // The scalar kernel's cases: f32 K/V, a head_dim the flash kernel is not built for, misaligned.
  cases.push_back({"T5F32StaysScalar", f32, 2, 2, 64, {{7, 7, t5}}});
  cases.push_back({"T5Bf16D32StaysScalar", bf16, 2, 2, 32, {{7, 7, t5}}});
  cases.push_back({"AlibiMisalignedStaysScalar", bf16, 4, 4, 64, {own}, 132, 0.0f, 2});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Variants, EmulatedBiasedFlashTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& param) {
                           return param.param.name;
                         });

}  // namespace

// The backend ops T5 added (AttendBiased, GeGlu, Relu) on the CPU backend against plain loops in
// double, their checked fronts, and the relative position buckets against transformers' values.
#include <cmath>
#include <limits>
#include <random>

#include "engine/t5/relative_position.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

Tensor Upload(Backend& b, DType dtype, std::vector<int64_t> shape, const std::vector<float>& v) {
  Tensor wide = *b.Allocate(DType::kF32, shape);
  b.CopyFromHost(v.data(), wide);
  if (dtype == DType::kF32) return wide;
  Tensor t = *b.Allocate(dtype, shape);
  b.Convert(wide, t);
  return t;
}

// As f32, whatever the tensor's dtype.
std::vector<float> Download(Backend& b, const Tensor& t) {
  Tensor wide = t;
  if (t.dtype() != DType::kF32) {
    wide = *b.Allocate(DType::kF32, t.shape());
    b.Convert(t, wide);
  }
  std::vector<float> v(static_cast<size_t>(t.numel()));
  EXPECT_TRUE(b.CopyToHost(wide, v.data()).ok());
  return v;
}

std::vector<float> Random(std::mt19937& rng, size_t n, float sd = 1.0f) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// Two sequences (one with GQA-shared kv heads, a bias with -inf entries and a fully masked row,
// one cross-attention-like with fewer keys than queries and no bias) against double loops.
void CheckAttendBiased(DType kv_dtype, double tolerance) {
  CpuBackend& b = TestBackend();
  std::mt19937 rng(7);
  const int64_t heads = 4, kv_heads = 2, dim = 8;
  const int64_t q0 = 5, k0 = 9, q1 = 6, k1 = 3;
  const int64_t T = q0 + q1;
  const auto qv = Random(rng, T * heads * dim);
  const auto k0v = Random(rng, k0 * kv_heads * dim), v0v = Random(rng, k0 * kv_heads * dim);
  const auto k1v = Random(rng, k1 * kv_heads * dim), v1v = Random(rng, k1 * kv_heads * dim);
  auto bias0 = Random(rng, heads * q0 * k0, 2.0f);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < q0; ++i) {
      for (int64_t j = 0; j < k0; ++j) {
        if (j > i + 4 || (h == 1 && i == 2)) bias0[(h * q0 + i) * k0 + j] = kNegInf;
      }
    }
  }
  Tensor q = Upload(b, DType::kF32, {T, heads, dim}, qv);
  Tensor k0t = Upload(b, kv_dtype, {k0, kv_heads, dim}, k0v);
  Tensor v0t = Upload(b, kv_dtype, {k0, kv_heads, dim}, v0v);
  Tensor k1t = Upload(b, kv_dtype, {k1, kv_heads, dim}, k1v);
  Tensor v1t = Upload(b, kv_dtype, {k1, kv_heads, dim}, v1v);
  Tensor bias = Upload(b, DType::kF32, {heads, q0, k0}, bias0);
  AttentionState out{*b.Allocate(DType::kF32, {T, heads, dim}),
                     *b.Allocate(DType::kF32, {T, heads})};
  const float scale = 0.7f;
  std::vector<BiasedAttentionSequence> seqs = {{0, q0, &k0t, &v0t, k0, &bias},
                                               {q0, q1, &k1t, &v1t, k1, nullptr}};
  b.AttendBiased(q, seqs, scale, out);
  ASSERT_TRUE(b.Synchronize().ok());
  const auto o = Download(b, out.o), lse = Download(b, out.lse);
  double worst = 0;
  for (int s = 0; s < 2; ++s) {
    const int64_t ql = s == 0 ? q0 : q1, kl = s == 0 ? k0 : k1, row0 = s == 0 ? 0 : q0;
    // The widened K/V the op saw (16-bit storage rounds them).
    const auto kk = Download(b, s == 0 ? k0t : k1t), vv = Download(b, s == 0 ? v0t : v1t);
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kv_heads);
      for (int64_t i = 0; i < ql; ++i) {
        std::vector<double> logit(kl);
        double max = -INFINITY;
        for (int64_t j = 0; j < kl; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < dim; ++d) {
            dot += qv[((row0 + i) * heads + h) * dim + d] * kk[(j * kv_heads + g) * dim + d];
          }
          logit[j] = scale * dot + (s == 0 ? bias0[(h * ql + i) * kl + j] : 0.0);
          max = std::max(max, logit[j]);
        }
        const float* orow = o.data() + ((row0 + i) * heads + h) * dim;
        const float l = lse[(row0 + i) * heads + h];
        if (max == -INFINITY) {  // the fully masked row
          EXPECT_EQ(l, kNegInf);
          for (int64_t d = 0; d < dim; ++d) EXPECT_EQ(orow[d], 0.0f);
          continue;
        }
        double sum = 0;
        for (double x : logit) sum += std::exp(x - max);
        worst = std::max(worst, std::abs(l - (max + std::log(sum))));
        for (int64_t d = 0; d < dim; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < kl; ++j) {
            acc += std::exp(logit[j] - max) / sum * vv[(j * kv_heads + g) * dim + d];
          }
          worst = std::max(worst, std::abs(orow[d] - acc));
        }
      }
    }
  }
  EXPECT_LE(worst, tolerance) << DTypeName(kv_dtype);
}

TEST(AttendBiasedTest, MatchesLoopsWithF32KeysValues) { CheckAttendBiased(DType::kF32, 1e-5); }

TEST(AttendBiasedTest, MatchesLoopsWithBf16KeysValues) { CheckAttendBiased(DType::kBF16, 1e-5); }

TEST(AttendBiasedTest, FrontRejectsABiasOfTheWrongShape) {
  CpuBackend& b = TestBackend();
  Tensor q = *b.Allocate(DType::kF32, {3, 2, 4});
  Tensor k = *b.Allocate(DType::kF32, {5, 2, 4});
  Tensor bias = *b.Allocate(DType::kF32, {2, 5, 3});  // [heads, kv, q]: transposed
  AttentionState out{*b.Allocate(DType::kF32, {3, 2, 4}), *b.Allocate(DType::kF32, {3, 2})};
  b.AttendBiased(q, {{0, 3, &k, &k, 5, &bias}}, 1.0f, out);
  absl::Status status = b.Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("AttendBiased"));
  EXPECT_THAT(status.message(), HasSubstr("must be [2, 3, 5]"));
  Tensor i32_bias = *b.Allocate(DType::kI32, {2, 3, 5});
  b.AttendBiased(q, {{0, 3, &k, &k, 5, &i32_bias}}, 1.0f, out);
  EXPECT_THAT(b.Synchronize().message(), HasSubstr("must be f32"));
  b.AttendBiased(q, {{1, 3, &k, &k, 5, nullptr}}, 1.0f, out);  // rows past q
  EXPECT_THAT(b.Synchronize().message(), HasSubstr("outside q's 3 rows"));
  b.AttendBiased(q, {{0, 3, &k, &k, 6, nullptr}}, 1.0f, out);  // more keys than k has
  EXPECT_THAT(b.Synchronize().message(), HasSubstr("6 keys but k has 5 rows"));
}

TEST(GluReluTest, MatchLoops) {
  CpuBackend& b = TestBackend();
  std::mt19937 rng(3);
  const int64_t rows = 37, inter = 100;  // several parallel chunks
  const auto gu = Random(rng, rows * 2 * inter, 2.0f);
  Tensor gate_up = Upload(b, DType::kF32, {rows, 2 * inter}, gu);
  Tensor out = *b.Allocate(DType::kF32, {rows, inter});
  b.GeGlu(gate_up, out);
  b.Relu(gate_up);
  ASSERT_TRUE(b.Synchronize().ok());
  const auto geglu = Download(b, out), relu = Download(b, gate_up);
  double worst = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < inter; ++i) {
      const double g = gu[r * 2 * inter + i], u = gu[r * 2 * inter + inter + i];
      const double gelu =
          0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
      worst = std::max(worst, std::abs(geglu[r * inter + i] - gelu * u));
    }
  }
  EXPECT_LE(worst, 1e-5);
  for (size_t i = 0; i < gu.size(); ++i) ASSERT_EQ(relu[i], std::max(gu[i], 0.0f)) << i;
  Tensor bad = *b.Allocate(DType::kF32, {rows, inter + 1});
  b.GeGlu(gate_up, bad);
  EXPECT_THAT(b.Synchronize().message(), HasSubstr("GeGlu: gate_up must be [T, 2I]"));
}

// transformers' _relative_position_bucket for T5's defaults (32 buckets, max distance 128):
// bidirectional halves the buckets (16 per sign, 8 exact), unidirectional keeps 32 (16 exact).
TEST(RelativePositionTest, BucketsOfT5Defaults) {
  auto bi = [](int64_t r) { return T5RelativePositionBucket(r, true, 32, 128); };
  auto uni = [](int64_t r) { return T5RelativePositionBucket(r, false, 32, 128); };
  EXPECT_EQ(bi(0), 0);
  EXPECT_EQ(bi(-7), 7);    // exact
  EXPECT_EQ(bi(7), 23);    // exact, key after query: + 16
  EXPECT_EQ(bi(-8), 8);    // first logarithmic bucket
  EXPECT_EQ(bi(-16), 10);  // 8 + trunc(log(2) / log(16) * 8) = 8 + 2
  EXPECT_EQ(bi(-127), 15);
  EXPECT_EQ(bi(-1000), 15);  // clamped to the last bucket
  EXPECT_EQ(bi(1000), 31);
  EXPECT_EQ(uni(5), 0);  // keys after the query share bucket 0 (masked anyway)
  EXPECT_EQ(uni(-15), 15);
  EXPECT_EQ(uni(-16), 16);
  EXPECT_EQ(uni(-32), 21);  // 16 + trunc(log(2) / log(8) * 16) = 16 + 5
  EXPECT_EQ(uni(-5000), 31);
}

TEST(RelativePositionTest, DiagonalLayoutAndCausalMask) {
  const int64_t heads = 2;
  std::vector<float> table(32 * heads);
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i);
  // Decoder rows at positions 3 and 4 (a cache of 3) against keys 0..4: diagonals 0..5 are key
  // minus row index -1..4, i.e. key minus query position -4..1.
  const auto rel = T5RelativeBias(table, heads, {32, 128, false, true}, 3, 2, 5);
  ASSERT_EQ(rel.size(), 2u * 6);
  // head 1, row 0 (position 3), key 1: diagonal 1 - 0 + 1 = 2, distance -2 -> bucket 2.
  EXPECT_EQ(rel[1 * 6 + 2], table[2 * heads + 1]);
  EXPECT_EQ(rel[0 * 6 + 5], kNegInf);   // key 4 after row 0 (position 3): distance +1
  EXPECT_EQ(rel[0 * 6 + 4], table[0]);  // distance 0: bucket 0
  const auto bi = T5RelativeBias(table, heads, {32, 128, true, false}, 0, 3, 3);
  EXPECT_EQ(bi[0 * 5 + 4], table[(16 + 2) * heads]);  // key 2 of row 0: +2, after the query
}

// The diagonal form of a bias gives exactly what the same bias spelled out per (row, key) does.
TEST(AttendBiasedTest, RelativeBiasEqualsItsFullForm) {
  CpuBackend& b = TestBackend();
  std::mt19937 rng(11);
  const int64_t heads = 3, dim = 16, q_len = 70, kv_len = 90;  // several row blocks
  const auto qv = Random(rng, q_len * heads * dim);
  const auto kv = Random(rng, kv_len * heads * dim);
  auto rel = Random(rng, heads * (q_len + kv_len - 1), 2.0f);
  rel[5] = kNegInf;
  std::vector<float> full(heads * q_len * kv_len);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t r = 0; r < q_len; ++r) {
      for (int64_t j = 0; j < kv_len; ++j) {
        full[(h * q_len + r) * kv_len + j] = rel[h * (q_len + kv_len - 1) + j - r + q_len - 1];
      }
    }
  }
  Tensor q = Upload(b, DType::kF32, {q_len, heads, dim}, qv);
  Tensor k = Upload(b, DType::kF32, {kv_len, heads, dim}, kv);
  Tensor rel_t = Upload(b, DType::kF32, {heads, q_len + kv_len - 1}, rel);
  Tensor full_t = Upload(b, DType::kF32, {heads, q_len, kv_len}, full);
  std::vector<float> o[2];
  for (int form = 0; form < 2; ++form) {
    AttentionState out{*b.Allocate(DType::kF32, {q_len, heads, dim}),
                       *b.Allocate(DType::kF32, {q_len, heads})};
    BiasedAttentionSequence seq{0, q_len, &k, &k, kv_len};
    (form == 0 ? seq.relative_bias : seq.bias) = form == 0 ? &rel_t : &full_t;
    b.AttendBiased(q, {seq}, 1.0f, out);
    ASSERT_TRUE(b.Synchronize().ok());
    o[form] = Download(b, out.o);
  }
  EXPECT_EQ(o[0], o[1]);
  Tensor wrong = *b.Allocate(DType::kF32, {heads, q_len + kv_len});
  BiasedAttentionSequence seq{0, q_len, &k, &k, kv_len, nullptr, &wrong};
  AttentionState out{*b.Allocate(DType::kF32, {q_len, heads, dim}),
                     *b.Allocate(DType::kF32, {q_len, heads})};
  b.AttendBiased(q, {seq}, 1.0f, out);
  EXPECT_THAT(b.Synchronize().message(), HasSubstr("must be [3, 159] (heads, q_len + kv_len - 1)"));
  seq.bias = &full_t;
  b.AttendBiased(q, {seq}, 1.0f, out);
  EXPECT_THAT(b.Synchronize().message(), HasSubstr("both bias and relative_bias"));
}

// GeGlu, Relu and AttendBiased on the named CUDA backend against the CPU in f32 (AttendBiased in
// every dtype and bias form: backend_parity_test.cc).
void ExpectT5OpsMatchCpu(Backend* cuda) {
  CpuBackend& cpu = TestBackend();
  std::mt19937 rng(5);
  const int64_t rows = 9, inter = 37;  // odd widths: the unvectorised paths
  const auto gu = Random(rng, rows * 2 * inter, 2.0f);
  std::vector<float> results[2][2];
  Backend* backends[2] = {&cpu, cuda};
  for (int i = 0; i < 2; ++i) {
    Backend& b = *backends[i];
    Tensor gate_up = Upload(b, DType::kF32, {rows, 2 * inter}, gu);
    Tensor out = *b.Allocate(DType::kF32, {rows, inter});
    b.GeGlu(gate_up, out);
    b.Relu(gate_up);
    ASSERT_TRUE(b.Synchronize().ok());
    results[i][0] = Download(b, out);
    results[i][1] = Download(b, gate_up);
  }
  for (int op = 0; op < 2; ++op) {
    for (size_t j = 0; j < results[0][op].size(); ++j) {
      ASSERT_NEAR(results[0][op][j], results[1][op][j], 1e-5) << op << " " << j;
    }
  }
  const auto qv = Random(rng, 2 * 1 * 4);
  std::vector<float> attended[2];
  for (int i = 0; i < 2; ++i) {
    Backend& b = *backends[i];
    Tensor q = Upload(b, DType::kF32, {2, 1, 4}, qv);
    AttentionState state{*b.Allocate(DType::kF32, {2, 1, 4}), *b.Allocate(DType::kF32, {2, 1})};
    b.AttendBiased(q, {{0, 2, &q, &q, 2, nullptr}}, 1.0f, state);
    ASSERT_TRUE(b.Synchronize().ok());
    attended[i] = Download(b, state.o);
  }
  for (size_t j = 0; j < attended[0].size(); ++j) {
    ASSERT_NEAR(attended[0][j], attended[1][j], 1e-5) << j;
  }
}

// On the GPU (label gpu; skipped where no GPU can be used).
TEST(CudaT5OpsTest, GeGluReluAndAttendBiasedMatchCpu) {
  const std::string why = BackendUnavailable("cuda");
  if (!why.empty()) GTEST_SKIP() << why;
  ExpectT5OpsMatchCpu(NamedTestBackend("cuda", nullptr));
}

// The same CUDA backend code on the SIMT emulator (testing/simt), on every machine.
TEST(SimtCudaT5OpsTest, GeGluReluAndAttendBiasedMatchCpu) {
  Backend* emulated = NamedTestBackend("simt-cuda", nullptr);
  ASSERT_NE(emulated, nullptr);
  ExpectT5OpsMatchCpu(emulated);
}

}  // namespace
}  // namespace manyshot::testing

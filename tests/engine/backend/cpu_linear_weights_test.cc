// The CPU backend's Linear on its two paths (the GEMV kernels for <= kGemvMaxRows activation rows,
// OpenBLAS sgemm above) and with f32 or bf16 weights, checked against a double-precision
// reference with a rigorous rounding bound rather than a tuned tolerance, on every kernel target
// this machine executes.
//
// Bound: any order of summing n products in float (FMA or not) gives |computed - exact| <=
// gamma_n * sum |x_i w_i| with gamma_n = n u / (1 - n u), u = 2^-24 (Higham, Accuracy and
// Stability, §3.1); n counts the bias as one more term. Two results that each meet it differ
// by at most twice that. bf16 weights are exact widenings of the rounded weights, so the same
// bound holds against the reference computed with the rounded weights; against f32 weights each
// weight moves by at most 2^-9 of itself (round to nearest, 8 significant bits).
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_gemv.h"
#include "gtest/gtest.h"
#include "tests/engine/backend/backend_test_util.h"
#include "tests/engine/backend/cpu_target_param.h"

namespace manyshot {
namespace {

using testing::Download;
using testing::Poisoned;
using testing::RandomValues;
using testing::RoundedTo;
using testing::Upload;

constexpr double kUnit = 1.0 / (1 << 24);

double Gamma(int64_t n) { return n * kUnit / (1 - n * kUnit); }

struct Problem {
  int64_t rows, in, out;
  WeightLayout layout;
  bool bias;
};

std::string Name(const Problem& p, DType weights) {
  return "rows=" + std::to_string(p.rows) + " in=" + std::to_string(p.in) +
         " out=" + std::to_string(p.out) +
         (p.layout == WeightLayout::kOutIn ? " [out,in]" : " [in,out]") + (p.bias ? " bias" : "") +
         " weights=" + std::string(DTypeName(weights));
}

double WeightAt(const std::vector<float>& w, const Problem& p, int64_t o, int64_t i) {
  return p.layout == WeightLayout::kOutIn ? w[o * p.in + i] : w[i * p.out + o];
}

class CpuLinearWeightsTest : public testing::CpuTargetTest {
 protected:
  CpuBackend backend_{2};
  std::mt19937 rng_{1234};

  std::vector<int64_t> WeightShape(const Problem& p) {
    return p.layout == WeightLayout::kOutIn ? std::vector<int64_t>{p.out, p.in}
                                            : std::vector<int64_t>{p.in, p.out};
  }

  std::vector<float> RunLinear(const Problem& p, const std::vector<float>& x,
                               const std::vector<float>& w, const std::vector<float>& bias,
                               DType weights) {
    Tensor out = Poisoned(backend_, DType::kF32, {p.rows, p.out});
    backend_.Linear(Upload(backend_, x, DType::kF32, {p.rows, p.in}),
                    Upload(backend_, w, weights, WeightShape(p)), p.layout,
                    p.bias ? Upload(backend_, bias, DType::kF32, {p.out}) : Tensor(), out);
    absl::Status st = backend_.Synchronize();
    EXPECT_TRUE(st.ok()) << st;
    return Download(backend_, out);
  }

  // Checks Linear with `weights` against the exact result for the weights it holds, and returns
  // it with the sum of |x_i w_i| + |bias| per element (the bound's scale).
  std::vector<float> CheckAgainstExact(const Problem& p, const std::vector<float>& x,
                                       const std::vector<float>& w, const std::vector<float>& bias,
                                       DType weights, std::vector<double>* scale) {
    const std::vector<float> held = RoundedTo(w, weights);
    const std::vector<float> got = RunLinear(p, x, w, bias, weights);
    scale->assign(static_cast<size_t>(p.rows * p.out), 0.0);
    for (int64_t r = 0; r < p.rows; ++r) {
      for (int64_t o = 0; o < p.out; ++o) {
        double exact = p.bias ? bias[o] : 0.0, magnitude = p.bias ? std::fabs(bias[o]) : 0.0;
        for (int64_t i = 0; i < p.in; ++i) {
          const double term = static_cast<double>(x[r * p.in + i]) * WeightAt(held, p, o, i);
          exact += term;
          magnitude += std::fabs(term);
        }
        (*scale)[r * p.out + o] = magnitude;
        const double bound = Gamma(p.in + 1) * magnitude;
        const double error = std::fabs(got[r * p.out + o] - exact);
        if (!(error <= bound)) {
          ADD_FAILURE() << Name(p, weights) << ": out[" << r << ", " << o
                        << "] = " << got[r * p.out + o] << ", exact " << exact << ", error "
                        << error << " > bound " << bound;
          return got;
        }
      }
    }
    return got;
  }
};

MANYSHOT_FOR_EVERY_CPU_TARGET(CpuLinearWeightsTest);

std::vector<Problem> Problems() {
  std::vector<Problem> problems;
  // Rows 1..4 take the GEMV kernels, 5 and 9 sgemm. Sizes cover the vector tails (in or out not
  // a multiple of 16, 32 (bf16 weights are read 32 at a time) or 64, a single output) and the
  // threaded split: 768 x 3072, and 1030 x 515 (over the serial limit in bf16 too) where the
  // threads' shares and every tail are uneven.
  for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{9}}) {
    for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
      for (auto [in, out] : std::vector<std::pair<int64_t, int64_t>>{
               {7, 1}, {64, 33}, {100, 300}, {131, 67}, {768, 3072}, {1030, 515}}) {
        problems.push_back({rows, in, out, layout, (in + out + rows) % 2 == 0});
      }
    }
  }
  return problems;
}

TEST_P(CpuLinearWeightsTest, F32WeightsMeetTheSummationBoundOnBothPaths) {
  static_assert(cpu_internal::kGemvMaxRows == 4, "the problems cover rows 1..4 as the GEMV path");
  for (const Problem& p : Problems()) {
    const auto x = RandomValues(rng_, p.rows * p.in);
    const auto w = RandomValues(rng_, p.in * p.out, 0.2f);
    const auto bias = RandomValues(rng_, p.out);
    std::vector<double> scale;
    CheckAgainstExact(p, x, w, bias, DType::kF32, &scale);
  }
}

TEST_P(CpuLinearWeightsTest, GemvRowsAgreeWithTheSgemmPath) {
  // The same activation rows through the GEMV kernels (alone) and through sgemm (inside a batch
  // of 8): each meets the bound, so they differ by at most twice it.
  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    const Problem batch{8, 768, 1000, layout, true};
    const auto x = RandomValues(rng_, batch.rows * batch.in);
    const auto w = RandomValues(rng_, batch.in * batch.out, 0.2f);
    const auto bias = RandomValues(rng_, batch.out);
    std::vector<double> scale;
    const std::vector<float> sgemm = CheckAgainstExact(batch, x, w, bias, DType::kF32, &scale);
    for (int64_t rows = 1; rows <= cpu_internal::kGemvMaxRows; ++rows) {
      const Problem p{rows, batch.in, batch.out, layout, true};
      const std::vector<float> head(x.begin(), x.begin() + rows * p.in);
      const std::vector<float> gemv = RunLinear(p, head, w, bias, DType::kF32);
      for (int64_t k = 0; k < rows * p.out; ++k) {
        ASSERT_LE(std::fabs(gemv[k] - sgemm[k]), 2 * Gamma(p.in + 1) * scale[k])
            << Name(p, DType::kF32) << " element " << k;
      }
    }
  }
}

TEST_P(CpuLinearWeightsTest, Bf16WeightsAreExactWideningsWithinTheBoundOfF32Weights) {
  double worst_relative = 0;
  for (const Problem& p : Problems()) {
    const auto x = RandomValues(rng_, p.rows * p.in);
    const auto w = RandomValues(rng_, p.in * p.out, 0.2f);
    const auto bias = RandomValues(rng_, p.out);
    std::vector<double> scale;
    const std::vector<float> narrow = CheckAgainstExact(p, x, w, bias, DType::kBF16, &scale);
    const std::vector<float> wide = RunLinear(p, x, w, bias, DType::kF32);
    for (int64_t k = 0; k < p.rows * p.out; ++k) {
      // Rounding the weights moves each term by <= 2^-9 of it; both sums add their own rounding.
      const double bound = (std::ldexp(1.0, -9) + 2 * Gamma(p.in + 1)) * scale[k];
      ASSERT_LE(std::fabs(narrow[k] - wide[k]), bound) << Name(p, DType::kBF16) << " element " << k;
      if (scale[k] > 0)
        worst_relative = std::max(worst_relative, std::fabs(narrow[k] - wide[k]) / scale[k]);
    }
  }
  // Random rounding errors cancel: typical deviations are far below the worst case, but not zero
  // (which would mean the bf16 weights were never used).
  EXPECT_GT(worst_relative, 0.0);
}

TEST_P(CpuLinearWeightsTest, Bf16EmbeddingTableRowsWidenExactly) {
  const int64_t vocab = 50, hidden = 40;
  const auto table = RandomValues(rng_, vocab * hidden);
  const auto base = RandomValues(rng_, 3 * hidden);
  const std::vector<int32_t> ids = {3, 49, 3};
  const std::vector<float> held = RoundedTo(table, DType::kBF16);
  for (bool accumulate : {false, true}) {
    Tensor out = Upload(backend_, base, DType::kF32, {3, hidden});
    backend_.Embedding(testing::UploadInts(backend_, ids),
                       Upload(backend_, table, DType::kBF16, {vocab, hidden}), out, accumulate);
    ASSERT_TRUE(backend_.Synchronize().ok());
    const std::vector<float> got = Download(backend_, out);
    for (int64_t t = 0; t < 3; ++t) {
      for (int64_t h = 0; h < hidden; ++h) {
        const float expected =
            (accumulate ? base[t * hidden + h] : 0.0f) + held[ids[t] * hidden + h];
        ASSERT_EQ(got[t * hidden + h], expected) << "token " << t << " dim " << h;
      }
    }
  }
}

TEST_P(CpuLinearWeightsTest, WeightDtypesTheCpuCannotWidenAreInvalidArgument) {
  const Problem p{1, 16, 8, WeightLayout::kOutIn, false};
  const auto x = RandomValues(rng_, p.in), w = RandomValues(rng_, p.in * p.out);
  Tensor out = Poisoned(backend_, DType::kF32, {1, p.out});
  backend_.Linear(Upload(backend_, x, DType::kF32, {1, p.in}),
                  Upload(backend_, w, DType::kF16, WeightShape(p)), p.layout, Tensor(), out);
  absl::Status st = backend_.Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("Linear"), std::string_view::npos) << st;
  EXPECT_NE(st.message().find("f16 weights"), std::string_view::npos) << st;
  EXPECT_FALSE(backend_.SupportsWeightDType(DType::kF32, DType::kF16));
  EXPECT_TRUE(backend_.SupportsWeightDType(DType::kF32, DType::kBF16));
}

}  // namespace
}  // namespace manyshot

// A context stored in 16 bits (bf16 or f16) is read directly by attention (converted per tile):
// scores stay close to the f32 ones, and a context that is exactly representable gives identical
// scores.
#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

#include "engine/prompting/context_encoder.h"
#include "engine/prompting/query_runner.h"
#include "gtest/gtest.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

// A copy of `ctx` with every K/V element narrowed to `dtype` (and, with `widen`, widened back to
// f32, which gives the f32 context that holds exactly the 16-bit values).
EncodedContext Narrow(const EncodedContext& ctx, DType dtype, bool widen) {
  Backend& backend = TestBackend();
  EncodedContext out = ctx;
  out.kv.k.clear();
  out.kv.v.clear();
  for (const auto* list : {&ctx.kv.k, &ctx.kv.v}) {
    for (const Tensor& t : *list) {
      Tensor n = *backend.Allocate(widen ? DType::kF32 : dtype, t.shape());
      for (int64_t i = 0; i < t.numel(); ++i) {
        float x = t.data<float>()[i];
        uint16_t h = dtype == DType::kBF16 ? F32ToBF16(x) : F32ToF16(x);
        if (widen) {
          n.data<float>()[i] = dtype == DType::kBF16 ? BF16ToF32(h) : F16ToF32(h);
        } else {
          n.data<uint16_t>()[i] = h;
        }
      }
      (list == &ctx.kv.k ? out.kv.k : out.kv.v).push_back(n);
    }
  }
  return out;
}

// Scores of 5 random queries against a 30-demonstration structured context of `model`, with the
// context's K/V stored in f32 and in each 16-bit dtype; returns max |sum log-prob - f32's| per
// dtype, and checks that 16-bit K/V read directly equals the same values widened up front.
std::vector<double> SixteenBitScoreDiffs(const Transformer& model) {
  std::mt19937 rng(21);
  const int32_t last =
      static_cast<int32_t>(std::min<int64_t>(model.config().vocab_size, 32000)) - 1;
  std::uniform_int_distribution<int32_t> token(3, last);
  std::vector<std::vector<int32_t>> demos(30);
  for (auto& d : demos) {
    d.resize(5);
    for (auto& t : d) t = token(rng);
  }
  GroupOptions options;
  options.group_length = 40;  // several groups, > one 512-key tile of context in total
  auto layout = BuildGroups(demos, options);
  EXPECT_TRUE(layout.ok());
  auto context = EncodeGroups(model, *layout, 1);
  EXPECT_TRUE(context.ok());
  std::vector<QueryWithCandidates> items;
  for (int q = 0; q < 5; ++q) {
    items.push_back(
        {{token(rng), token(rng), token(rng)}, {{token(rng)}, {token(rng), token(rng)}}});
  }
  const QueryPlacement placement = StructuredPlacement(40, static_cast<double>(layout->groups()));
  auto f32 = ScoreCandidates(model, &*context, placement, 1, items);
  EXPECT_TRUE(f32.ok());
  std::vector<double> diffs;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    EncodedContext narrow = Narrow(*context, dtype, /*widen=*/false);
    EncodedContext widened = Narrow(*context, dtype, /*widen=*/true);
    EXPECT_EQ(narrow.bytes() * 2, context->bytes());
    auto direct = ScoreCandidates(model, &narrow, placement, 1, items);
    auto reference = ScoreCandidates(model, &widened, placement, 1, items);
    EXPECT_TRUE(direct.ok() && reference.ok());
    double max_diff = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      for (size_t c = 0; c < 2; ++c) {
        // Same values, converted on use vs converted up front: identical.
        EXPECT_EQ((*direct)[i][c].sum_logprob, (*reference)[i][c].sum_logprob);
        max_diff =
            std::max(max_diff, std::abs((*direct)[i][c].sum_logprob - (*f32)[i][c].sum_logprob));
      }
    }
    diffs.push_back(max_diff);
  }
  return diffs;
}

TEST(ContextDtypeTest, SixteenBitContextsAreReadDirectly) {
  const std::vector<double> diffs = SixteenBitScoreDiffs(GoldenModel("llama_gqa_tied"));
  for (size_t i = 0; i < diffs.size(); ++i) {
    const char* dtype = i == 0 ? "bf16" : "f16";
    RecordProperty(std::string("max_abs_logprob_diff_") + dtype, std::to_string(diffs[i]));
    EXPECT_LT(diffs[i], 0.1) << dtype;
    EXPECT_GT(diffs[i], 0.0) << "16-bit storage should not be bit-exact on random weights";
  }
}

// The same on every golden family (the accuracy figure of 16-bit K/V, the CUDA backend's default
// storage, in docs/performance.md): printed per family and dtype.
class SixteenBitKvGoldenTest : public ::testing::TestWithParam<ModelOnBackend> {};

TEST_P(SixteenBitKvGoldenTest, ScoresStayWithinATenthOfF32) {
  const std::vector<double> diffs = SixteenBitScoreDiffs(GoldenModel(GetParam().model));
  ASSERT_EQ(diffs.size(), 2u);
  std::printf("16-bit K/V, %s: max |sum log-prob - f32| bf16 %.6f f16 %.6f\n",
              GetParam().model.c_str(), diffs[0], diffs[1]);
  EXPECT_LT(diffs[0], 0.1);
  EXPECT_LT(diffs[1], 0.1);
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, SixteenBitKvGoldenTest,
                         ::testing::ValuesIn(GoldenModelsOn("cpu")), ModelOnBackendName);

}  // namespace
}  // namespace manyshot::testing

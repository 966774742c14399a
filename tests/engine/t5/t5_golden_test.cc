// T5 against goldens from the independent NumPy reference (tools/reference/t5_reference.py) for
// both configs (v1.0: relu, tied, rescaled logits; v1.1: gated-gelu, untied, 3 encoder / 2
// decoder blocks, d_kv * heads != d_model, bf16 shards): encoder states, teacher-forced decoder
// logits with cross-attention, and incremental decode with the KV cache. Tolerance 1e-4.
#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"
#include "tests/engine/support/golden_models.h"
#include "tests/engine/t5/t5_test_support.h"

namespace manyshot::testing {
namespace {

constexpr double kTolerance = 1e-4;

struct Case {
  std::vector<int32_t> input, target;
  std::vector<std::vector<double>> states, logits;
  std::vector<int64_t> argmax;
  std::vector<double> logsumexp;
};

std::vector<Case> Cases(const nlohmann::json& golden) {
  std::vector<Case> out;
  for (const auto& c : golden["cases"]) {
    out.push_back({c["input"].get<std::vector<int32_t>>(), c["target"].get<std::vector<int32_t>>(),
                   c["encoder_states"].get<std::vector<std::vector<double>>>(),
                   c["logits"].get<std::vector<std::vector<double>>>(),
                   c["argmax"].get<std::vector<int64_t>>(),
                   c["logsumexp"].get<std::vector<double>>()});
  }
  return out;
}

// Max |difference| of one logits row against the golden row (subset values and the whole
// row's log-sum-exp); the argmax over the whole vocabulary must agree.
double CompareRow(const float* row, int64_t vocab, const std::vector<int64_t>& subset,
                  const std::vector<double>& expected, int64_t argmax, double logsumexp) {
  double worst = 0;
  for (size_t i = 0; i < subset.size(); ++i) {
    worst = std::max(worst, std::abs(row[subset[i]] - expected[i]));
  }
  const float top = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int64_t j = 0; j < vocab; ++j) sum += std::exp(static_cast<double>(row[j]) - top);
  worst = std::max(worst, std::abs(top + std::log(sum) - logsumexp));
  EXPECT_EQ(std::max_element(row, row + vocab) - row, argmax);
  return worst;
}

class T5GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  const T5Model& model() const { return T5GoldenModel(GetParam()); }
  const nlohmann::json& golden() const { return T5Golden(GetParam()); }
  std::vector<int64_t> subset() const {
    return golden()["vocab_subset"].get<std::vector<int64_t>>();
  }
};

TEST_P(T5GoldenTest, EncoderStatesBatchedAndAlone) {
  const auto cases = Cases(golden());
  std::vector<std::vector<int32_t>> inputs;
  for (const Case& c : cases) inputs.push_back(c.input);
  auto batched = model().Encode(inputs);
  ASSERT_TRUE(batched.ok()) << batched.status();
  for (size_t i = 0; i < cases.size(); ++i) {
    auto alone = model().Encode({cases[i].input});
    ASSERT_TRUE(alone.ok()) << alone.status();
    for (const auto& [encoded, index] :
         {std::pair{&*batched, static_cast<int64_t>(i)}, std::pair{&*alone, int64_t{0}}}) {
      auto states = model().StatesToHost(*encoded, index);
      ASSERT_TRUE(states.ok()) << states.status();
      const int64_t d = model().config().d_model;
      ASSERT_EQ(states->size(), cases[i].states.size() * d);
      double worst = 0;
      for (size_t t = 0; t < cases[i].states.size(); ++t) {
        for (int64_t j = 0; j < d; ++j) {
          worst = std::max(worst, std::abs((*states)[t * d + j] - cases[i].states[t][j]));
        }
      }
      EXPECT_LE(worst, kTolerance) << GetParam() << " input " << i;
    }
  }
}

TEST_P(T5GoldenTest, TeacherForcedDecoderLogits) {
  const auto cases = Cases(golden());
  std::vector<std::vector<int32_t>> inputs;
  for (const Case& c : cases) inputs.push_back(c.input);
  auto encoded = model().Encode(inputs);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  // Every case in one batch, each decoding against its own input.
  std::vector<KvCache> caches;
  std::vector<std::vector<int64_t>> rows(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    caches.push_back(model().NewDecoderCache(4));
    for (size_t r = 0; r < cases[i].target.size(); ++r) rows[i].push_back(static_cast<int64_t>(r));
  }
  std::vector<T5DecoderSequence> batch;
  for (size_t i = 0; i < cases.size(); ++i) {
    batch.push_back({cases[i].target, &caches[i], &*encoded, static_cast<int64_t>(i), rows[i]});
  }
  auto result = model().Decode(batch);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->vocab_size, model().config().vocab_size);
  size_t row = 0;
  double worst = 0;
  for (const Case& c : cases) {
    for (size_t r = 0; r < c.target.size(); ++r, ++row) {
      worst = std::max(worst, CompareRow(result->row(row), result->vocab_size, subset(),
                                         c.logits[r], c.argmax[r], c.logsumexp[r]));
    }
  }
  EXPECT_LE(worst, kTolerance) << GetParam();
  RecordProperty("max_abs_diff", std::to_string(worst));
}

TEST_P(T5GoldenTest, IncrementalDecodeEqualsFullDecoder) {
  const auto cases = Cases(golden());
  std::vector<std::vector<int32_t>> inputs;
  for (const Case& c : cases) inputs.push_back(c.input);
  auto encoded = model().Encode(inputs);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  const std::vector<int64_t> last = {0};
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    // Token by token; and a chunk of three then token by token (a prefill followed by steps).
    for (size_t first_chunk : {size_t{1}, size_t{3}}) {
      KvCache cache = model().NewDecoderCache(1);
      double worst = 0;
      size_t done = 0;
      while (done < c.target.size()) {
        const size_t n = done == 0 ? first_chunk : 1;
        std::vector<int64_t> rows;
        for (size_t r = 0; r < n; ++r) rows.push_back(static_cast<int64_t>(r));
        absl::Span<const int32_t> tokens(c.target.data() + done, n);
        T5DecoderSequence seq{tokens, &cache, &*encoded, static_cast<int64_t>(i), rows};
        auto result = model().Decode({seq});
        ASSERT_TRUE(result.ok()) << result.status();
        for (size_t r = 0; r < n; ++r) {
          worst = std::max(
              worst, CompareRow(result->row(r), result->vocab_size, subset(), c.logits[done + r],
                                c.argmax[done + r], c.logsumexp[done + r]));
        }
        done += n;
        EXPECT_EQ(cache.length(), static_cast<int64_t>(done));
      }
      EXPECT_LE(worst, kTolerance) << GetParam() << " input " << i << " chunk " << first_chunk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BothConfigs, T5GoldenTest, ::testing::ValuesIn(kT5Goldens));

}  // namespace
}  // namespace manyshot::testing

namespace manyshot::testing {
namespace {

// A bf16 decoder KV cache (TransformerOptions::kv): incremental decode still equals the
// teacher-forced pass over the same cache dtype (both read the rounded keys/values), and both
// stay near the f32 golden (bf16 keeps 8 bits: 0.1 on logits of standard deviation 1-2).
TEST(T5KvDtypeTest, Bf16DecoderCacheIncrementalEqualsTeacherForced) {
  auto model = T5Model::Load(T5GoldenModelDir("v1_1"), TestBackend(),
                             TransformerOptions{std::nullopt, DType::kBF16});
  ASSERT_TRUE(model.ok()) << model.status();
  const auto cases = Cases(T5Golden("v1_1"));
  const Case& c = cases[1];
  auto encoded = (*model)->Encode({c.input});
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  std::vector<int64_t> all(c.target.size());
  for (size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int64_t>(r);
  KvCache full_cache = (*model)->NewDecoderCache(4);
  ASSERT_EQ(full_cache.dtype(), DType::kBF16);
  auto full = (*model)->Decode({{c.target, &full_cache, &*encoded, 0, all}});
  ASSERT_TRUE(full.ok()) << full.status();
  KvCache cache = (*model)->NewDecoderCache(1);
  const std::vector<int64_t> first = {0};
  const auto subset = T5Golden("v1_1")["vocab_subset"].get<std::vector<int64_t>>();
  double worst_step = 0, worst_golden = 0;
  for (size_t t = 0; t < c.target.size(); ++t) {
    auto step = (*model)->Decode(
        {{absl::Span<const int32_t>(c.target.data() + t, 1), &cache, &*encoded, 0, first}});
    ASSERT_TRUE(step.ok()) << step.status();
    for (int64_t j = 0; j < step->vocab_size; ++j) {
      worst_step =
          std::max(worst_step, static_cast<double>(std::abs(step->row(0)[j] - full->row(t)[j])));
    }
    for (size_t i = 0; i < subset.size(); ++i) {
      worst_golden = std::max(worst_golden, std::abs(full->row(t)[subset[i]] - c.logits[t][i]));
    }
  }
  EXPECT_LE(worst_step, kTolerance);
  EXPECT_LE(worst_golden, 0.1);
  EXPECT_GT(worst_golden, 0.0);  // the cache really is bf16
}

}  // namespace
}  // namespace manyshot::testing

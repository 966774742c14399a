// The forward pass against golden logits from the independent NumPy reference
// (tools/reference/reference.py): prefill of single and batched variable-length sequences,
// non-contiguous position ids, and incremental decode, for every model family. Tolerance 1e-4.
#include <algorithm>
#include <numeric>

#include "gtest/gtest.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

constexpr double kTolerance = 1e-4;

struct GoldenSequence {
  std::vector<int32_t> tokens, positions;
  std::vector<int64_t> rows;
  std::vector<std::vector<double>> logits;  // per recorded row, over vocab_subset
  std::vector<int64_t> argmax;
};

std::vector<GoldenSequence> Sequences(const nlohmann::json& c) {
  std::vector<GoldenSequence> out;
  for (const auto& s : c["sequences"]) {
    GoldenSequence g;
    g.tokens = s["tokens"].get<std::vector<int32_t>>();
    g.positions = s["positions"].get<std::vector<int32_t>>();
    g.rows = s["logit_rows"].get<std::vector<int64_t>>();
    g.logits = s["logits"].get<std::vector<std::vector<double>>>();
    g.argmax = s["argmax"].get<std::vector<int64_t>>();
    out.push_back(std::move(g));
  }
  return out;
}

// Compares one logits row against the golden row; returns the max abs difference.
double Compare(const float* row, int64_t vocab, const std::vector<int64_t>& subset,
               const std::vector<double>& expected, int64_t expected_argmax) {
  double max_diff = 0;
  for (size_t i = 0; i < subset.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(row[subset[i]]) - expected[i]));
  }
  int64_t argmax = std::max_element(row, row + vocab) - row;
  EXPECT_EQ(argmax, expected_argmax);
  return max_diff;
}

class ForwardGoldenTest : public ModelBackendTest {};

TEST_P(ForwardGoldenTest, PrefillBatchedAndAlone) {
  const auto& golden = ForwardGolden(family());
  const Transformer& model = this->model();
  const auto subset = golden["vocab_subset"].get<std::vector<int64_t>>();
  for (const auto& c : golden["cases"]) {
    auto seqs = Sequences(c);
    // The whole case as one batch.
    std::vector<KvCache> caches;
    for (size_t i = 0; i < seqs.size(); ++i) caches.push_back(model.NewCache(4));
    std::vector<ForwardSequence> batch;
    for (size_t i = 0; i < seqs.size(); ++i) {
      batch.push_back({seqs[i].tokens, seqs[i].positions, &caches[i], seqs[i].rows});
    }
    auto result = model.Forward(batch);
    ASSERT_TRUE(result.ok()) << result.status();
    size_t row = 0;
    double worst = 0;
    for (const auto& s : seqs) {
      for (size_t r = 0; r < s.rows.size(); ++r, ++row) {
        worst = std::max(
            worst, Compare(result->row(row), result->vocab_size, subset, s.logits[r], s.argmax[r]));
      }
    }
    EXPECT_LE(worst, kTolerance) << family() << " case " << c["name"];
    RecordProperty(std::string("max_abs_diff_") + c["name"].get<std::string>(),
                   std::to_string(worst));
    // Each sequence alone gives the same logits as inside the batch (to the golden tolerance:
    // OpenBLAS blocks a GEMM differently for different row counts, which moves float32 rounding).
    row = 0;
    for (const auto& s : seqs) {
      KvCache cache = model.NewCache(4);
      ForwardSequence one{s.tokens, s.positions, &cache, s.rows};
      auto alone = model.Forward({&one, 1});
      ASSERT_TRUE(alone.ok());
      for (size_t r = 0; r < s.rows.size(); ++r, ++row) {
        for (int64_t v = 0; v < alone->vocab_size; v += 97) {
          EXPECT_NEAR(alone->row(r)[v], result->row(row)[v], kTolerance);
        }
      }
    }
  }
}

TEST_P(ForwardGoldenTest, IncrementalDecodeMatchesPrefill) {
  const auto& golden = ForwardGolden(family());
  const Transformer& model = this->model();
  const auto subset = golden["vocab_subset"].get<std::vector<int64_t>>();
  for (const auto& c : golden["cases"]) {
    auto seqs = Sequences(c);
    // All sequences of the case decode together: a prefix prefill of 2 tokens, then one token per
    // step for every sequence that still has tokens (a batch whose members finish at different
    // steps).
    std::vector<KvCache> caches;
    for (size_t i = 0; i < seqs.size(); ++i) caches.push_back(model.NewCache(1));
    std::vector<size_t> done(seqs.size(), 0);
    double worst = 0;
    for (int step = 0;; ++step) {
      std::vector<ForwardSequence> batch;
      std::vector<std::vector<int64_t>> rows(seqs.size());
      std::vector<size_t> which;
      for (size_t i = 0; i < seqs.size(); ++i) {
        size_t n = step == 0 ? std::min<size_t>(2, seqs[i].tokens.size()) : 1;
        if (done[i] >= seqs[i].tokens.size()) continue;
        rows[i].resize(n);
        std::iota(rows[i].begin(), rows[i].end(), 0);
        batch.push_back({absl::Span<const int32_t>(seqs[i].tokens).subspan(done[i], n),
                         absl::Span<const int32_t>(seqs[i].positions).subspan(done[i], n),
                         &caches[i], rows[i]});
        which.push_back(i);
      }
      if (batch.empty()) break;
      auto result = model.Forward(batch);
      ASSERT_TRUE(result.ok()) << result.status();
      size_t row = 0;
      for (size_t b = 0; b < batch.size(); ++b) {
        size_t i = which[b];
        for (size_t r = 0; r < batch[b].tokens.size(); ++r, ++row) {
          size_t token_index = done[i] + r;  // golden rows are all tokens in order
          worst =
              std::max(worst, Compare(result->row(row), result->vocab_size, subset,
                                      seqs[i].logits[token_index], seqs[i].argmax[token_index]));
        }
        done[i] += batch[b].tokens.size();
      }
    }
    EXPECT_LE(worst, kTolerance) << family() << " case " << c["name"];
    RecordProperty(std::string("max_abs_diff_") + c["name"].get<std::string>(),
                   std::to_string(worst));
  }
}

TEST_P(ForwardGoldenTest, ClonedCacheContinuesIdentically) {
  const Transformer& model = this->model();
  const auto seqs = Sequences(ForwardGolden(family())["cases"][0]);
  const auto& s = seqs[0];
  KvCache cache = model.NewCache(2);
  std::vector<int64_t> none;
  ForwardSequence prefix{absl::Span<const int32_t>(s.tokens).subspan(0, 6),
                         absl::Span<const int32_t>(s.positions).subspan(0, 6), &cache, none};
  ASSERT_TRUE(model.Forward({&prefix, 1}).ok());
  auto cloned = cache.Clone();
  ASSERT_TRUE(cloned.ok()) << cloned.status();
  KvCache fork = *std::move(cloned);
  std::vector<int64_t> last = {0};
  ForwardSequence a{absl::Span<const int32_t>(s.tokens).subspan(6, 1),
                    absl::Span<const int32_t>(s.positions).subspan(6, 1), &cache, last};
  ForwardSequence b{absl::Span<const int32_t>(s.tokens).subspan(6, 1),
                    absl::Span<const int32_t>(s.positions).subspan(6, 1), &fork, last};
  auto ra = model.Forward({&a, 1});
  auto rb = model.Forward({&b, 1});
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->logits, rb->logits);
}

TEST_P(ForwardGoldenTest, RejectsBadIdsAndPositions) {
  const Transformer& model = this->model();
  KvCache cache = model.NewCache(2);
  std::vector<int32_t> tokens = {1, static_cast<int32_t>(model.config().vocab_size)};
  std::vector<int32_t> positions = {0, 1};
  ForwardSequence bad{tokens, positions, &cache, {}};
  auto result = model.Forward({&bad, 1});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("outside the vocabulary"), std::string::npos);
  std::vector<int32_t> ok_tokens = {1, 2};
  std::vector<int32_t> negative = {0, -1};
  ForwardSequence bad_pos{ok_tokens, negative, &cache, {}};
  EXPECT_EQ(model.Forward({&bad_pos, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cache.length(), 0);
}

MANYSHOT_INSTANTIATE_ON_EVERY_BACKEND(ForwardGoldenTest);
// The rope_scaling goldens, on every backend (Cuda-prefixed: the gpu label).
INSTANTIATE_TEST_SUITE_P(RopeScaling, ForwardGoldenTest,
                         ::testing::ValuesIn(RopeScaledModelsOn("cpu")), ModelOnBackendName);
INSTANTIATE_TEST_SUITE_P(CudaRopeScaling, ForwardGoldenTest,
                         ::testing::ValuesIn(RopeScaledModelsOn("cuda")), ModelOnBackendName);
INSTANTIATE_TEST_SUITE_P(SimtCudaRopeScaling, ForwardGoldenTest,
                         ::testing::ValuesIn(RopeScaledModelsOn("simt-cuda")), ModelOnBackendName);

}  // namespace
}  // namespace manyshot::testing

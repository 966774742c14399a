// TransformerOptions::weights: matrix weights held in bf16 on the CPU backend (widened inside the
// GEMV and sgemm paths, f32 accumulation). With a checkpoint already in bf16 the f32-held and the
// bf16-held model hold the same values, so their logits agree to float rounding (1e-5 of the
// largest logit: the computations differ only in how the GEMMs block their sums); with an f32
// checkpoint the bf16-held model really rounds its weights.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/model/synthetic/tiny_model.h"
#include "engine/transformer/transformer.h"
#include "gtest/gtest.h"

namespace manyshot {
namespace {

std::filesystem::path WriteModel(const std::string& family, DType checkpoint_dtype) {
  TinyModelSpec spec;
  spec.family = family;
  spec.vocab_size = 300;
  spec.hidden_size = 128;
  spec.intermediate_size = 256;
  spec.num_layers = 2;
  spec.num_heads = 4;
  spec.num_kv_heads = family == "gpt2" ? 4 : 2;
  spec.max_position_embeddings = 64;
  spec.tie_word_embeddings = family == "gpt2";
  spec.attention_bias = family == "gpt2";
  spec.dtype = checkpoint_dtype;
  spec.seed = 5;
  const std::filesystem::path base = std::filesystem::temp_directory_path() /
                                     ("manyshot_weight_dtype_" + std::to_string(::getpid()) + "_" +
                                      family + "_" + std::string(DTypeName(checkpoint_dtype)));
  std::filesystem::create_directories(base / "no-tokenizer");
  EXPECT_TRUE(WriteTinyModel(spec, base / "no-tokenizer", base / "model").ok());
  return base / "model";
}

// Logits of a 12-token prefill (every row: the sgemm path) and of 3 decode steps after it (one
// row: the GEMV path), concatenated.
std::vector<float> PrefillAndDecodeLogits(const Transformer& model) {
  std::vector<int32_t> tokens, positions;
  for (int32_t i = 0; i < 15; ++i) {
    tokens.push_back((i * 37 + 11) % 300);
    positions.push_back(i);
  }
  KvCache cache = model.NewCache(16);
  std::vector<float> all;
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < 12; ++r) rows.push_back(r);
  ForwardSequence prefill{absl::Span<const int32_t>(tokens).subspan(0, 12),
                          absl::Span<const int32_t>(positions).subspan(0, 12), &cache, rows};
  auto r = model.Forward({&prefill, 1});
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return all;
  all = r->logits;
  const std::vector<int64_t> row0 = {0};
  for (int64_t at = 12; at < 15; ++at) {
    ForwardSequence step{absl::Span<const int32_t>(tokens).subspan(at, 1),
                         absl::Span<const int32_t>(positions).subspan(at, 1), &cache, row0};
    auto d = model.Forward({&step, 1});
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return all;
    all.insert(all.end(), d->logits.begin(), d->logits.end());
  }
  return all;
}

struct Diff {
  double max_abs = 0, max_logit = 0;
};

Diff Compare(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d.max_abs = std::max(d.max_abs, static_cast<double>(std::fabs(a[i] - b[i])));
    d.max_logit = std::max(d.max_logit, static_cast<double>(std::fabs(a[i])));
  }
  return d;
}

class WeightDtypeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(WeightDtypeTest, Bf16HeldWeightsMatchTheSameValuesHeldInF32) {
  CpuBackend backend(2);
  const auto dir = WriteModel(GetParam(), DType::kBF16);
  auto wide = Transformer::Load(dir, backend);
  TransformerOptions options;
  options.weights = DType::kBF16;
  auto narrow = Transformer::Load(dir, backend, options);
  ASSERT_TRUE(wide.ok()) << wide.status();
  ASSERT_TRUE(narrow.ok()) << narrow.status();
  EXPECT_EQ((*wide)->weight_dtype(), DType::kF32);
  EXPECT_EQ((*narrow)->weight_dtype(), DType::kBF16);
  EXPECT_NE((*wide)->fingerprint(), (*narrow)->fingerprint());
  const Diff d = Compare(PrefillAndDecodeLogits(**wide), PrefillAndDecodeLogits(**narrow));
  EXPECT_GT(d.max_logit, 0.0);
  EXPECT_LE(d.max_abs, 1e-5 * d.max_logit);
  std::filesystem::remove_all(dir.parent_path());
}

TEST_P(WeightDtypeTest, Bf16HeldWeightsRoundAnF32Checkpoint) {
  CpuBackend backend(2);
  const auto dir = WriteModel(GetParam(), DType::kF32);
  auto wide = Transformer::Load(dir, backend);
  TransformerOptions options;
  options.weights = DType::kBF16;
  auto narrow = Transformer::Load(dir, backend, options);
  ASSERT_TRUE(wide.ok() && narrow.ok());
  const Diff d = Compare(PrefillAndDecodeLogits(**wide), PrefillAndDecodeLogits(**narrow));
  // Rounded weights give other logits, close to the f32 ones (each weight moves by <= 2^-9 of
  // itself; 5% of the largest logit leaves room for two layers of that).
  EXPECT_GT(d.max_abs, 0.0);
  EXPECT_LE(d.max_abs, 0.05 * d.max_logit);
  std::filesystem::remove_all(dir.parent_path());
}

INSTANTIATE_TEST_SUITE_P(Families, WeightDtypeTest, ::testing::Values("gpt2", "llama"));

TEST(WeightDtypeErrorsTest, AWeightDtypeTheBackendCannotWidenIsInvalidArgument) {
  CpuBackend backend(1);
  const auto dir = WriteModel("gpt2", DType::kF32);
  TransformerOptions options;
  options.weights = DType::kF16;
  auto model = Transformer::Load(dir, backend, options);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(model.status().message().find("f16 weights"), std::string_view::npos) << model.status();
  std::filesystem::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace manyshot

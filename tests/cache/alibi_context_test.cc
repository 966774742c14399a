// An ALiBi model's (BLOOM's) context keeps its keys' position ids through the in-memory cache
// paths (a conversion to the storage dtype and back, the pinned host tier), so it scores as the
// freshly encoded one; a context that arrives without them is refused by the engine, not scored
// wrongly; and a task scores a context restored from a KV file (which does not keep them) with
// the ids of its own layout, as the freshly encoded one (DESIGN.md §1.8's last identity).
#include "cache/disk_tier.h"
#include "cache/host_tier.h"
#include "cache/kv_convert.h"
#include "engine/model/synthetic/tiny_model.h"
#include "engine/prompting/context_encoder.h"
#include "engine/prompting/icl_task.h"
#include "engine/prompting/query_runner.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

constexpr int64_t kGroupLength = 12;

class AlibiContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Three groups of one demonstration each (masked left pads), so positions are not the same
    // in every group.
    std::vector<std::vector<int32_t>> demos = {{5, 6, 7}, {8, 9, 10, 11, 12, 13, 14}, {15, 16}};
    GroupOptions options;
    options.group_length = kGroupLength;
    options.alignment = Alignment::kAttentionMask;
    auto layout = BuildGroups(demos, options);
    ASSERT_TRUE(layout.ok()) << layout.status();
    layout_ = *layout;
    ASSERT_EQ(layout_.groups(), 2);
  }
  double Score(const EncodedContext& ctx, absl::Status* status = nullptr) {
    QueryWithCandidates item{{20, 21, 22}, {{23}, {24, 25}}};
    auto scores = ScoreCandidates(model(), &ctx, StructuredPlacement(kGroupLength, 2.0), 1, {item});
    if (status != nullptr) *status = scores.status();
    if (!scores.ok()) return 0;
    return (*scores)[0][1].sum_logprob;
  }
  const Transformer& model() { return GoldenModel("bloom"); }
  GroupLayout layout_;
};

TEST_F(AlibiContextTest, StorageDtypeRoundTripKeepsPositions) {
  auto fresh = EncodeGroups(model(), layout_, 1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_TRUE(fresh->kv.positions.defined());
  const double want = Score(*fresh);
  auto stored = ConvertContext(*fresh, DType::kBF16, TestBackend());
  ASSERT_TRUE(stored.ok()) << stored.status();
  auto back = ToF32(*stored, TestBackend());
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->kv.positions.defined());
  EXPECT_NEAR(Score(*back), want, 0.05);  // bf16 storage of K/V
}

TEST_F(AlibiContextTest, HostTierRoundTripKeepsPositions) {
  auto fresh = EncodeGroups(model(), layout_, 1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const double want = Score(*fresh);
  HostTier tier(size_t{1} << 30, TestBackend());
  ASSERT_TRUE(tier.Put("ctx", *fresh).ok());
  auto restored = tier.Restore("ctx");
  ASSERT_TRUE(restored.ok() && restored->has_value());
  EXPECT_EQ(Score(**restored), want);  // bit-exact K/V and the same positions
}

TEST_F(AlibiContextTest, AContextWithoutPositionsIsRefused) {
  auto fresh = EncodeGroups(model(), layout_, 1);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EncodedContext stripped = *fresh;
  stripped.kv.positions = Tensor();
  absl::Status status;
  Score(stripped, &status);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
}

TEST(AlibiTaskTest, AContextRestoredFromDiskScoresAsTheFreshOne) {
  // A tiny BLOOM with GPT-2's vocabulary size, so the real GPT-2 tokenizer can drive a task.
  const std::filesystem::path dir = FreshTempDir("alibi_task");
  TinyModelSpec spec;
  spec.family = "bloom";
  spec.vocab_size = 50257;
  spec.hidden_size = 64;
  spec.intermediate_size = 256;
  spec.num_layers = 2;
  spec.num_heads = 4;
  spec.num_kv_heads = 4;
  spec.max_position_embeddings = 2048;
  spec.tie_word_embeddings = true;
  spec.attention_bias = true;
  spec.seed = 11;
  ASSERT_TRUE(WriteTinyModel(spec, "", dir / "model").ok());
  auto model = Transformer::Load(dir / "model", TestBackend());
  ASSERT_TRUE(model.ok()) << model.status();
  TaskOptions o;
  o.input_template = "Sentence: {text}\nLabel:";
  o.labels = {"negative", "positive"};
  o.group_length = 48;
  o.max_query_tokens = 64;
  o.max_answer_tokens = 8;
  o.alignment = Alignment::kAttentionMask;  // groups of different fill: positions differ
  auto task = IclTask::Prepare(**model, Gpt2Tokenizer(), o, Sst2Demonstrations());
  ASSERT_TRUE(task.ok()) << task.status();
  ASSERT_GT((*task)->layout().groups(), 1);
  auto fresh = (*task)->EncodeContext();
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const std::vector<double> want = ScoreSst2(**task, *fresh);

  auto disk = DiskTier::Open(dir / "db", DiskTierOptions{});
  ASSERT_TRUE(disk.ok()) << disk.status();
  ASSERT_TRUE((*disk)->PutBlob("k", *fresh, TestBackend()).ok());
  auto restored = (*disk)->LoadBlob("k", TestBackend(), DType::kF32);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_FALSE(restored->kv.positions.defined());  // KV files keep K/V only
  EXPECT_TRUE((*task)->CheckContext(*restored).ok());
  EXPECT_EQ(ScoreSst2(**task, *restored), want);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace manyshot::testing

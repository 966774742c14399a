// Sliding-window models (Mistral-7B-v0.1's sliding_window, Qwen2's use_sliding_window, Gemma 2's
// alternating layers) are served within their window (docs/structured_prompting.md,
// "Sliding-window models"): a task whose layout fits in the window prepares, encodes and
// classifies; one the window would cut is refused naming the window, and the model refuses
// positions past it.
#include <fstream>

#include "engine/model/synthetic/tiny_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWindow = 160;

// A tiny model of `family` with the GPT-2 vocabulary (so the GPT-2 tokenizer's ids fit), 2048
// positions and the window keys `window_keys` added to its config.json.
std::unique_ptr<Transformer> WindowedModel(const std::string& family,
                                           const nlohmann::json& window_keys) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / ("sliding_window_" + family);
  TinyModelSpec spec;
  spec.family = family;
  spec.vocab_size = 50257;
  spec.hidden_size = 32;
  spec.intermediate_size = 64;
  spec.num_layers = 2;
  spec.num_heads = 4;
  spec.num_kv_heads = 2;
  spec.max_position_embeddings = 2048;
  spec.attention_bias = family == "qwen2";
  spec.seed = 21;
  const auto no_tokenizer = dir / "no-tokenizer";
  std::filesystem::create_directories(no_tokenizer);
  const absl::Status written = WriteTinyModel(spec, no_tokenizer, dir / "model");
  EXPECT_TRUE(written.ok()) << written;
  const auto config_path = dir / "model" / "config.json";
  nlohmann::json config = nlohmann::json::parse(std::ifstream(config_path));
  config.update(window_keys);
  std::ofstream(config_path) << config.dump(2);
  return ValueOrAbort(Transformer::Load(dir / "model", TestBackend()));
}

TaskOptions Sst2Options(int64_t group_length) {
  TaskOptions o;
  o.input_template = "Sentence: {text}\nLabel:";
  o.labels = {"negative", "positive"};
  o.group_length = group_length;
  o.max_query_tokens = 40;
  o.max_answer_tokens = 8;
  return o;
}

class SlidingWindowTest : public ::testing::TestWithParam<std::string> {
 protected:
  static nlohmann::json WindowKeys(const std::string& family) {
    if (family == "qwen2") {
      return {{"use_sliding_window", true}, {"sliding_window", kWindow}, {"max_window_layers", 1}};
    }
    return {{"sliding_window", kWindow}};
  }
};

TEST_P(SlidingWindowTest, ServedWithinTheWindow) {
  const auto model = WindowedModel(GetParam(), WindowKeys(GetParam()));
  EXPECT_EQ(model->config().sliding_window, kWindow);
  EXPECT_EQ(ContextLength(model->config()), kWindow);
  EXPECT_EQ(model->max_position(), kWindow);

  // Group keys at positions < L, the query and answer after them: all within the window.
  const int64_t fits = kWindow - 40 - 8;
  auto task = IclTask::Prepare(*model, Gpt2Tokenizer(), Sst2Options(fits), Sst2Demonstrations());
  ASSERT_TRUE(task.ok()) << task.status();
  auto context = (*task)->EncodeContext();
  ASSERT_TRUE(context.ok()) << context.status();
  auto results = (*task)->Classify(&*context, {{"a delightful film", {}, ""}});
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 1u);
  EXPECT_NEAR((*results)[0].labels[0].probability + (*results)[0].labels[1].probability, 1.0, 1e-9);

  // One position more and the window would cut the layout: refused, naming the window.
  auto cut = IclTask::Prepare(*model, Gpt2Tokenizer(), Sst2Options(fits + 1), Sst2Demonstrations());
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cut.status().message(),
              HasSubstr("context length 160 (its sliding attention window)"));

  // The default layout fills the window exactly.
  TaskOptions defaulted = Sst2Options(0);
  auto whole = IclTask::Prepare(*model, Gpt2Tokenizer(), defaulted, Sst2Demonstrations());
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ((*whole)->layout().group_length, fits);
}

TEST_P(SlidingWindowTest, ForwardRefusesPositionsPastTheWindow) {
  const auto model = WindowedModel(GetParam(), WindowKeys(GetParam()));
  const std::vector<int32_t> tokens = {1, 2};
  for (int32_t last : {static_cast<int32_t>(kWindow - 1), static_cast<int32_t>(kWindow)}) {
    const std::vector<int32_t> positions = {0, last};
    KvCache cache = model->NewCache(2);
    const std::vector<int64_t> rows = {1};
    ForwardSequence seq{tokens, positions, &cache, rows};
    auto result = model->Forward({&seq, 1});
    if (last < kWindow) {
      EXPECT_TRUE(result.ok()) << result.status();
    } else {
      ASSERT_FALSE(result.ok());
      EXPECT_THAT(result.status().message(),
                  HasSubstr("position 160 is outside [0, 160), the model's sliding attention "
                            "window"));
    }
  }
}

// A window no shorter than the positions changes nothing: the model serves all of them.
TEST_P(SlidingWindowTest, WindowCoveringEveryPositionIsNoLimit) {
  nlohmann::json keys = WindowKeys(GetParam());
  keys["sliding_window"] = 2048;
  const auto model = WindowedModel(GetParam(), keys);
  EXPECT_EQ(model->config().sliding_window, 0);
  EXPECT_EQ(model->max_position(), 2048);
}

INSTANTIATE_TEST_SUITE_P(Families, SlidingWindowTest,
                         ::testing::Values("mistral", "qwen2", "gemma2"));

}  // namespace
}  // namespace manyshot::testing

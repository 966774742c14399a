// Content-addressed keys: equal inputs give equal keys; a change in any input gives another key.
#include "engine/task/cache_key.h"
#include "engine/prompting/icl_cache_key.h"

#include <functional>
#include <set>

#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

CacheKeyInputs Base() {
  CacheKeyInputs in;
  in.model_fingerprint = "model-abc";
  in.tokenizer_fingerprint = "tok-123";
  in.demonstrations = {{1, 2, 3}, {4, 5}};
  in.input_template = "Sentence: {text}\nLabel:";
  in.answer_template = " {label}";
  in.separator = "\n\n";
  in.group_length = 48;
  return in;
}

TEST(CacheKeyTest, IsStableHex) {
  const std::string key = ComputeCacheKey(Base());
  EXPECT_EQ(key.size(), 32u);
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(key, ComputeCacheKey(Base()));
}

TEST(CacheKeyTest, EveryInputChangesTheKey) {
  std::vector<std::function<void(CacheKeyInputs&)>> changes = {
      [](auto& in) { in.format_version += 1; },
      [](auto& in) { in.model_fingerprint += "x"; },
      [](auto& in) { in.tokenizer_fingerprint += "x"; },
      [](auto& in) { std::swap(in.demonstrations[0], in.demonstrations[1]); },  // order
      [](auto& in) { in.demonstrations[1].push_back(6); },
      [](auto& in) { in.demonstrations.push_back({7}); },
      [](auto& in) {
        in.demonstrations = {{1, 2}, {3, 4, 5}};
      },  // same tokens, other split
      [](auto& in) { in.input_template += " "; },
      [](auto& in) { in.answer_template = "{label}"; },
      [](auto& in) { in.separator = "\n"; },
      [](auto& in) { in.group_length = 49; },
      [](auto& in) { in.alignment = Alignment::kAttentionMask; },
      [](auto& in) { in.long_demonstrations = LongDemonstrationPolicy::kTruncate; },
      [](auto& in) { in.kv_dtype = DType::kBF16; },
      [](auto& in) { in.sharing_scope = "tenant-b"; },
      // Length prefixes: moving a character between adjacent fields is a change.
      [](auto& in) {
        in.answer_template = " {label}\n";
        in.separator = "\n";
      },
  };
  std::set<std::string> keys = {ComputeCacheKey(Base())};
  for (size_t i = 0; i < changes.size(); ++i) {
    CacheKeyInputs in = Base();
    changes[i](in);
    EXPECT_TRUE(keys.insert(ComputeCacheKey(in)).second) << "change " << i;
  }
}

TEST(CacheKeyTest, EqualTasksShareAKeyAndOrderMatters) {
  const Transformer& model = GoldenModel("gpt2");
  auto a = Sst2Task();
  auto b = Sst2Task();
  EXPECT_EQ(CacheKeyForTask(model, Gpt2Tokenizer(), *a, DType::kF32),
            CacheKeyForTask(model, Gpt2Tokenizer(), *b, DType::kF32));
  auto shuffled = Sst2Task(/*shuffle_seed=*/7);
  EXPECT_NE(CacheKeyForTask(model, Gpt2Tokenizer(), *a, DType::kF32),
            CacheKeyForTask(model, Gpt2Tokenizer(), *shuffled, DType::kF32));
  EXPECT_NE(CacheKeyForTask(model, Gpt2Tokenizer(), *a, DType::kF32),
            CacheKeyForTask(model, Gpt2Tokenizer(), *a, DType::kBF16));
  // The key's demonstrations are the packing order.
  CacheKeyInputs in = KeyInputsForTask(model, Gpt2Tokenizer(), *shuffled, DType::kF32);
  ASSERT_EQ(in.demonstrations.size(), 8u);
  EXPECT_EQ(in.demonstrations[0], shuffled->demonstration_tokens()[shuffled->layout().order[0]]);
  EXPECT_EQ(in.model_fingerprint, model.fingerprint());
}

}  // namespace
}  // namespace manyshot::testing

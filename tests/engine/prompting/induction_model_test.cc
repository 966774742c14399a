// The hand-written induction model (engine/model/synthetic/induction_model.h) on the synthetic
// induction task (tools/induction_task.h), through the engine's task API with the real GPT-2
// tokenizer: a query whose key is among the demonstrations gets that key's label, in every mode,
// and accuracy rises with the shots from chance to 1.
#include "engine/model/synthetic/induction_model.h"

#include <map>
#include <set>

#include "engine/prompting/icl_task.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"
#include "tests/engine/support/golden_models.h"
#include "tools/induction_task.h"

namespace manyshot::testing {
namespace {

constexpr int64_t kContextLength = 1024;

// The default spec but for a shorter window, stored in `dtype`, written into `dir` and loaded.
std::unique_ptr<Transformer> WriteAndLoad(const TempDir& dir, DType dtype) {
  InductionModelSpec spec;
  spec.max_position_embeddings = kContextLength;
  spec.dtype = dtype;
  absl::Status st = WriteInductionModel(spec, MANYSHOT_GPT2_TOKENIZER_DIR, dir.path());
  EXPECT_TRUE(st.ok()) << st;
  auto loaded = Transformer::Load(dir.path(), TestBackend());
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return loaded.ok() ? *std::move(loaded) : nullptr;
}

// The f32 model, written and loaded once per process.
const Transformer& InductionModel() {
  static TempDir dir;  // destroyed at exit, after the model (declared later)
  static std::unique_ptr<Transformer> model = WriteAndLoad(dir, DType::kF32);
  return *model;
}

// 64 keys, four labels, every key four times in the training split.
const InductionTaskData& TaskData() {
  static const InductionTaskData data = [] {
    InductionTaskSpec spec;
    spec.keys = 64;
    spec.test_size = 128;
    auto made = MakeInductionTask(Gpt2Tokenizer(), spec);
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? *std::move(made) : InductionTaskData{};
  }();
  return data;
}

// Every key once, in the training split's order.
std::vector<Example> EveryKeyOnce() {
  std::vector<Example> demos;
  std::set<std::string> keys;
  for (const Example& e : TaskData().train) {
    if (keys.insert(e.text).second) demos.push_back(e);
  }
  return demos;
}

struct ModeCase {
  const char* name;
  PromptMode mode;
};

void PrintTo(const ModeCase& mode, std::ostream* os) { *os << mode.name; }
std::string ModeName(const ::testing::TestParamInfo<ModeCase>& mode) { return mode.param.name; }

class InductionModelTest : public ::testing::TestWithParam<ModeCase> {
 protected:
  // Options for this mode; STRUCTURED and PARALLEL get short groups (so there are many) with
  // whole demonstrations in each, so that every demonstration shown is whole in some group.
  TaskOptions Options() const {
    TaskOptions o = InductionTaskOptions(InductionTaskSpec().labels);
    o.mode = GetParam().mode;
    o.max_query_tokens = 8;
    o.max_answer_tokens = 8;
    if (o.mode != PromptMode::kConventional) {
      o.group_length = 64;
      o.alignment = Alignment::kAttentionMask;
    }
    return o;
  }

  struct Outcome {
    double accuracy = 0;           // over all test inputs
    double covered_accuracy = -1;  // over those whose key the model saw (-1: none)
    int64_t covered = 0;
  };

  // The first `shots` training examples, the demonstrations of an evaluation.
  static std::vector<Example> FirstShots(int64_t shots) {
    const std::vector<Example>& train = TaskData().train;
    return std::vector<Example>(train.begin(), train.begin() + shots);
  }

  // Classifies the test split with `demos` as the demonstrations.
  Outcome Evaluate(const std::vector<Example>& demos) const {
    const InductionTaskData& data = TaskData();
    auto task = IclTask::Prepare(InductionModel(), Gpt2Tokenizer(), Options(), demos);
    EXPECT_TRUE(task.ok()) << task.status();
    if (!task.ok()) return {};
    // The keys the model sees: the conventional window keeps the leading demonstrations that fit
    // (every one is "key label\n", three tokens); structured groups keep them all.
    std::set<std::string> seen;
    int64_t window = (*task)->layout().group_length - 1;
    for (size_t i = 0; i < demos.size(); ++i) {
      const int64_t n = static_cast<int64_t>((*task)->demonstration_tokens()[i].size());
      EXPECT_EQ(n, 3) << demos[i].text;
      if (GetParam().mode == PromptMode::kConventional) {
        if (n > window) break;
        window -= n;
      }
      seen.insert(demos[i].text);
    }
    std::unique_ptr<EncodedContext> context;
    if (GetParam().mode != PromptMode::kConventional) {
      auto encoded = (*task)->EncodeContext();
      EXPECT_TRUE(encoded.ok()) << encoded.status();
      if (!encoded.ok()) return {};
      context = std::make_unique<EncodedContext>(*std::move(encoded));
    }
    auto results = (*task)->Classify(context.get(), data.test);
    EXPECT_TRUE(results.ok()) << results.status();
    if (!results.ok()) return {};
    const std::vector<std::string>& labels = (*task)->options().labels;
    int64_t right = 0, covered_right = 0;
    Outcome out;
    for (size_t i = 0; i < data.test.size(); ++i) {
      const bool correct =
          labels[static_cast<size_t>((*results)[i].prediction)] == data.test[i].label;
      right += correct;
      if (seen.count(data.test[i].text) > 0) {
        ++out.covered;
        covered_right += correct;
      }
    }
    out.accuracy = static_cast<double>(right) / static_cast<double>(data.test.size());
    if (out.covered > 0) {
      out.covered_accuracy = static_cast<double>(covered_right) / static_cast<double>(out.covered);
    }
    return out;
  }
};

TEST(InductionTaskTest, KeysAreOneTokenWordsWithBalancedLabels) {
  const InductionTaskData& data = TaskData();
  ASSERT_EQ(data.keys.size(), 64u);
  ASSERT_EQ(data.train.size(), 256u);
  ASSERT_EQ(data.test.size(), 128u);
  std::map<std::string, std::string> label_of;
  std::map<std::string, int> per_label;
  for (const Example& e : data.train) {
    auto [it, inserted] = label_of.emplace(e.text, e.label);
    EXPECT_EQ(it->second, e.label) << "key " << e.text << " has two labels";
    if (inserted) ++per_label[e.label];
    auto tokens = Gpt2Tokenizer().Encode(e.text);
    ASSERT_TRUE(tokens.ok());
    EXPECT_EQ(tokens->size(), 1u) << e.text;
  }
  EXPECT_EQ(label_of.size(), 64u);
  for (const auto& [label, keys] : per_label) EXPECT_EQ(keys, 16) << label;
  for (const Example& e : data.test) EXPECT_EQ(label_of.at(e.text), e.label);
  // The same spec gives the same task.
  InductionTaskSpec spec;
  spec.keys = 64;
  spec.test_size = 128;
  auto again = MakeInductionTask(Gpt2Tokenizer(), spec);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->keys, data.keys);
}

TEST(InductionTaskTest, BadSpecsAreRejected) {
  InductionTaskSpec spec;
  spec.labels = {"red", "notawordatall"};
  auto made = MakeInductionTask(Gpt2Tokenizer(), spec);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(made.status().message(), ::testing::HasSubstr("notawordatall"));
  spec = {};
  spec.keys = 1000000;
  EXPECT_EQ(MakeInductionTask(Gpt2Tokenizer(), spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InductionModelSpecTest, SameSpecSameTensorsAndBadSpecsAreRejected) {
  InductionModelSpec spec;
  spec.vocab_size = 1000;
  spec.bos_token_id = spec.eos_token_id = 999;
  spec.code_dims = 16;
  auto a = InductionModelTensors(spec);
  auto b = InductionModelTensors(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) EXPECT_EQ((*a)[i].data, (*b)[i].data) << (*a)[i].name;
  spec.code_dims = 6;
  EXPECT_EQ(InductionModelConfig(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.code_dims = 16;
  spec.bos_token_id = 1000;
  EXPECT_EQ(InductionModelConfig(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.bos_token_id = 999;
  spec.max_position_embeddings = 1 << 18;
  EXPECT_EQ(InductionModelConfig(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.max_position_embeddings = 2048;
  spec.rope_theta = 10000;
  EXPECT_EQ(InductionModelConfig(spec).status().code(), absl::StatusCode::kInvalidArgument);
  spec.rope_theta = 1e12f;
  EXPECT_TRUE(InductionModelConfig(spec).ok());
}

TEST_P(InductionModelTest, AQueryWhoseKeyWasShownGetsItsLabel) {
  // Every key once: every test input is decidable.
  const Outcome all = Evaluate(EveryKeyOnce());
  EXPECT_EQ(all.covered, static_cast<int64_t>(TaskData().test.size()));
  EXPECT_EQ(all.accuracy, 1.0);
}

TEST_P(InductionModelTest, AccuracyRisesWithShotsFromChanceToOne) {
  std::vector<double> accuracy;
  for (int64_t shots : {1, 4, 16, 64, 256}) {
    const Outcome o = Evaluate(FirstShots(shots));
    SCOPED_TRACE(::testing::Message() << shots << " shots");
    if (o.covered > 0) {
      EXPECT_EQ(o.covered_accuracy, 1.0);
    }
    accuracy.push_back(o.accuracy);
  }
  // One shot answers at most a few inputs for sure; the rest are guesses among four labels.
  EXPECT_LT(accuracy.front(), 0.45);
  // 256 shots show every key (each is four times in the training split).
  EXPECT_EQ(accuracy.back(), 1.0);
  for (size_t i = 1; i < accuracy.size(); ++i) {
    // Inputs not covered are guesses, so a step may lose a little; the trend must be up.
    EXPECT_GE(accuracy[i], accuracy[i - 1] - 0.05) << "step " << i;
  }
  EXPECT_GT(accuracy[3], accuracy[1] + 0.3);
}

TEST_P(InductionModelTest, GreedyGenerationCopiesTheLabel) {
  const InductionTaskData& data = TaskData();
  auto task = IclTask::Prepare(InductionModel(), Gpt2Tokenizer(), Options(), EveryKeyOnce());
  ASSERT_TRUE(task.ok()) << task.status();
  std::unique_ptr<EncodedContext> context;
  if (GetParam().mode != PromptMode::kConventional) {
    auto encoded = (*task)->EncodeContext();
    ASSERT_TRUE(encoded.ok()) << encoded.status();
    context = std::make_unique<EncodedContext>(*std::move(encoded));
  }
  GenerationParams params;
  params.max_new_tokens = 1;
  for (size_t i = 0; i < 8; ++i) {
    auto out = (*task)->Generate(context.get(), data.test[i], params);
    ASSERT_TRUE(out.ok()) << out.status();
    auto text = Gpt2Tokenizer().Decode(out->tokens);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(*text, " " + data.test[i].label) << data.test[i].text;
  }
}

TEST(InductionModelDtypeTest, StoredInBf16ItStillCopies) {
  TempDir dir;
  std::unique_ptr<Transformer> model = WriteAndLoad(dir, DType::kBF16);
  ASSERT_NE(model, nullptr);
  for (PromptMode mode : {PromptMode::kStructured, PromptMode::kConventional}) {
    TaskOptions options = InductionTaskOptions(InductionTaskSpec().labels);
    options.mode = mode;
    if (mode == PromptMode::kStructured) {
      options.group_length = 64;
      options.alignment = Alignment::kAttentionMask;
    }
    options.max_query_tokens = 8;
    options.max_answer_tokens = 8;
    auto task = IclTask::Prepare(*model, Gpt2Tokenizer(), options, EveryKeyOnce());
    ASSERT_TRUE(task.ok()) << task.status();
    std::unique_ptr<EncodedContext> context;
    if (mode == PromptMode::kStructured) {
      auto encoded = (*task)->EncodeContext();
      ASSERT_TRUE(encoded.ok()) << encoded.status();
      context = std::make_unique<EncodedContext>(*std::move(encoded));
    }
    auto results = (*task)->Classify(context.get(), TaskData().test);
    ASSERT_TRUE(results.ok()) << results.status();
    for (size_t i = 0; i < results->size(); ++i) {
      EXPECT_EQ(options.labels[static_cast<size_t>((*results)[i].prediction)],
                TaskData().test[i].label)
          << TaskData().test[i].text;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, InductionModelTest,
                         ::testing::Values(ModeCase{"Structured", PromptMode::kStructured},
                                           ModeCase{"Parallel", PromptMode::kParallel},
                                           ModeCase{"Conventional", PromptMode::kConventional}),
                         ModeName);

}  // namespace
}  // namespace manyshot::testing

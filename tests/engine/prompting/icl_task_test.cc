// The task API end to end with the real GPT-2 tokenizer on the tiny GPT-2 model: rendering,
// continuation tokenization, labels sharing a prefix, calibration arithmetic, modes, limits and
// errors, empty and non-ASCII inputs, generation.
#include "engine/prompting/icl_task.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

TaskOptions Sst2Options() {
  TaskOptions o;
  o.input_template = "Sentence: {text}\nLabel:";
  o.labels = {"negative", "positive"};
  o.group_length = 48;
  o.max_query_tokens = 64;
  o.max_answer_tokens = 8;
  return o;
}

// A prepared task with its encoded context; queries go through the helpers below.
struct EncodedTask {
  std::unique_ptr<IclTask> task;
  EncodedContext context;
  IclTask* operator->() { return task.get(); }
  auto Classify(const std::vector<Example>& inputs, const QueryOverrides& o = {}) {
    return task->Classify(&context, inputs, o);
  }
  auto ScoreChoices(const std::vector<Example>& inputs,
                    const std::vector<std::vector<std::string>>& candidates) {
    return task->ScoreChoices(&context, inputs, candidates);
  }
  auto Generate(const Example& input, const GenerationParams& params) {
    return task->Generate(&context, input, params);
  }
};

EncodedTask PreparedSst2(TaskOptions options = Sst2Options()) {
  auto task = IclTask::Prepare(GoldenModel("gpt2"), Gpt2Tokenizer(), options, Sst2Demonstrations());
  EXPECT_TRUE(task.ok()) << task.status();
  auto context = (*task)->EncodeContext();
  EXPECT_TRUE(context.ok());
  return {*std::move(task), *std::move(context)};
}

TEST(IclTaskTest, DemonstrationsAreRenderedAndTokenizedInOneCall) {
  auto task = PreparedSst2();
  auto expected = Gpt2Tokenizer().Encode(
      "Sentence: a stirring , funny and finally transporting re-imagining\nLabel: positive\n\n");
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(task->demonstration_tokens()[0], *expected);
  EXPECT_EQ(task->layout().group_length, 48);
  EXPECT_GT(task->layout().groups(), 1);
  EXPECT_EQ(task.context.tokens, task->layout().context_tokens);
  EXPECT_EQ(task.context.bytes(), 2ull * 2 * task.context.tokens * 4 * 16 * 4);
  EXPECT_TRUE(task->CheckContext(task.context).ok());
}

// What the registry reports as a task's cache bytes: its context's K/V in the cache's dtype.
TEST(IclTaskTest, ContextBytesAreTheEncodedContextInTheStorageDtype) {
  auto task = PreparedSst2();
  EXPECT_EQ(task->ContextBytes(DType::kF32), task.context.bytes());
  EXPECT_EQ(task->ContextBytes(DType::kBF16), task.context.bytes() / 2);
}

TEST(IclTaskTest, ContinuationTokensFollowTheHarnessRule) {
  auto task = PreparedSst2();
  auto c = task->ContinuationTokens("Sentence: great\nLabel:", " positive");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, *Gpt2Tokenizer().Encode(" positive"));
  // Labels sharing a prefix get different continuations, each scored on its own tokens.
  auto a = task->ContinuationTokens("Label:", " good");
  auto b = task->ContinuationTokens("Label:", " good luck");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(b->size(), a->size());
  EXPECT_EQ((*b)[0], (*a)[0]);
}

TEST(IclTaskTest, ClassifyReturnsConsistentScores) {
  auto task = PreparedSst2();
  std::vector<Example> inputs = {
      {"a delightful film", {}, ""}, {"", {}, ""}, {"un film très réussi 🎬 — 映画", {}, ""}};
  auto results = task.Classify(inputs);
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 3u);
  for (const auto& r : *results) {
    ASSERT_EQ(r.labels.size(), 2u);
    double total = r.labels[0].probability + r.labels[1].probability;
    EXPECT_NEAR(total, 1.0, 1e-12);
    for (const auto& l : r.labels) {
      EXPECT_LT(l.score.sum_logprob, 0);
      EXPECT_NEAR(l.score.mean_logprob, l.score.sum_logprob / l.score.tokens, 1e-12);
      EXPECT_EQ(l.calibrated_probability, l.probability);  // not calibrating
    }
    int64_t argmax = r.labels[1].score.mean_logprob > r.labels[0].score.mean_logprob ? 1 : 0;
    EXPECT_EQ(r.prediction, argmax);
  }
  // The same input alone gives the same scores as in the batch.
  auto alone = task.Classify({inputs[2]});
  ASSERT_TRUE(alone.ok());
  EXPECT_NEAR((*alone)[0].labels[0].score.sum_logprob, (*results)[2].labels[0].score.sum_logprob,
              1e-5);
}

TEST(IclTaskTest, CalibrationDividesByTheContentFreeDistribution) {
  TaskOptions options = Sst2Options();
  options.calibrate = true;
  auto calibrated = PreparedSst2(options);
  auto plain = PreparedSst2();
  auto content_free = plain.Classify({{"N/A", {}, ""}});
  ASSERT_TRUE(content_free.ok());
  const double cf0 = (*content_free)[0].labels[0].probability;
  const double cf1 = (*content_free)[0].labels[1].probability;
  auto r = calibrated.Classify({{"a delightful film", {}, ""}});
  ASSERT_TRUE(r.ok());
  const auto& l = (*r)[0].labels;
  const double w0 = l[0].probability / cf0, w1 = l[1].probability / cf1;
  EXPECT_NEAR(l[0].calibrated_probability, w0 / (w0 + w1), 1e-9);
  EXPECT_NEAR(l[1].calibrated_probability, w1 / (w0 + w1), 1e-9);
  EXPECT_EQ((*r)[0].prediction, l[1].calibrated_probability > l[0].calibrated_probability ? 1 : 0);
}

TEST(IclTaskTest, ModesAndOverrides) {
  auto task = PreparedSst2();
  Example input{"a delightful film", {}, ""};
  auto structured = task.Classify({input});
  QueryOverrides parallel;
  parallel.mode = PromptMode::kParallel;
  QueryOverrides factor_one;
  factor_one.rescale_factor = 1.0;
  QueryOverrides conventional;
  conventional.mode = PromptMode::kConventional;
  auto p = task.Classify({input}, parallel);
  auto f1 = task.Classify({input}, factor_one);
  auto c = task.Classify({input}, conventional);
  ASSERT_TRUE(structured.ok() && p.ok() && f1.ok() && c.ok()) << c.status();
  EXPECT_NEAR((*p)[0].labels[0].score.sum_logprob, (*f1)[0].labels[0].score.sum_logprob, 1e-9);
  EXPECT_GT(
      std::abs((*p)[0].labels[0].score.sum_logprob - (*structured)[0].labels[0].score.sum_logprob),
      1e-6);
  EXPECT_GT(
      std::abs((*c)[0].labels[0].score.sum_logprob - (*structured)[0].labels[0].score.sum_logprob),
      1e-6);
  QueryOverrides bad;
  bad.rescale_factor = -2;
  EXPECT_EQ(task.Classify({input}, bad).status().code(), absl::StatusCode::kInvalidArgument);
  // A factor is for STRUCTURED mode: with PARALLEL or CONVENTIONAL it is an error naming the mode,
  // never a silent switch to structured attention.
  for (PromptMode mode : {PromptMode::kParallel, PromptMode::kConventional}) {
    QueryOverrides factor_in_other_mode;
    factor_in_other_mode.mode = mode;
    factor_in_other_mode.rescale_factor = 2.0;
    auto refused = task.Classify({input}, factor_in_other_mode);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find(mode == PromptMode::kParallel ? "PARALLEL"
                                                                            : "CONVENTIONAL"),
              std::string::npos)
        << refused.status();
  }
}

TEST(IclTaskTest, MultiChoiceScoresCandidatesPerInput) {
  auto task = PreparedSst2();
  auto r = task.ScoreChoices({{"the plot", {}, ""}, {"the cast", {}, ""}},
                             {{" dull", " thrilling and fresh"}, {" weak", " strong", " odd"}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ((*r)[0].candidates.size(), 2u);
  ASSERT_EQ((*r)[1].candidates.size(), 3u);
  EXPECT_GT((*r)[0].candidates[1].tokens, 1);
  EXPECT_EQ(task.ScoreChoices({{"x", {}, ""}}, {{}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(IclTaskTest, GreedyIsBeamOfWidthOneAndBeamSearchIsDeterministic) {
  auto task = PreparedSst2();
  Example input{"a delightful film", {}, ""};
  GenerationParams greedy;
  greedy.max_new_tokens = 5;
  std::vector<int32_t> streamed;
  greedy.on_token = [&](int32_t t, double) { streamed.push_back(t); };
  auto g = task.Generate(input, greedy);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tokens, streamed);
  GenerationParams beam1;
  beam1.beam_search = true;
  beam1.beam_width = 1;
  beam1.max_new_tokens = 5;
  auto b1 = task.Generate(input, beam1);
  ASSERT_TRUE(b1.ok());
  EXPECT_EQ(b1->tokens, g->tokens);
  GenerationParams beam3 = beam1;
  beam3.beam_width = 3;
  auto x = task.Generate(input, beam3);
  auto y = task.Generate(input, beam3);
  ASSERT_TRUE(x.ok() && y.ok());
  EXPECT_EQ(x->tokens, y->tokens);
  EXPECT_GE(x->score, g->score - 1e-9);  // beam search never ranks below greedy's hypothesis
  // An answer may use the room its input leaves (64 + 8 less the input's tokens), no more.
  auto query = task->QueryTokens(input, nullptr);
  ASSERT_TRUE(query.ok());
  const int room = 64 + 8 - static_cast<int>(query->size());
  GenerationParams longest = greedy;
  longest.max_new_tokens = room;
  longest.eos_id.reset();
  auto fits = task.Generate(input, longest);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(static_cast<int>(fits->tokens.size()), room);
  GenerationParams too_long = longest;
  too_long.max_new_tokens = room + 1;
  EXPECT_THAT(std::string(task.Generate(input, too_long).status().message()),
              HasSubstr(absl::StrCat("max_new_tokens ", room + 1, " must be from 1 to the ", room,
                                     " tokens this input leaves for an answer (max_query_tokens "
                                     "64 + max_answer_tokens 8")));
  // Asked for by default: shortened to the room instead.
  too_long.shorten_to_room = true;
  auto shortened = task.Generate(input, too_long);
  ASSERT_TRUE(shortened.ok()) << shortened.status();
  EXPECT_EQ(static_cast<int>(shortened->tokens.size()), room);
}

TEST(IclTaskTest, StopStringsEndGeneration) {
  auto task = PreparedSst2();
  GenerationParams free_run;
  free_run.max_new_tokens = 8;
  auto full = task.Generate({"a delightful film", {}, ""}, free_run);
  ASSERT_TRUE(full.ok());
  ASSERT_GE(full->tokens.size(), 3u);
  // Stop on the text of the first two generated tokens: generation ends right there.
  auto two =
      Gpt2Tokenizer().Decode(std::vector<int32_t>(full->tokens.begin(), full->tokens.begin() + 2));
  ASSERT_TRUE(two.ok());
  GenerationParams stopping = free_run;
  stopping.stop = {*two};
  auto stopped = task.Generate({"a delightful film", {}, ""}, stopping);
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->reason, FinishReason::kStopString);
  EXPECT_LE(stopped->tokens.size(), 2u);
}

TEST(IclTaskTest, BadTasksAndQueriesAreClearErrors) {
  const Transformer& model = GoldenModel("gpt2");
  TaskOptions o = Sst2Options();
  o.input_template = "Sentence: {text\nLabel:";
  auto bad_template = IclTask::Prepare(model, Gpt2Tokenizer(), o, Sst2Demonstrations());
  EXPECT_THAT(std::string(bad_template.status().message()), HasSubstr("no closing '}'"));

  o = Sst2Options();
  o.input_template = "Premise: {premise} Hypothesis: {hypothesis}";
  auto missing = IclTask::Prepare(model, Gpt2Tokenizer(), o, Sst2Demonstrations());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("placeholder {premise}"));

  o = Sst2Options();
  o.group_length = 1000;  // 1000 + 64 + 8 > 1024
  EXPECT_THAT(
      std::string(
          IclTask::Prepare(model, Gpt2Tokenizer(), o, Sst2Demonstrations()).status().message()),
      HasSubstr("context length 1024"));

  o = Sst2Options();
  o.group_length = 0;  // default: 1024 - 64 - 8
  auto defaulted = IclTask::Prepare(model, Gpt2Tokenizer(), o, Sst2Demonstrations());
  ASSERT_TRUE(defaulted.ok());
  EXPECT_EQ((*defaulted)->layout().group_length, 952);

  auto task = PreparedSst2();
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += " word";
  EXPECT_THAT(std::string(task.Classify({{long_text, {}, ""}}).status().message()),
              HasSubstr("max_query_tokens 64"));
  EXPECT_EQ(task.Classify({{"\xff\xfe", {}, ""}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A template that repeats its placeholder is refused per input before anything is rendered or
// tokenized, by the rendered size, for demonstrations and queries alike.
TEST(IclTaskTest, RenderedInputsAreBoundedBeforeRendering) {
  TaskOptions o = Sst2Options();
  o.max_rendered_bytes = 2000;
  o.group_length = 0;  // room for demonstrations rendered twice
  o.input_template = "{text} | Sentence: {text}\nLabel:";
  auto task = PreparedSst2(o);
  EXPECT_TRUE(task.Classify({{"a delightful film", {}, ""}}).ok());
  const std::string input(1200, 'a');  // alone within the limit, twice not
  auto refused = task.Classify({{input, {}, ""}});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("(2 substitutions), more than the limit of 2000 bytes"));
  std::vector<Example> long_demonstrations = Sst2Demonstrations();
  long_demonstrations[2].text = input;
  auto refused_task =
      IclTask::Prepare(GoldenModel("gpt2"), Gpt2Tokenizer(), o, long_demonstrations);
  EXPECT_THAT(std::string(refused_task.status().message()), HasSubstr("more than the limit"));
}

}  // namespace
}  // namespace manyshot::testing

namespace manyshot::testing {
namespace {

TEST(IclTaskCancellationTest, CancelledGenerationStopsBetweenSteps) {
  auto task =
      IclTask::Prepare(GoldenModel("gpt2"), Gpt2Tokenizer(), Sst2Options(), Sst2Demonstrations());
  ASSERT_TRUE(task.ok());
  auto context = (*task)->EncodeContext();
  ASSERT_TRUE(context.ok());
  for (bool beam : {false, true}) {
    int checks = 0;
    GenerationParams params;
    params.beam_search = beam;
    params.max_new_tokens = 8;
    params.cancelled = [&] { return ++checks > 2; };  // the caller goes away after two steps
    auto out = (*task)->Generate(&*context, {"a delightful film", {}, ""}, params);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kCancelled) << (beam ? "beam" : "greedy");
    EXPECT_EQ(checks, 3);
  }
}

}  // namespace
}  // namespace manyshot::testing

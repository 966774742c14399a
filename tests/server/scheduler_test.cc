// The scheduler on a fake served model: classifications of one task share a batch, scoring and
// generation run alone and answer with their own result types, and a request it cannot run is
// answered once with why (queue full, cancelled while queued, shutting down).
#include "server/scheduler.h"

#include <future>
#include <memory>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/registry_fixture.h"

namespace manyshot::testing {
namespace {

class SchedulerTest : public RegistryFixture {
 protected:
  void SetUp() override {
    Open();
    ASSERT_TRUE(Create("task", Spec()).ok());
    auto version = registry_->Resolve("tenant", "task");
    ASSERT_TRUE(version.ok()) << version.status();
    version_ = *version;
  }
  void TearDown() override { scheduler_.reset(); }

  void StartScheduler() {
    scheduler_ = std::make_unique<server::Scheduler>(*registry_, config_, server::SchedulerHooks());
  }

  // The items of `texts`, prepared by the version's task.
  std::vector<QueryWithCandidates> Items(const std::vector<std::string>& texts) {
    std::vector<Example> inputs;
    for (const auto& t : texts) inputs.push_back(Example{t, {}, ""});
    auto items = version_->task->PrepareClassify(inputs, {});
    EXPECT_TRUE(items.ok()) << items.status();
    return *std::move(items);
  }

  std::future<absl::StatusOr<std::vector<ClassifyResult>>> Classify(
      const std::vector<std::string>& texts, server::Scheduler::AbandonFlag abandoned = nullptr) {
    auto promise = std::make_shared<std::promise<absl::StatusOr<std::vector<ClassifyResult>>>>();
    auto future = promise->get_future();
    scheduler_->Classify(version_, Items(texts), 0, {}, std::move(abandoned),
                         [promise](absl::StatusOr<std::vector<ClassifyResult>> results) {
                           promise->set_value(std::move(results));
                         });
    return future;
  }

  std::shared_ptr<const server::TaskVersion> version_;
  std::unique_ptr<server::Scheduler> scheduler_;
};

TEST_F(SchedulerTest, ClassificationsOfOneTaskShareABatchAndEachGetsItsOwnResults) {
  // The worker waits (up to a long window) until a full batch of three inputs is queued.
  config_.max_batch_size = 3;
  config_.batch_window_ms = 60000;
  StartScheduler();
  auto a = Classify({"a"});
  auto bc = Classify({"bb", "ccc"});
  auto a_results = a.get();
  auto bc_results = bc.get();
  ASSERT_TRUE(a_results.ok()) << a_results.status();
  ASSERT_TRUE(bc_results.ok()) << bc_results.status();
  ASSERT_EQ(a_results->size(), 1u);
  ASSERT_EQ(bc_results->size(), 2u);
  EXPECT_EQ((*a_results)[0].input_tokens, 1);
  EXPECT_EQ((*bc_results)[0].input_tokens, 2);
  EXPECT_EQ((*bc_results)[1].input_tokens, 3);
  std::lock_guard<std::mutex> lock(behaviour_->mutex);
  EXPECT_EQ(behaviour_->classify_batches, std::vector<size_t>{3});
}

TEST_F(SchedulerTest, ATurnTakesAtMostTheTokensOfATaskThatRecomputesItsContext) {
  // 100 tokens per input and 250 per turn: the request of five inputs runs as 2 + 2 + 1.
  config_.engine_turn_tokens = 250;
  config_.batch_window_ms = 0;
  StartScheduler();
  auto promise = std::make_shared<std::promise<absl::StatusOr<std::vector<ClassifyResult>>>>();
  auto future = promise->get_future();
  scheduler_->Classify(version_, Items({"1", "22", "333", "4444", "55555"}), 100, {}, nullptr,
                       [promise](absl::StatusOr<std::vector<ClassifyResult>> results) {
                         promise->set_value(std::move(results));
                       });
  auto results = future.get();
  ASSERT_TRUE(results.ok()) << results.status();
  ASSERT_EQ(results->size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ((*results)[i].input_tokens, static_cast<int64_t>(i + 1));
  std::lock_guard<std::mutex> lock(behaviour_->mutex);
  EXPECT_EQ(behaviour_->classify_batches, (std::vector<size_t>{2, 2, 1}));
}

TEST_F(SchedulerTest, ScoringAndGenerationAnswerWithTheirOwnResults) {
  StartScheduler();
  std::promise<absl::StatusOr<std::vector<ChoiceResult>>> scored;
  std::vector<Example> inputs = {Example{"x", {}, ""}};
  auto items = version_->task->PrepareChoices(inputs, {{"one", "two", "three"}}, {});
  ASSERT_TRUE(items.ok()) << items.status();
  scheduler_->Score(version_, *std::move(items), {}, nullptr,
                    [&](absl::StatusOr<std::vector<ChoiceResult>> r) { scored.set_value(r); });
  auto scores = scored.get_future().get();
  ASSERT_TRUE(scores.ok()) << scores.status();
  ASSERT_EQ(scores->size(), 1u);
  EXPECT_EQ((*scores)[0].best, 2);

  std::promise<absl::StatusOr<GenerationOutput>> generated;
  GenerationParams params;
  params.max_new_tokens = 3;
  scheduler_->Generate(version_, Example{"x", {}, ""}, params, {}, nullptr,
                       [&](absl::StatusOr<GenerationOutput> r) { generated.set_value(r); });
  auto output = generated.get_future().get();
  ASSERT_TRUE(output.ok()) << output.status();
  EXPECT_EQ(output->tokens, (std::vector<int32_t>{0, 1, 2}));

  // The engine's error reaches the caller as it was.
  std::promise<absl::StatusOr<GenerationOutput>> refused;
  scheduler_->Generate(version_, Example{"", {}, ""}, params, {}, nullptr,
                       [&](absl::StatusOr<GenerationOutput> r) { refused.set_value(r); });
  auto error = refused.get_future().get();
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(error.status().message(), "input 0: is empty");
}

TEST_F(SchedulerTest, AFullQueueRefusesAtOnceOnTheCallersThread) {
  config_.max_queue_inputs = 2;
  StartScheduler();
  auto refused = Classify({"a", "b", "c"});
  ASSERT_EQ(refused.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(refused.get().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(SchedulerTest, ARequestAbandonedWhileQueuedIsCancelledWithoutComputing) {
  StartScheduler();
  auto abandoned = server::Scheduler::NewAbandonFlag();
  abandoned->store(true);
  auto cancelled = Classify({"a"}, abandoned);
  EXPECT_EQ(cancelled.get().status().code(), absl::StatusCode::kCancelled);
  std::promise<absl::StatusOr<GenerationOutput>> generated;
  GenerationParams params;
  scheduler_->Generate(version_, Example{"x", {}, ""}, params, {}, abandoned,
                       [&](absl::StatusOr<GenerationOutput> r) { generated.set_value(r); });
  EXPECT_EQ(generated.get_future().get().status().code(), absl::StatusCode::kCancelled);
  std::lock_guard<std::mutex> lock(behaviour_->mutex);
  EXPECT_TRUE(behaviour_->classify_batches.empty());
}

TEST_F(SchedulerTest, ADrainingSchedulerRefusesNewWorkAsUnavailable) {
  StartScheduler();
  scheduler_->Drain();
  EXPECT_EQ(Classify({"a"}).get().status().code(), absl::StatusCode::kUnavailable);
  std::promise<absl::StatusOr<std::vector<ChoiceResult>>> scored;
  scheduler_->Score(version_, Items({"a"}), {}, nullptr,
                    [&](absl::StatusOr<std::vector<ChoiceResult>> r) { scored.set_value(r); });
  EXPECT_EQ(scored.get_future().get().status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace manyshot::testing

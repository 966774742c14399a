// TaskRegistry on a fake served model (no weights) and a real cache: the one create path for any
// model kind (a task with a cached context, one that keeps bytes in memory instead), the checks
// a create makes before its task is visible, and a restart rebuilding tasks through the model.
#include "server/task_registry.h"

#include "gtest/gtest.h"
#include "server/grpc_status.h"
#include "tests/server/registry_fixture.h"

namespace manyshot::testing {
namespace {

using TaskRegistryTest = RegistryFixture;

TEST_F(TaskRegistryTest, ATaskWithACachedContextIsEncodedOnceAndReportedFromItsFigures) {
  Open();
  auto created = Create("sst2", Spec());
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(created->created);
  EXPECT_FALSE(created->replaced);
  const v1::Task& task = created->task;
  EXPECT_EQ(task.state(), v1::TASK_STATE_READY);
  EXPECT_EQ(task.stats().demonstrations(), 3u);
  // One layer, 4 tokens, 1 head of 4 f32s, K and V.
  EXPECT_EQ(task.stats().cache_bytes(), 2u * 4 * 4 * sizeof(float));
  ASSERT_EQ(task.stats().tiers_size(), 2);  // memory and disk
  EXPECT_EQ(behaviour_->encoded.load(), 1);

  // The same content again is the same task: nothing prepared or encoded.
  auto again = Create("sst2", Spec());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created);
  EXPECT_EQ(behaviour_->prepared.load(), 1);
  EXPECT_EQ(behaviour_->encoded.load(), 1);

  // Other content needs replace.
  EXPECT_EQ(Create("sst2", Spec(), 3, "other").status().code(), absl::StatusCode::kAlreadyExists);
  auto replaced = Create("sst2", Spec(), 3, "other", /*replace=*/true);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_TRUE(replaced->replaced);

  auto freed = registry_->Delete("tenant", "sst2");
  ASSERT_TRUE(freed.ok()) << freed.status();
  EXPECT_EQ(registry_->Get("tenant", "sst2").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TaskRegistryTest, AModeTheModelLacksIsRefusedBeforeTheTaskIsVisible) {
  Open();
  auto refused = Create("saicl", Spec(v1::MODE_SAICL));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("spec.mode SAICL"), std::string::npos)
      << refused.status();
  EXPECT_EQ(registry_->Get("tenant", "saicl").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(behaviour_->prepared.load(), 0);
}

TEST_F(TaskRegistryTest, HeldBytesCountAgainstTheMemoryBudgetAndARefusalNamesThem) {
  behaviour_->cached_context = false;
  behaviour_->held_bytes = 600;
  Open(/*memory_budget_bytes=*/1000);
  auto first = Create("a", Spec(v1::MODE_CONVENTIONAL));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(cache_->memory().stats().reserved_bytes, 600u);
  EXPECT_EQ(first->task.stats().cache_bytes(), 0u);
  EXPECT_EQ(first->task.stats().tiers_size(), 0);

  auto second = Create("b", Spec(v1::MODE_CONVENTIONAL));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(second.status().message().find("the fake task's held bytes"), std::string::npos)
      << second.status();
  EXPECT_NE(second.status().message().find("--memory_budget_bytes"), std::string::npos);
  // A create that failed for want of room leaves the task FAILED with the reason.
  auto shown = registry_->Get("tenant", "b");
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(shown->state(), v1::TASK_STATE_FAILED);
  EXPECT_EQ(cache_->memory().stats().reserved_bytes, 600u);

  ASSERT_TRUE(registry_->Delete("tenant", "a").ok());
  EXPECT_EQ(cache_->memory().stats().reserved_bytes, 0u);
}

TEST_F(TaskRegistryTest, ATaskWithoutACachedContextIsRebuiltThroughTheModelAfterARestart) {
  behaviour_->cached_context = false;
  behaviour_->held_bytes = 100;
  Open();
  ASSERT_TRUE(Create("conv", Spec(v1::MODE_CONVENTIONAL)).ok());
  EXPECT_EQ(behaviour_->prepared.load(), 1);
  EXPECT_EQ(behaviour_->encoded.load(), 0);

  Open();  // a restart over the same cache
  EXPECT_EQ(cache_->memory().stats().reserved_bytes, 0u);
  auto version = registry_->Resolve("tenant", "conv");
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ((*version)->record.kv_key.rfind("fake-no-kv:fake-fingerprint:tenant:", 0), 0u)
      << (*version)->record.kv_key;
  auto handle = registry_->Acquire(*version);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(handle->get(), nullptr);
  EXPECT_EQ(behaviour_->prepared.load(), 2);
  EXPECT_EQ(behaviour_->encoded.load(), 0);
  EXPECT_EQ(cache_->memory().stats().reserved_bytes, 100u);
}

TEST_F(TaskRegistryTest, ATaskRecomputingMoreContextPerInputThanTheLimitIsRefused) {
  behaviour_->cached_context = false;
  behaviour_->recomputed_tokens = 500;
  config_.max_query_context_tokens = 400;
  Open();
  auto refused = Create("big", Spec(v1::MODE_CONVENTIONAL));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("--max_query_context_tokens 400"), std::string::npos)
      << refused.status();
  // A bad request leaves nothing behind.
  EXPECT_EQ(registry_->Get("tenant", "big").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TaskRegistryTest, ContextsOfARestartedRegistryComeFromTheCacheWithoutEncoding) {
  Open();
  ASSERT_TRUE(Create("sst2", Spec()).ok());
  Open();
  auto version = registry_->Resolve("tenant", "sst2");
  ASSERT_TRUE(version.ok()) << version.status();
  auto handle = registry_->Acquire(*version);
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_NE(handle->get(), nullptr);
  EXPECT_EQ(handle->get()->tokens, 4);
  EXPECT_EQ(behaviour_->encoded.load(), 1);  // the create's only
}

}  // namespace
}  // namespace manyshot::testing

// PreparationPool: a tenant flooding many tasks delays another tenant's request by about one of
// its requests, not by its backlog; the queue bound and draining refuse work with the right codes.
// The pool's one thread is held by a gate while the work is queued, so the order is deterministic.
#include "server/preparation_pool.h"

#include <future>
#include <mutex>
#include <vector>

#include "gtest/gtest.h"

namespace manyshot::server {
namespace {

// Work that records its name in the order it ran.
struct Recorder {
  std::mutex mutex;
  std::vector<std::string> ran;
  std::function<void()> Work(std::string name) {
    return [this, name = std::move(name)] {
      std::lock_guard<std::mutex> lock(mutex);
      ran.push_back(name);
    };
  }
};

TEST(PreparationPoolTest, AnotherTenantIsServedAfterOneFloodRequestNotTheBacklog) {
  PreparationPool pool(/*threads=*/1, /*max_queued_inputs=*/100000);
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  ASSERT_TRUE(pool.Submit("gate", "gate", 1, [gate] { gate.wait(); }).ok());
  Recorder recorder;
  for (int task = 0; task < 24; ++task) {
    for (int r = 0; r < 3; ++r) {
      const std::string name = "a/" + std::to_string(task) + "/" + std::to_string(r);
      ASSERT_TRUE(pool.Submit("a", "a" + std::to_string(task), 32, recorder.Work(name)).ok());
    }
  }
  ASSERT_TRUE(pool.Submit("b", "quiet", 1, recorder.Work("b")).ok());
  open.set_value();
  ASSERT_TRUE(pool.WaitIdle(std::chrono::steady_clock::now() + std::chrono::minutes(5)));
  ASSERT_EQ(recorder.ran.size(), 24u * 3 + 1);
  EXPECT_EQ(recorder.ran[0], "a/0/0");
  EXPECT_EQ(recorder.ran[1], "b");
  // A's tasks take turns too: every task's first request before any task's second.
  for (int task = 0; task < 24; ++task) {
    EXPECT_EQ(recorder.ran[task == 0 ? 0 : task + 1], "a/" + std::to_string(task) + "/0");
  }
}

TEST(PreparationPoolTest, AFullQueueIsResourceExhaustedAndDrainingIsUnavailable) {
  PreparationPool pool(/*threads=*/1, /*max_queued_inputs=*/10);
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  std::promise<void> started;
  ASSERT_TRUE(pool.Submit("t", "k", 1,
                          [gate, &started] {
                            started.set_value();
                            gate.wait();
                          })
                  .ok());
  started.get_future().wait();  // running, so no longer queued
  Recorder recorder;
  ASSERT_TRUE(pool.Submit("t", "k", 10, recorder.Work("fits")).ok());
  absl::Status full = pool.Submit("t", "k", 1, recorder.Work("too many"));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(full.message().find("--max_queue_inputs 10"), std::string::npos) << full;
  pool.Drain();
  absl::Status draining = pool.Submit("u", "k", 1, recorder.Work("late"));
  EXPECT_EQ(draining.code(), absl::StatusCode::kUnavailable) << draining;
  EXPECT_FALSE(pool.WaitIdle(std::chrono::steady_clock::now()));  // the gate still holds it
  open.set_value();
  ASSERT_TRUE(pool.WaitIdle(std::chrono::steady_clock::now() + std::chrono::minutes(5)));
  EXPECT_EQ(recorder.ran, std::vector<std::string>{"fits"});  // queued work ran despite Drain
}

TEST(PreparationPoolTest, TheDestructorRunsWhatIsQueued) {
  Recorder recorder;
  {
    PreparationPool pool(/*threads=*/2, /*max_queued_inputs=*/100);
    for (int i = 0; i < 20; ++i) {
      ASSERT_TRUE(pool.Submit("t" + std::to_string(i % 3), "k", 1, recorder.Work("w")).ok());
    }
  }
  EXPECT_EQ(recorder.ran.size(), 20u);
}

}  // namespace
}  // namespace manyshot::server

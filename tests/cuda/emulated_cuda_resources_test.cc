// What the CUDA backend holds per host thread (cuda_backend_impl.h), on the emulator: a thread's
// stream, cuBLASLt handle and workspace go back to the device context when the thread ends and
// serve the next thread, and the per-thread GEMM plan cache stays bounded.
#include <pthread.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "cuda_runtime.h"
#include "engine/core/backend.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {
namespace {

using cuda_internal::DeviceContext;
using cuda_internal::ThreadState;

constexpr int64_t kIn = 8;
constexpr int64_t kOut = 8;

class EmulatedCudaResourcesTest : public testing::Test {
 protected:
  void SetUp() override {
    context_ = std::make_shared<DeviceContext>(0);
    backend_ = std::make_unique<CudaBackend>(context_, "SIMT emulator");
    weight_ = Upload(kOut, kIn, 0.25f);
  }

  Tensor Upload(int64_t rows, int64_t cols, float scale) {
    absl::StatusOr<Tensor> t = backend_->Allocate(DType::kF32, {rows, cols});
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<float> host(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < host.size(); ++i) host[i] = scale * static_cast<float>(i % 7) - 0.5f;
    backend_->CopyFromHost(host.data(), *t);
    return *t;
  }

  // y = x W^T for a [rows, kIn] x, on the calling thread; the result copied back.
  std::vector<float> LinearOnThisThread(int64_t rows) {
    Tensor x = Upload(rows, kIn, 0.5f);
    absl::StatusOr<Tensor> y = backend_->Allocate(DType::kF32, {rows, kOut});
    EXPECT_TRUE(y.ok()) << y.status();
    backend_->Linear(x, weight_, WeightLayout::kOutIn, Tensor(), *y);
    std::vector<float> out(static_cast<size_t>(rows * kOut));
    absl::Status s = backend_->CopyToHost(*y, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  size_t FreeDeviceBytes() {
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    return free_bytes;
  }

  std::shared_ptr<DeviceContext> context_;
  std::unique_ptr<CudaBackend> backend_;
  Tensor weight_;
};

// Runs `body` on a new thread with a stack of `stack_bytes` and waits for it. Threads of a larger
// stack than any before cannot reuse an ended thread's cached stack, so they get new thread ids:
// what a state keyed by std::thread::id would leak with.
void RunOnThread(size_t stack_bytes, const std::function<void()>& body) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stack_bytes), 0);
  pthread_t thread;
  auto* task = new std::function<void()>(body);
  ASSERT_EQ(
      pthread_create(
          &thread, &attr,
          [](void* arg) -> void* {
            std::unique_ptr<std::function<void()>> f(static_cast<std::function<void()>*>(arg));
            (*f)();
            return nullptr;
          },
          task),
      0);
  pthread_attr_destroy(&attr);
  ASSERT_EQ(pthread_join(thread, nullptr), 0);
}

TEST_F(EmulatedCudaResourcesTest, ThreadsThatEndGiveTheirStreamAndWorkspaceToTheNextThreads) {
  const std::vector<float> expected = LinearOnThisThread(3);  // this thread's state
  ASSERT_EQ(context_->thread_states(), 1u);
  size_t free_after_first_wave = 0;
  // Ten waves of three overlapping threads, each wave's with a larger stack than the last.
  for (int wave = 0; wave < 10; ++wave) {
    std::atomic<int> arrived{0};
    std::vector<std::thread> launchers;
    for (int t = 0; t < 3; ++t) {
      launchers.emplace_back([&, wave] {
        RunOnThread(size_t{1} << 20 | static_cast<size_t>(wave) << 16, [&] {
          EXPECT_EQ(LinearOnThisThread(3), expected);
          // All three hold a state at once before any ends.
          arrived.fetch_add(1);
          while (arrived.load() < 3) std::this_thread::yield();
        });
      });
    }
    for (std::thread& t : launchers) t.join();
    if (wave == 0) free_after_first_wave = FreeDeviceBytes();
  }
  // This thread's state, three for the three threads at a time: no more, however many came.
  EXPECT_EQ(context_->thread_states(), 4u);
  // No cuBLASLt workspace (32 MiB each) or anything else accumulated after the first wave.
  EXPECT_EQ(FreeDeviceBytes(), free_after_first_wave);
  // The launchers (std::threads that never called the backend) leased nothing.
}

// A tensor held by a thread_local made before the thread's first backend call is freed after the
// thread gave its state back (thread_locals end in reverse order of construction), as statics
// are at process exit: the free still happens, without the state.
TEST_F(EmulatedCudaResourcesTest, ATensorFreedAfterTheThreadGaveItsStateBackIsStillFreed) {
  const size_t free_before = FreeDeviceBytes();
  std::thread([&] {
    thread_local std::optional<Tensor> held;
    held.emplace();
    absl::StatusOr<Tensor> t = backend_->Allocate(DType::kF32, {1024});
    ASSERT_TRUE(t.ok()) << t.status();
    *held = *std::move(t);
    EXPECT_LT(FreeDeviceBytes(), free_before);
  }).join();
  EXPECT_EQ(FreeDeviceBytes(), free_before);
  EXPECT_EQ(context_->thread_states(), 2u);  // this thread's (SetUp's uploads) and that thread's
}

TEST_F(EmulatedCudaResourcesTest, TheGemmPlanCacheKeepsTheMostRecentlyUsedPlans) {
  const std::vector<float> one_row = LinearOnThisThread(1);
  absl::StatusOr<ThreadState*> state = context_->State();
  ASSERT_TRUE(state.ok()) << state.status();
  // One plan per row count (the x and y copies use none).
  for (int64_t rows = 2; rows <= static_cast<int64_t>(ThreadState::kMaxPlans) + 20; ++rows) {
    LinearOnThisThread(rows);
    if (rows == 10) {
      EXPECT_EQ((*state)->plan_count(), 10u);
    }
  }
  EXPECT_EQ((*state)->plan_count(), ThreadState::kMaxPlans);
  // The 1-row plan was evicted long ago: planned again, same result.
  EXPECT_EQ(LinearOnThisThread(1), one_row);
  EXPECT_EQ((*state)->plan_count(), ThreadState::kMaxPlans);
}

}  // namespace
}  // namespace manyshot

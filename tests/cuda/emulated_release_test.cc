// Releasing device memory while another stream may still use it, on the deferred-stream emulator
// (work runs only when its stream is waited for; freed memory stays inaccessible for a while, so
// a use after free crashes). The CUDA backend frees a tensor on the stream of the thread that
// drops its last reference, which does not wait for other threads' streams; it is safe because
// no thread leaves work in flight when it returns, including when an allocation fails in the
// middle of a sequence of ops (an out-of-memory in the middle of a batch).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "cuda_runtime.h"
#include "engine/core/backend.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {
namespace {

using cuda_internal::DeviceContext;

constexpr int64_t kRows = 4;
constexpr int64_t kIn = 8;
constexpr int64_t kOut = 8;

class EmulatedReleaseTest : public testing::Test {
 protected:
  void SetUp() override {
    simt::SetDeferredStreams(true);
    context_ = std::make_shared<DeviceContext>(0);
    backend_ = std::make_unique<CudaBackend>(context_, "SIMT emulator");
  }
  void TearDown() override {
    backend_.reset();
    context_.reset();
    simt::SetDeferredStreams(false);
  }

  // A [rows, cols] f32 tensor of known values, complete on the device (CopyFromHost waits).
  Tensor Upload(int64_t rows, int64_t cols, std::vector<float>& host) {
    absl::StatusOr<Tensor> t = backend_->Allocate(DType::kF32, {rows, cols});
    EXPECT_TRUE(t.ok()) << t.status();
    host.resize(static_cast<size_t>(rows * cols));
    for (size_t i = 0; i < host.size(); ++i) host[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    backend_->CopyFromHost(host.data(), *t);
    return *t;
  }

  std::shared_ptr<DeviceContext> context_;
  std::unique_ptr<CudaBackend> backend_;
};

// y = x W^T computed on the host.
std::vector<float> HostLinear(const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<float> y(static_cast<size_t>(kRows * kOut), 0.0f);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t o = 0; o < kOut; ++o) {
      float sum = 0.0f;
      for (int64_t i = 0; i < kIn; ++i) sum += x[r * kIn + i] * w[o * kIn + i];
      y[r * kOut + o] = sum;
    }
  }
  return y;
}

// This thread queues an op that reads `x`, then an allocation fails and it gives up, keeping only
// the op's output; another thread drops the last reference to `x` and waits for its own stream,
// which runs the free. Had the failed allocation left the op queued, it would run at this
// thread's next wait and read freed memory (the emulator crashes the test).
TEST_F(EmulatedReleaseTest, AnAllocationFailingMidSequenceLeavesNoWorkReadingReleasedTensors) {
  std::vector<float> x_host, w_host;
  Tensor x = Upload(kRows, kIn, x_host);
  Tensor w = Upload(kOut, kIn, w_host);
  absl::StatusOr<Tensor> y = backend_->Allocate(DType::kF32, {kRows, kOut});
  ASSERT_TRUE(y.ok()) << y.status();
  backend_->Linear(x, w, WeightLayout::kOutIn, Tensor(), *y);
  simt::InjectOutOfMemoryAtNextAllocation();
  absl::StatusOr<Tensor> scratch = backend_->Allocate(DType::kF32, {kRows, kOut});
  ASSERT_EQ(scratch.status().code(), absl::StatusCode::kResourceExhausted) << scratch.status();

  std::thread([&, last = std::move(x)]() mutable {
    last = Tensor();  // the last reference: freed on this thread's stream
    absl::Status s = backend_->Synchronize();
    EXPECT_TRUE(s.ok()) << s;
  }).join();

  std::vector<float> out(static_cast<size_t>(kRows * kOut));
  absl::Status s = backend_->CopyToHost(*y, out.data());
  ASSERT_TRUE(s.ok()) << s;
  const std::vector<float> expected = HostLinear(x_host, w_host);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], expected[i], 1e-5f) << i;
  // The failed allocation did not stop this thread: it goes on with the next request.
  absl::StatusOr<Tensor> next = backend_->Allocate(DType::kF32, {kRows, kOut});
  EXPECT_TRUE(next.ok()) << next.status();
}

// Work on one stream that reads memory freed on another stream and already released.
void ReadAfterAFreeOnAnotherStream() {
  simt::SetDeferredStreams(true);
  cudaStream_t reader = nullptr;
  cudaStream_t freer = nullptr;
  (void)cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking);
  (void)cudaStreamCreateWithFlags(&freer, cudaStreamNonBlocking);
  void* produced = nullptr;
  void* consumed = nullptr;
  (void)cudaMalloc(&produced, 16);
  (void)cudaMalloc(&consumed, 16);
  (void)cudaMemcpyAsync(consumed, produced, 16, cudaMemcpyDeviceToDevice, reader);
  (void)cudaFreeAsync(produced, freer);
  (void)cudaStreamSynchronize(freer);   // the free runs
  (void)cudaStreamSynchronize(reader);  // the copy reads freed memory
}

// What the test above guards against, at the runtime level: the emulator crashes on it.
TEST(EmulatedReleaseDeathTest, WorkReadingMemoryFreedOnAnotherStreamCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(ReadAfterAFreeOnAnotherStream(), "");
}

}  // namespace
}  // namespace manyshot

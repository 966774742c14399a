// Stream capture and graph replay on the emulator (testing/simt/include/cuda_runtime.h): a
// sequence of the CUDA backend's ops captured on its thread's stream replays with the same bits
// as the same ops run eagerly, as one host-side launch instead of one per kernel (counted by the
// emulator, not timed), and what a capture cannot hold is refused as a GPU refuses it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_runtime.h"
#include "engine/core/backend.h"
#include "engine/cuda/cuda_backend_impl.h"

namespace manyshot {
namespace {

constexpr int64_t kRows = 4;
constexpr int64_t kWidth = 64;

class EmulatedGraphTest : public testing::Test {
 protected:
  void SetUp() override {
    context_ = std::make_shared<cuda_internal::DeviceContext>(0);
    backend_ = std::make_unique<CudaBackend>(context_, "SIMT emulator");
    x_ = Upload({kRows, kWidth}, 0.37f);
    norm_weight_ = Upload({kWidth}, 0.11f);
    weight_ = Upload({kWidth, kWidth}, 0.05f);
    normed_ = *backend_->Allocate(DType::kF32, {kRows, kWidth});
    y_ = *backend_->Allocate(DType::kF32, {kRows, kWidth});
    ASSERT_TRUE(backend_->Synchronize().ok());
  }

  Tensor Upload(std::vector<int64_t> shape, float scale) {
    absl::StatusOr<Tensor> t = backend_->Allocate(DType::kF32, shape);
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<float> host(static_cast<size_t>(t->numel()));
    for (size_t i = 0; i < host.size(); ++i) {
      host[i] = scale * static_cast<float>(static_cast<int>(i * 7919 % 23) - 11);
    }
    backend_->CopyFromHost(host.data(), *t);
    return *t;
  }

  // A decoder block's shape of work: norm, projection, activation, residual.
  void Block() {
    backend_->RmsNorm(x_, norm_weight_, 1e-5f, normed_);
    backend_->Linear(normed_, weight_, WeightLayout::kOutIn, Tensor(), y_);
    backend_->GeluTanh(y_);
    backend_->Add(y_, x_);
  }

  std::vector<uint32_t> Bits(const Tensor& t) {
    std::vector<uint32_t> bits(static_cast<size_t>(t.numel()));
    absl::Status s = backend_->CopyToHost(t, bits.data());
    EXPECT_TRUE(s.ok()) << s;
    return bits;
  }

  cudaStream_t Stream() {
    absl::StatusOr<cuda_internal::ThreadState*> state = context_->State();
    EXPECT_TRUE(state.ok()) << state.status();
    return state.ok() ? (*state)->stream : nullptr;
  }

  std::shared_ptr<cuda_internal::DeviceContext> context_;
  std::unique_ptr<CudaBackend> backend_;
  Tensor x_, norm_weight_, weight_, normed_, y_;
};

TEST_F(EmulatedGraphTest, AReplayedCaptureGivesTheEagerBitsInOneLaunch) {
  const uint64_t eager_start = simt::HostLaunches();
  Block();
  ASSERT_TRUE(backend_->Synchronize().ok());
  const uint64_t eager_launches = simt::HostLaunches() - eager_start;
  const std::vector<uint32_t> eager = Bits(y_);

  cudaStream_t stream = Stream();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  const uint64_t capture_start = simt::HostLaunches();
  Block();  // recorded, not run
  EXPECT_EQ(simt::HostLaunches(), capture_start);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(Bits(y_), eager) << "the capture ran its work";  // y_ still holds the eager result

  backend_->Copy(x_, y_);  // scribble over the output: the replay must write all of it
  ASSERT_TRUE(backend_->Synchronize().ok());
  ASSERT_NE(Bits(y_), eager);
  const uint64_t replay_start = simt::HostLaunches();
  ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
  ASSERT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(simt::HostLaunches() - replay_start, 1u);
  EXPECT_GE(eager_launches, 4u);  // norm, GEMM, activation, add
  EXPECT_EQ(Bits(y_), eager);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

TEST_F(EmulatedGraphTest, WhatACaptureCannotHoldIsRefusedAndInvalidatesIt) {
  cudaStream_t stream = Stream();
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureImplicit);
  (void)cudaGetLastError();
  void* outside = nullptr;
  ASSERT_EQ(cudaMallocAsync(&outside, 64, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(outside, stream), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(graph, nullptr);
  (void)cudaGetLastError();
  // The stream works as before.
  EXPECT_EQ(cudaFreeAsync(outside, stream), cudaSuccess);
  Block();
  EXPECT_TRUE(backend_->Synchronize().ok());
}

TEST_F(EmulatedGraphTest, AnAllocationInTheCaptureIsTheGraphsOwnMemory) {
  // Attention's temporaries (split-K partials, a context state) are allocated and freed inside
  // a captured forward pass: on a GPU these are graph allocation nodes, reused by every launch.
  cudaStream_t stream = Stream();
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  void* scratch = nullptr;
  ASSERT_EQ(cudaMallocAsync(&scratch, kRows * kWidth * sizeof(float), stream), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(scratch, x_.raw(), x_.bytes(), cudaMemcpyDeviceToDevice, stream),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(y_.raw(), scratch, y_.bytes(), cudaMemcpyDeviceToDevice, stream),
            cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(scratch, stream), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);  // the instance keeps the memory
  for (int launch = 0; launch < 2; ++launch) {
    backend_->Copy(normed_, y_);
    ASSERT_TRUE(backend_->Synchronize().ok());
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    EXPECT_EQ(Bits(y_), Bits(x_)) << "launch " << launch;
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);

  // One the capture does not free again is refused (a GPU would hand it to the caller).
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&scratch, 64, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
  EXPECT_TRUE(backend_->Synchronize().ok());
}

}  // namespace
}  // namespace manyshot

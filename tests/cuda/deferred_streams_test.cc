// The emulated runtime's deferred streams (simt::DeferredStreams, include/cuda_runtime.h): work on
// a stream runs only when the host waits for it, so code that does not wait sees stale data, as it
// may on a GPU. (The backend-level suites run this way in CI: tests/CMakeLists.txt.)
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_runtime.h"
#include "engine/cuda/ptx_instructions.cuh"
#include "gtest/gtest.h"

namespace {

class DeferredStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override { simt::SetDeferredStreams(true); }
  void TearDown() override { simt::SetDeferredStreams(false); }

  // 16 bytes of device memory (emulated device memory is host-readable, which lets the test look
  // at it without a copy that would itself wait).
  static unsigned char* DeviceBytes() {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 16), cudaSuccess);
    return static_cast<unsigned char*>(p);
  }
};

TEST_F(DeferredStreamsTest, WorkRunsWhenItsStreamIsWaitedFor) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* d = DeviceBytes();
  ASSERT_EQ(cudaMemsetAsync(d, 0, 16, s), cudaSuccess);
  EXPECT_EQ(d[0], 0xff);  // device memory starts as 0xff bytes; the memset has not run
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(d[0], 0);
  ASSERT_EQ(cudaMemsetAsync(d, 7, 16, s), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // waits for every stream
  EXPECT_EQ(d[15], 7);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// As the runtime specifies: a copy from pageable memory takes the bytes at the call; from pinned
// memory the DMA reads them when it runs, so a pinned buffer must not be reused before a wait.
TEST_F(DeferredStreamsTest, APageableSourceIsReadAtTheCallAPinnedOneWhenTheCopyRuns) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* from_pageable = DeviceBytes();
  unsigned char* from_pinned = DeviceBytes();
  std::vector<unsigned char> pageable(16, 1);
  void* pinned_raw = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned_raw, 16, cudaHostAllocPortable), cudaSuccess);
  auto* pinned = static_cast<unsigned char*>(pinned_raw);
  std::memset(pinned, 3, 16);
  ASSERT_EQ(cudaMemcpyAsync(from_pageable, pageable.data(), 16, cudaMemcpyHostToDevice, s),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(from_pinned, pinned, 16, cudaMemcpyHostToDevice, s), cudaSuccess);
  std::memset(pageable.data(), 2, 16);
  std::memset(pinned, 4, 16);  // the bug this mode exists to show: reuse before the wait
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(from_pageable[0], 1);
  EXPECT_EQ(from_pinned[0], 4);
  // Device to host lands at the wait too.
  std::vector<unsigned char> back(16, 0);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), from_pinned, 16, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(back[0], 0);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(back[0], 4);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(from_pageable), cudaSuccess);
  EXPECT_EQ(cudaFree(from_pinned), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

// Streams do not wait for each other; a stream-ordered free runs after the work queued before it.
TEST_F(DeferredStreamsTest, StreamsAreIndependentAndFreesRunInStreamOrder) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* produced = DeviceBytes();
  unsigned char* consumed = DeviceBytes();
  ASSERT_EQ(cudaMemsetAsync(produced, 5, 16, a), cudaSuccess);
  // b reads before a ran: a consumer on another stream must wait for the producer first.
  ASSERT_EQ(cudaMemcpyAsync(consumed, produced, 16, cudaMemcpyDeviceToDevice, b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(consumed[0], 0xff);
  size_t free_before = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_before, &total), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(produced, a), cudaSuccess);
  size_t free_queued = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_queued, &total), cudaSuccess);
  EXPECT_EQ(free_queued, free_before);  // not yet: the memset before it has not run
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  size_t free_after = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_after, &total), cudaSuccess);
  EXPECT_GT(free_after, free_before);
  EXPECT_EQ(cudaFree(consumed), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

// A kernel that faults is launched without error and reported by the next wait on its stream;
// the device is then dead, as a CUDA context is after a fault: every later call returns the
// same error, work queued after the fault never runs, until a new process (ResetDevice).
TEST_F(DeferredStreamsTest, AKernelsFaultIsReportedByTheNextWaitAndStaysSticky) {
  struct P {
    int x;
  };
  static void (*faulting)(P) = [](P) {
    auto* smem = reinterpret_cast<uint16_t*>(simt::DynamicSmem());
    uint32_t r[4];
    manyshot::cuda::LdMatrixX4(r, smem + 1 + threadIdx.x * 8);  // misaligned
  };
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* after = DeviceBytes();
  P arg{1};
  void* args[] = {&arg};
  ASSERT_EQ(cudaLaunchKernel(faulting, dim3(1), dim3(32), args, 1024, s), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(after, 0, 16, s), cudaSuccess);  // queued behind the fault
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_NE(simt::LastLaunchError().find("ldmatrix"), std::string::npos) << simt::LastLaunchError();
  EXPECT_EQ(after[0], 0xff) << "work queued after a fault ran";
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure) << "cudaGetLastError cleared a fault";
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  void* more = nullptr;
  EXPECT_EQ(cudaMallocAsync(&more, 16, s), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaMemsetAsync(after, 0, 16, s), cudaErrorLaunchFailure);
  simt::ResetDevice();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(after), cudaSuccess);
}

// An injected fault (InjectFaultAtNextLaunch, or SIMT_FAULT_FILE for a whole process) is an
// illegal address, sticky like any other: the backend's and the server's fault handling is
// tested with it.
TEST_F(DeferredStreamsTest, AnInjectedFaultIsAnIllegalAddressAndSticky) {
  struct P {
    int* out;
  };
  static void (*store)(P) = [](P p) { p.out[threadIdx.x] = 1; };
  cudaStream_t s = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  unsigned char* out = DeviceBytes();
  P arg{reinterpret_cast<int*>(out)};
  void* args[] = {&arg};
  simt::InjectFaultAtNextLaunch();
  ASSERT_EQ(cudaLaunchKernel(store, dim3(1), dim3(4), args, 0, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
  EXPECT_EQ(out[0], 0xff) << "the faulting kernel ran";
  EXPECT_EQ(cudaLaunchKernel(store, dim3(1), dim3(4), args, 0, s), cudaErrorIllegalAddress);
  EXPECT_EQ(simt::StickyError(), cudaErrorIllegalAddress);
  simt::ResetDevice();
  ASSERT_EQ(cudaLaunchKernel(store, dim3(1), dim3(4), args, 0, s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}

}  // namespace

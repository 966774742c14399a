// The CUDA backend on a device that faults (device_fault.h), on the emulator: the op that hits
// the fault fails INTERNAL naming it, the fault is recorded for the server (CudaDeviceFault), and
// every later op fails too, as on a GPU whose context an illegal address killed.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "engine/core/backend.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/device_fault.h"
#include "engine/cuda/memory_pool.h"

namespace manyshot {
namespace {

class EmulatedDeviceFaultTest : public testing::Test {
 protected:
  void SetUp() override {
    backend_ = std::make_unique<CudaBackend>(std::make_shared<cuda_internal::DeviceContext>(0),
                                             "SIMT emulator");
  }
  void TearDown() override {
    simt::ResetDevice();  // the new process a real fault needs
    cuda_internal::ForgetDeviceFaultForTests();
  }

  Tensor Filled(float value) {
    absl::StatusOr<Tensor> t = backend_->Allocate(DType::kF32, {4, 8});
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<float> host(32, value);
    backend_->CopyFromHost(host.data(), *t);
    EXPECT_TRUE(backend_->Synchronize().ok());
    return *t;
  }

  std::unique_ptr<CudaBackend> backend_;
};

TEST_F(EmulatedDeviceFaultTest, AFaultFailsTheOpIsRecordedAndEveryLaterOpFails) {
  Tensor x = Filled(1.0f), y = Filled(2.0f);
  backend_->Add(x, y);
  ASSERT_TRUE(backend_->Synchronize().ok());
  ASSERT_TRUE(CudaDeviceFault().ok());

  simt::InjectFaultAtNextLaunch();
  backend_->Add(x, y);
  const absl::Status failed = backend_->Synchronize();
  EXPECT_EQ(failed.code(), absl::StatusCode::kInternal) << failed;
  EXPECT_NE(failed.message().find("an illegal memory access was encountered"), std::string::npos)
      << failed;
  EXPECT_NE(failed.message().find("device fault"), std::string::npos) << failed;

  const absl::Status fault = CudaDeviceFault();
  EXPECT_EQ(fault.code(), absl::StatusCode::kInternal);
  EXPECT_NE(fault.message().find("Add: an illegal memory access"), std::string::npos) << fault;

  // The context is dead: no later op succeeds, and the first fault stays the one reported.
  std::vector<float> out(32);
  EXPECT_FALSE(backend_->CopyToHost(x, out.data()).ok());
  EXPECT_FALSE(backend_->Allocate(DType::kF32, {4}).ok());
  EXPECT_EQ(CudaDeviceFault(), fault);
}

// The pool's release threshold is an operator's choice (--gpu_pool_release_threshold_bytes).
TEST(EmulatedMemoryPoolTest, TheReleaseThresholdIsSetOnTheDevicesPool) {
  ASSERT_TRUE(SetCudaPoolReleaseThreshold(0, 1 << 20).ok());
  EXPECT_EQ(simt::PoolReleaseThreshold(), uint64_t{1} << 20);
  EXPECT_FALSE(SetCudaPoolReleaseThreshold(1, 0).ok());  // the emulator has device 0 only
  ASSERT_TRUE(SetCudaPoolReleaseThreshold(0, UINT64_MAX).ok());
  EXPECT_EQ(simt::PoolReleaseThreshold(), UINT64_MAX);
}

}  // namespace
}  // namespace manyshot

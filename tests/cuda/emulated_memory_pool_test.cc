// The device's memory pool on the emulator (engine/cuda/memory_pool.h): freed bytes stay in the
// pool while the release threshold allows, a synchronization gives back what is above it, and
// Backend::TrimMemory gives back every freed byte whatever the threshold. Measured with the
// pool's own counters (cudaMemPoolAttrReservedMemCurrent / UsedMemCurrent).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>

#include "cuda_runtime.h"
#include "engine/core/backend.h"
#include "engine/cuda/cuda_backend_impl.h"
#include "engine/cuda/memory_pool.h"

namespace manyshot {
namespace {

constexpr int64_t kFloats = int64_t{1} << 18;  // 1 MiB of f32
constexpr uint64_t kBytes = uint64_t{1} << 20;

class EmulatedPoolTrimTest : public testing::Test {
 protected:
  void SetUp() override {
    backend_ = std::make_unique<CudaBackend>(std::make_shared<cuda_internal::DeviceContext>(0),
                                             "SIMT emulator");
    ASSERT_TRUE(SetCudaPoolReleaseThreshold(0, UINT64_MAX).ok());  // CreateCudaBackend's choice
    ASSERT_TRUE(backend_->TrimMemory().ok());                      // start with nothing kept
  }
  void TearDown() override { ASSERT_TRUE(SetCudaPoolReleaseThreshold(0, UINT64_MAX).ok()); }

  static uint64_t Reserved() {
    absl::StatusOr<uint64_t> bytes = CudaPoolReservedBytes(0);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.value_or(0);
  }
  static uint64_t Used() {
    cudaMemPool_t pool = nullptr;
    EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    uint64_t used = 0;
    EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used), cudaSuccess);
    return used;
  }
  // Allocates and frees 1 MiB on this thread's stream, then waits for the stream.
  void AllocateAndFree() {
    {
      absl::StatusOr<Tensor> t = backend_->Allocate(DType::kF32, {kFloats});
      ASSERT_TRUE(t.ok()) << t.status();
      EXPECT_GE(Used(), kBytes);
    }
    ASSERT_TRUE(backend_->Synchronize().ok());
  }

  std::unique_ptr<CudaBackend> backend_;
};

TEST_F(EmulatedPoolTrimTest, FreedBytesStayInThePoolUntilTrimmed) {
  const uint64_t start = Reserved();
  EXPECT_EQ(start, Used());  // SetUp's trim kept nothing
  AllocateAndFree();
  EXPECT_EQ(Reserved(), start + kBytes);  // freed, and kept: the threshold keeps everything
  EXPECT_EQ(Used(), start);
  ASSERT_TRUE(backend_->TrimMemory().ok());
  EXPECT_EQ(Reserved(), start);
}

TEST_F(EmulatedPoolTrimTest, AnAllocationReusesKeptBytes) {
  const uint64_t start = Reserved();
  AllocateAndFree();
  AllocateAndFree();
  EXPECT_EQ(Reserved(), start + kBytes);
}

TEST_F(EmulatedPoolTrimTest, ASynchronizationGivesBackWhatIsAboveTheThreshold) {
  const uint64_t start = Reserved();
  ASSERT_TRUE(SetCudaPoolReleaseThreshold(0, start + kBytes / 4).ok());
  AllocateAndFree();
  EXPECT_EQ(Reserved(), start + kBytes / 4);
}

}  // namespace
}  // namespace manyshot

// The emulator itself (simt.h): collectives, barriers, cp.async ordering and the checks that
// turn kernel bugs into launch errors.
#include "testing/simt/simt.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_runtime.h"
#include "engine/core/dtype.h"
#include "engine/cuda/launch.cuh"
#include "testing/simt/ptx_instructions.h"

namespace {

TEST(SimtTest, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  std::vector<int> seen(3 * 2 * 64, 0);
  const std::string err = simt::Launch(dim3(3, 2), dim3(32, 2), 0, [&] {
    const int block = static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x);
    const int thread = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x);
    ++seen[block * 64 + thread];
  });
  EXPECT_EQ(err, "");
  for (int v : seen) EXPECT_EQ(v, 1);
}

TEST(SimtTest, SyncThreadsOrdersSharedMemoryInBothSchedules) {
  for (simt::Order order : {simt::Order::kForward, simt::Order::kReverse}) {
    simt::SetOrder(order);
    std::vector<float> out(128);
    const std::string err = simt::Launch(dim3(1), dim3(128), 128 * sizeof(float), [&] {
      float* s = reinterpret_cast<float*>(simt::DynamicSmem());
      const int t = static_cast<int>(threadIdx.x);
      s[t] = static_cast<float>(t);
      __syncthreads();
      out[t] = s[127 - t];  // another warp's value: needs the barrier
    });
    EXPECT_EQ(err, "");
    for (int t = 0; t < 128; ++t) EXPECT_EQ(out[t], 127 - t);
  }
  simt::SetOrder(simt::Order::kForward);
}

TEST(SimtTest, AMissingBarrierReadsThePoisonInOneOfTheSchedules) {
  int nan_reads = 0;
  for (simt::Order order : {simt::Order::kForward, simt::Order::kReverse}) {
    simt::SetOrder(order);
    const std::string err = simt::Launch(dim3(1), dim3(64), 64 * sizeof(float), [&] {
      float* s = reinterpret_cast<float*>(simt::DynamicSmem());
      const int t = static_cast<int>(threadIdx.x);
      s[t] = 1.0f;
      __syncwarp();  // not a block barrier: warp 1's values may not be there yet
      nan_reads += std::isnan(s[63 - t]) ? 1 : 0;
    });
    EXPECT_EQ(err, "");
  }
  simt::SetOrder(simt::Order::kForward);
  EXPECT_EQ(nan_reads, 64);  // 32 readers in each order see the other warp's unwritten floats
}

TEST(SimtTest, ShuffleXorExchangesLanes) {
  std::vector<float> out(64);
  const std::string err = simt::Launch(dim3(1), dim3(64), 0, [&] {
    const int t = static_cast<int>(threadIdx.x);
    out[t] = __shfl_xor_sync(0xffffffffu, static_cast<float>(t), 5);
  });
  EXPECT_EQ(err, "");
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[t], (t & ~31) + ((t & 31) ^ 5));
}

TEST(SimtTest, ACollectiveSomeLanesNeverReachIsReported) {
  const std::string err = simt::Launch(dim3(1), dim3(32), 0, [&] {
    if (threadIdx.x < 16) (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
  });
  EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
}

TEST(SimtTest, LanesAtDifferentCollectivesAreReported) {
  const std::string err = simt::Launch(dim3(1), dim3(32), 0, [&] {
    if (threadIdx.x < 16) {
      (void)__shfl_xor_sync(0xffffffffu, 1.0f, 1);
    } else {
      __syncwarp();
    }
  });
  EXPECT_NE(err.find("different collectives"), std::string::npos) << err;
}

TEST(SimtTest, SyncThreadsAfterSomeThreadsReturnedIsReported) {
  const std::string err = simt::Launch(dim3(1), dim3(64), 0, [&] {
    if (threadIdx.x >= 32) return;
    __syncthreads();
  });
  EXPECT_NE(err.find("returned"), std::string::npos) << err;
}

TEST(SimtTest, AWritePastTheDynamicSharedMemoryIsReported) {
  const std::string err =
      simt::Launch(dim3(1), dim3(32), 64, [&] { simt::DynamicSmem()[64 + threadIdx.x] = 0; });
  EXPECT_NE(err.find("past the 64 bytes"), std::string::npos) << err;
}

TEST(SimtTest, CpAsyncLandsAtTheWaitThatCoversItsGroup) {
  alignas(16) static uint16_t src[16];
  for (int i = 0; i < 16; ++i) src[i] = static_cast<uint16_t>(i + 1);
  std::vector<int> before(2), after(2), zero_filled(1);
  const std::string err = simt::Launch(dim3(1), dim3(32), 64, [&] {
    if (threadIdx.x != 0) return;
    auto* s = reinterpret_cast<uint16_t*>(simt::DynamicSmem());
    manyshot::cuda::CpAsync16(s, src, true);
    manyshot::cuda::CpAsyncCommit();
    manyshot::cuda::CpAsync16(s + 8, src + 8, true);
    manyshot::cuda::CpAsyncCommit();
    manyshot::cuda::CpAsync16(s + 16, src, false);  // src-size 0: zeros
    manyshot::cuda::CpAsyncCommit();
    before[0] = s[0];
    manyshot::cuda::CpAsyncWait<2>();  // the oldest group only
    after[0] = s[0];
    before[1] = s[8];
    manyshot::cuda::CpAsyncWait<0>();
    after[1] = s[8];
    zero_filled[0] = s[16] == 0 && s[23] == 0;
  });
  EXPECT_EQ(err, "");
  EXPECT_EQ(before[0], 0xffff);  // still poison: not waited for
  EXPECT_EQ(after[0], 1);
  EXPECT_EQ(before[1], 0xffff);
  EXPECT_EQ(after[1], 9);
  EXPECT_EQ(zero_filled[0], 1);
}

// A buffer refilled by cp.async while another warp may still read it (no barrier between the
// last read and the refill): the copy landing at once, in the order that runs the refilling
// warp first, shows the reader the new data.
TEST(SimtTest, CopiesLandingAtIssueExposeARefillWithoutABarrier) {
  alignas(16) static uint16_t fresh[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  int stale_reads = 0, fresh_reads = 0;
  for (simt::CopyTiming timing : {simt::CopyTiming::kAtWait, simt::CopyTiming::kAtIssue}) {
    simt::SetCopyTiming(timing);
    simt::SetOrder(simt::Order::kForward);
    const std::string err = simt::Launch(dim3(1), dim3(64), 16, [&] {
      auto* s = reinterpret_cast<uint16_t*>(simt::DynamicSmem());
      if (threadIdx.x == 0) {
        for (int i = 0; i < 8; ++i) s[i] = 1;
      }
      __syncthreads();
      if (threadIdx.x == 0) {  // refill: missing a barrier after warp 1's read below
        manyshot::cuda::CpAsync16(s, fresh, true);
        manyshot::cuda::CpAsyncCommit();
      }
      if (threadIdx.x == 32) (s[0] == 1 ? stale_reads : fresh_reads) += 1;
      __syncthreads();
      if (threadIdx.x == 0) manyshot::cuda::CpAsyncWait<0>();
    });
    EXPECT_EQ(err, "");
  }
  simt::SetCopyTiming(simt::CopyTiming::kAtWait);
  EXPECT_EQ(stale_reads, 1);  // copies at wait: warp 0 waits only after warp 1 read it
  EXPECT_EQ(fresh_reads, 1);  // copies at issue: the race shows
}

// A thread whose frames outgrow its fiber stack faults on the guard page below it.
__attribute__((noinline)) int Deep(int n) {
  volatile char frame[4096];
  frame[0] = static_cast<char>(n);
  return n == 0 ? frame[0] : Deep(n - 1) + frame[0];
}

TEST(SimtDeathTest, AThreadThatOverflowsItsStackCrashes) {
  EXPECT_DEATH((void)simt::Launch(dim3(1), dim3(1), 0, [] { (void)Deep(1000); }), "");
}

TEST(SimtDeathTest, AnAccessPastADeviceAllocationCrashes) {
  auto* p = static_cast<float*>(simt::DeviceAlloc(40 * sizeof(float)));
  EXPECT_TRUE(std::isnan(p[39]));  // the last element: poison, readable
  EXPECT_DEATH(
      {
        // The guard page's last float (4 KiB pages; the block ends where the guard begins). Further
        // on, another mapping may lie: which one depends on what the process has mapped.
        volatile float x = p[40 + 4 * 1024 / 4 - 1];
        (void)x;
      },
      "");
  EXPECT_DEATH(
      {
        volatile float x = p[44];
        (void)x;
      },
      "");  // past the 16-byte rounding
  simt::DeviceFree(p);
}

// Lane `lane`'s accumulators of output columns 0..7 (c0) and 8..15 (c1) into out, at the
// positions the ISA gives the C/D fragment: rows lane / 4 and + 8, columns 2 (lane % 4) and + 1.
void StoreAccumulators(int lane, const float (&c0)[4], const float (&c1)[4], float (&out)[16][16]) {
  const int g = lane >> 2, t = lane & 3;
  for (int i = 0; i < 4; ++i) {
    out[g + (i >= 2 ? 8 : 0)][t * 2 + (i & 1)] = c0[i];
    out[g + (i >= 2 ? 8 : 0)][8 + t * 2 + (i & 1)] = c1[i];
  }
}

// The canonical use of ldmatrix + mma.sync (A row-major 16 x 16 by ldmatrix.x4 with lane l
// addressing row l % 16, column 8 (l / 16); B from a [n][k] tile by ldmatrix.x4 with lane l
// addressing n row (l / 16) * 8 + l % 8, k column 8 ((l / 8) % 2), as the attention kernels do)
// must give the plain matrix product: the ISA's ldmatrix and mma layouts are consistent only
// in that combination, so this checks the emulation's tables against each other.
template <typename T>
void CheckMmaProduct() {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> small(-4, 4);
  float a[16][16], b[16][16];  // b: [n][k], 16 columns of the output
  for (auto& row : a) {
    for (float& x : row) x = static_cast<float>(small(rng)) * 0.25f;
  }
  for (auto& row : b) {
    for (float& x : row) x = static_cast<float>(small(rng)) * 0.5f;
  }
  auto bits = [](float x) {
    return std::is_same_v<T, __half> ? manyshot::F32ToF16(x) : manyshot::F32ToBF16(x);
  };
  float got[16][16] = {};
  const std::string err = simt::Launch(dim3(1), dim3(32), 2 * 16 * 24 * sizeof(uint16_t), [&] {
    auto* sa = reinterpret_cast<uint16_t*>(simt::DynamicSmem());  // [16][24] (padded rows)
    uint16_t* sb = sa + 16 * 24;                                  // [16][24]
    const int lane = static_cast<int>(threadIdx.x);
    for (int i = lane; i < 256; i += 32) {
      sa[(i / 16) * 24 + i % 16] = bits(a[i / 16][i % 16]);
      sb[(i / 16) * 24 + i % 16] = bits(b[i / 16][i % 16]);
    }
    __syncwarp();
    uint32_t af[4], bf[4];
    manyshot::cuda::LdMatrixX4(af, sa + (lane & 15) * 24 + (lane >> 4) * 8);
    manyshot::cuda::LdMatrixX4(bf,
                               sb + ((lane >> 4) * 8 + (lane & 7)) * 24 + ((lane >> 3) & 1) * 8);
    float c0[4] = {0, 0, 0, 0}, c1[4] = {0, 0, 0, 0};
    manyshot::cuda::Mma<T>(c0, af, bf[0], bf[1]);  // output columns 0..7
    manyshot::cuda::Mma<T>(c1, af, bf[2], bf[3]);  // 8..15
    StoreAccumulators(lane, c0, c1, got);
  });
  ASSERT_EQ(err, "");
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      float want = 0.0f;
      for (int k = 0; k < 16; ++k) want += a[m][k] * b[n][k];
      EXPECT_EQ(got[m][n], want) << m << ", " << n;
    }
  }
}

TEST(SimtTest, LdMatrixAndMmaGiveThePlainProductF16) { CheckMmaProduct<__half>(); }
TEST(SimtTest, LdMatrixAndMmaGiveThePlainProductBF16) { CheckMmaProduct<__nv_bfloat16>(); }

TEST(SimtTest, LdMatrixTransposedLoadsTheBOperandOfARowMajorTile) {
  // O = P V with V stored [k][n] row-major: B fragments by ldmatrix.x4.trans.
  float p[16][16], v[16][16];
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      p[i][j] = static_cast<float>((i * 3 + j) % 7 - 3);
      v[i][j] = static_cast<float>((i + 5 * j) % 5 - 2);
    }
  }
  float got[16][16] = {};
  const std::string err = simt::Launch(dim3(1), dim3(32), 2 * 16 * 24 * sizeof(uint16_t), [&] {
    auto* sp = reinterpret_cast<uint16_t*>(simt::DynamicSmem());
    uint16_t* sv = sp + 16 * 24;
    const int lane = static_cast<int>(threadIdx.x);
    for (int i = lane; i < 256; i += 32) {
      sp[(i / 16) * 24 + i % 16] = manyshot::F32ToBF16(p[i / 16][i % 16]);
      sv[(i / 16) * 24 + i % 16] = manyshot::F32ToBF16(v[i / 16][i % 16]);
    }
    __syncwarp();
    uint32_t af[4], bf[4];
    manyshot::cuda::LdMatrixX4(af, sp + (lane & 15) * 24 + (lane >> 4) * 8);
    manyshot::cuda::LdMatrixX4Trans(bf, sv + (lane & 15) * 24 + (lane >> 4) * 8);
    float c0[4] = {0, 0, 0, 0}, c1[4] = {0, 0, 0, 0};
    manyshot::cuda::Mma<__nv_bfloat16>(c0, af, bf[0], bf[1]);
    manyshot::cuda::Mma<__nv_bfloat16>(c1, af, bf[2], bf[3]);
    StoreAccumulators(lane, c0, c1, got);
  });
  ASSERT_EQ(err, "");
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 16; ++n) {
      float want = 0.0f;
      for (int k = 0; k < 16; ++k) want += p[m][k] * v[k][n];
      EXPECT_EQ(got[m][n], want) << m << ", " << n;
    }
  }
}

TEST(SimtTest, MisalignedLdMatrixIsReported) {
  const std::string err = simt::Launch(dim3(1), dim3(32), 1024, [&] {
    auto* s = reinterpret_cast<uint16_t*>(simt::DynamicSmem());
    uint32_t r[4];
    manyshot::cuda::LdMatrixX4(r, s + 1 + threadIdx.x * 8);
  });
  EXPECT_NE(err.find("ldmatrix"), std::string::npos) << err;
}

TEST(SimtTest, LaunchOverTheSharedMemoryLimitFailsUntilTheAttributeIsRaised) {
  struct P {
    int x;
  };
  static void (*kernel)(P) = [](P) {};
  P arg{1};
  void* args[] = {&arg};
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(1), dim3(32), args, 64 * 1024, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024),
            cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(1), dim3(32), args, 64 * 1024, nullptr), cudaSuccess);
  EXPECT_EQ(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST(SimtTest, AllowDynamicSmemRaisesTheLimitToTheLargestNeedAndReportsEveryFailure) {
  struct P {
    int x;
  };
  static void (*kernel)(P) = [](P) {};
  P arg{1};
  void* args[] = {&arg};
  using manyshot::cuda::AllowDynamicSmem;
  EXPECT_EQ(AllowDynamicSmem(kernel, 40 * 1024), cudaSuccess);  // under the default: no change
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(1), dim3(32), args, 64 * 1024, nullptr),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(AllowDynamicSmem(kernel, 64 * 1024), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(1), dim3(32), args, 64 * 1024, nullptr), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(1), dim3(32), args, 100 * 1024, nullptr),
            cudaErrorInvalidValue);
  (void)cudaGetLastError();
  // A larger need raises it again; a smaller one afterwards does not lower it.
  EXPECT_EQ(AllowDynamicSmem(kernel, 100 * 1024), cudaSuccess);
  EXPECT_EQ(AllowDynamicSmem(kernel, 50 * 1024), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(1), dim3(32), args, 100 * 1024, nullptr), cudaSuccess);
  // Over the hardware's 227 KiB: an error each time, and none left for the next call to report.
  EXPECT_EQ(AllowDynamicSmem(kernel, 300 * 1024), cudaErrorInvalidValue);
  EXPECT_EQ(AllowDynamicSmem(kernel, 300 * 1024), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(kernel, dim3(1), dim3(32), args, 100 * 1024, nullptr), cudaSuccess);
  // raise_to: one raise covers the larger launches that come later.
  static void (*other)(P) = [](P) {};
  EXPECT_EQ(AllowDynamicSmem(other, 60 * 1024, 120 * 1024), cudaSuccess);
  EXPECT_EQ(cudaLaunchKernel(other, dim3(1), dim3(32), args, 120 * 1024, nullptr), cudaSuccess);
}

}  // namespace

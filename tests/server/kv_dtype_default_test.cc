// server/kv_dtype_default.h: an unset --kv_dtype is 16-bit on CUDA (the tensor-core flash kernel
// reads it) and f32 on the CPU, and the startup log names the kernel the configuration runs.
#include "server/kv_dtype_default.h"

#include <string>

#include "gtest/gtest.h"

namespace manyshot::server {
namespace {

TEST(KvDtypeDefaultTest, CudaStoresSixteenBitKvTheCpuKeepsF32) {
  EXPECT_EQ(DefaultKvDtype(Device::kCUDA, DType::kBF16), "bf16");
  EXPECT_EQ(DefaultKvDtype(Device::kCUDA, DType::kF32), "bf16");
  EXPECT_EQ(DefaultKvDtype(Device::kCUDA, DType::kF16), "f16");
  EXPECT_EQ(DefaultKvDtype(Device::kCPU, DType::kF32), "f32");
  EXPECT_EQ(DefaultKvDtype(Device::kCPU, DType::kBF16), "f32");
}

TEST(KvDtypeDefaultTest, TheLogNamesTheKernelTheConfigurationRuns) {
  const std::string flash = AttentionKernelDescription(Device::kCUDA, DType::kBF16, 64);
  EXPECT_NE(flash.find("cuda flash kernel (bf16 K/V on tensor cores"), std::string::npos) << flash;
  EXPECT_NE(flash.find("ALiBi/T5 bias as its variants"), std::string::npos) << flash;
  const std::string f32 = AttentionKernelDescription(Device::kCUDA, DType::kF32, 64);
  EXPECT_NE(f32.find("cuda generic kernel (f32 K/V"), std::string::npos) << f32;
  EXPECT_NE(f32.find("--kv_dtype=bf16"), std::string::npos) << f32;
  const std::string odd = AttentionKernelDescription(Device::kCUDA, DType::kF16, 96);
  EXPECT_NE(odd.find("cuda generic kernel (f16 K/V, head_dim 96"), std::string::npos) << odd;
  EXPECT_NE(AttentionKernelDescription(Device::kCPU, DType::kF32, 64).find("cpu attention"),
            std::string::npos);
}

}  // namespace
}  // namespace manyshot::server

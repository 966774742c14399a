// GemmPlan (engine/cuda/gemm_plan.cc) against the real cuBLASLt 13 that the CUDA plugin uses,
// loaded the same way (cublaslt_loader.cc), on a machine without a GPU. Everything a plan sets
// up before the heuristic is host-side: the matmul descriptor and its attributes (transposes, the
// bias epilogue and its pointer), the three matrix layouts and the preference's workspace and
// alignment attributes. The library checks each attribute's id, type and size, so this is the
// real ABI check the emulated cuBLASLt (testing/simt) cannot give. Every epilogue the backend
// asks for is set: the bias, GELU and ReLU, alone and together. The heuristic needs a handle,
// and a handle needs a GPU: without one it must be the first call to fail; with one, every plan
// must be created.
#include <cublasLt.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/cuda/cuda_backend_impl.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot::cuda_internal {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(GemmPlanOnTheRealCublasLtTest, TheLibraryLoads) {
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS)
      << "libcublasLt.so.13 could not be loaded (cublaslt_loader.cc looks in the loader's path "
         "and /usr/local/cuda/lib64)";
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
}

TEST(GemmPlanOnTheRealCublasLtTest, EveryDescriptorIsAcceptedAndOnlyTheHeuristicNeedsAGpu) {
  cublasLtHandle_t handle = nullptr;
  const bool gpu = cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS;
  // A bias pointer is only recorded before the heuristic, never dereferenced.
  const void* bias = reinterpret_cast<const void*>(uintptr_t{1} << 20);
  int plans = 0;
  for (DType in : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType out : {in, DType::kF32}) {
      for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
        for (bool with_bias : {false, true}) {
          for (const std::optional<GemmActivation> activation :
               {std::optional<GemmActivation>(), std::optional(GemmActivation::kGeluTanh),
                std::optional(GemmActivation::kRelu)}) {
            for (uint32_t align : {256u, 2u}) {
              GemmKey key;
              key.rows = 20;
              key.in = 768;
              key.out = 2304;
              key.in_type = in;
              key.out_type = out;
              key.layout = layout;
              key.align_x = key.align_w = key.align_y = align;
              key.bias = with_bias;  // the epilogue when the types match and align_bias >= 16
              key.align_bias = 256;
              key.activation = activation;  // GELU / RELU epilogues (with the bias or without)
              absl::StatusOr<std::unique_ptr<GemmPlan>> plan =
                  GemmPlan::Create(gpu ? handle : nullptr, key, with_bias ? bias : nullptr);
              ++plans;
              if (gpu) {
                EXPECT_TRUE(plan.ok()) << key.ToString() << ": " << plan.status();
                continue;
              }
              ASSERT_FALSE(plan.ok()) << key.ToString();
              const std::string message(plan.status().message());
              EXPECT_THAT(message, HasSubstr("cublasLt cublasLtMatmulAlgoGetHeuristic: status"))
                  << key.ToString();
              EXPECT_THAT(message, Not(HasSubstr("no algorithm"))) << key.ToString();
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(plans, 144);
  if (gpu) cublasLtDestroy(handle);
}

}  // namespace
}  // namespace manyshot::cuda_internal

// LinearActivation on the CUDA backend running on the SIMT emulator: the GELU (tanh) or ReLU
// runs in cuBLASLt's epilogue, after the bias and before the one rounding of the output, so the
// up projection and its activation are one launch (counted by the emulator, not timed); where
// the emulated heuristic is told to find no kernel with the activation epilogue, the op is Linear
// then the activation kernel, bit for bit. Its values against the CPU backend: the backend parity
// suite (LinearActivationIsLinearThenTheActivation), on the emulator and on a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda_runtime.h"
#include "testing/simt/simt.h"
#include "tests/engine/backend/backend_test_util.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

std::string Name(GemmActivation a) { return a == GemmActivation::kRelu ? "relu" : "gelu"; }

class EmulatedLinearActivationTest : public ::testing::Test {
 protected:
  void SetUp() override { gpu_ = NamedTestBackend("simt-cuda", nullptr); }
  void TearDown() override { simt::Props().no_activation_epilogue_algorithm = false; }

  // One problem on the emulated GPU: x [T, in], the weight in `layout`, an optional bias.
  struct Problem {
    Tensor x, w, bias;
    int64_t rows, outf;
  };
  Problem Make(DType dtype, int64_t T, WeightLayout layout, bool with_bias) {
    const int64_t in = 96, outf = 136;
    const auto x = RoundedTo(RandomValues(rng_, T * in, 2.0f), dtype);
    const auto w = RoundedTo(RandomValues(rng_, in * outf, 0.2f), dtype);
    const auto bias = RoundedTo(RandomValues(rng_, outf), dtype);
    const std::vector<int64_t> wshape = layout == WeightLayout::kOutIn
                                            ? std::vector<int64_t>{outf, in}
                                            : std::vector<int64_t>{in, outf};
    Problem p;
    p.x = Upload(*gpu_, x, dtype, {T, in});
    p.w = Upload(*gpu_, w, dtype, wshape);
    if (with_bias) p.bias = Upload(*gpu_, bias, dtype, {outf});
    p.rows = T;
    p.outf = outf;
    return p;
  }
  // LinearActivation on the emulated GPU into a fresh `out_dtype` output; counts its launches.
  std::vector<float> Run(const Problem& p, WeightLayout layout, GemmActivation a, DType out_dtype,
                         uint64_t* launches) {
    Tensor out = Poisoned(*gpu_, out_dtype, {p.rows, p.outf});
    const uint64_t before = simt::HostLaunches();
    gpu_->LinearActivation(p.x, p.w, layout, p.bias, a, out);
    *launches = simt::HostLaunches() - before;
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return Download(*gpu_, out);
  }

  Backend* gpu_ = nullptr;
  std::mt19937 rng_{20261129};
};

// Where the epilogue can hold the bias (its dtype is the output's), the GEMM, the bias and the
// activation are one launch; an f32 output from 16-bit inputs adds the bias in an f32 pass, and
// the activation follows it: three.
TEST_F(EmulatedLinearActivationTest, TheEpilogueMakesItOneLaunch) {
  for (GemmActivation a : {GemmActivation::kGeluTanh, GemmActivation::kRelu}) {
    SCOPED_TRACE(Name(a));
    for (bool with_bias : {false, true}) {
      const Problem p = Make(DType::kBF16, 7, WeightLayout::kInOut, with_bias);
      uint64_t launches = 0;
      Run(p, WeightLayout::kInOut, a, DType::kBF16, &launches);
      EXPECT_EQ(launches, 1u) << (with_bias ? "with" : "without") << " the bias";
    }
    const Problem p = Make(DType::kBF16, 7, WeightLayout::kInOut, /*with_bias=*/true);
    uint64_t launches = 0;
    Run(p, WeightLayout::kInOut, a, DType::kF32, &launches);
    EXPECT_EQ(launches, 3u) << "bf16 in, f32 out";
  }
}

// Without a kernel for the activation epilogue (the library decides per shape), the GEMM keeps
// the bias in its epilogue and the activation kernel runs after it: the bits of Linear followed
// by GeluTanh / Relu on the same backend.
TEST_F(EmulatedLinearActivationTest, WithoutAnEpilogueKernelItIsLinearThenTheActivation) {
  simt::Props().no_activation_epilogue_algorithm = true;
  for (GemmActivation a : {GemmActivation::kGeluTanh, GemmActivation::kRelu}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(Name(a) + " " + std::string(DTypeName(dtype)));
      // A row count no other test plans, so the plan is made under the flag.
      const Problem p = Make(dtype, 11, WeightLayout::kOutIn, /*with_bias=*/true);
      uint64_t launches = 0;
      const std::vector<float> got = Run(p, WeightLayout::kOutIn, a, dtype, &launches);
      EXPECT_EQ(launches, 2u);
      Tensor two_ops = Poisoned(*gpu_, dtype, {p.rows, p.outf});
      gpu_->Linear(p.x, p.w, WeightLayout::kOutIn, p.bias, two_ops);
      if (a == GemmActivation::kRelu) {
        gpu_->Relu(two_ops);
      } else {
        gpu_->GeluTanh(two_ops);
      }
      const std::vector<float> want = Download(*gpu_, two_ops);
      ASSERT_EQ(got.size(), want.size());
      int mismatches = 0;
      for (size_t i = 0; i < got.size(); ++i) mismatches += got[i] == want[i] ? 0 : 1;
      EXPECT_EQ(mismatches, 0);
    }
  }
}

// A bad argument is the op's error, as for Linear: nothing runs.
TEST_F(EmulatedLinearActivationTest, ABadShapeIsAnErrorNamingTheOp) {
  const Problem p = Make(DType::kF32, 3, WeightLayout::kOutIn, /*with_bias=*/false);
  Tensor wrong = Poisoned(*gpu_, DType::kF32, {p.rows, p.outf + 1});
  gpu_->LinearActivation(p.x, p.w, WeightLayout::kOutIn, Tensor(), GemmActivation::kGeluTanh,
                         wrong);
  const absl::Status status = gpu_->Synchronize();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("LinearActivation"), std::string::npos) << status;
}

}  // namespace
}  // namespace manyshot::testing

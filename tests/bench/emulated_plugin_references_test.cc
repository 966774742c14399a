// The same-run references `manyshot-bench attention --backend=cuda` divides its figures by
// (engine/cuda/cuda_reference.cc: device name, device-to-device copy, cuBLASLt GEMM), run through
// the plugin's entry point and looked up by name (get_proc_address) on testing/simt's build of
// the plugin, so their host code (events, streams, the GEMM plan, cleanup on every path) has run
// before a GPU session depends on it. The emulator's timings mean nothing: only that each
// measurement completes, is a positive finite rate, and refuses bad arguments, is checked.
#include <dlfcn.h>

#include <cmath>

#include "engine/core/dtype.h"
#include "engine/cuda/cuda_plugin.h"
#include "gtest/gtest.h"

namespace manyshot {
namespace {

const CudaPlugin* EmulatedPlugin() {
  static const CudaPlugin* plugin = [] {
    void* handle = dlopen(MANYSHOT_CUDA_SIMT_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return static_cast<const CudaPlugin*>(nullptr);
    auto entry = reinterpret_cast<const CudaPlugin* (*)()>(dlsym(handle, "manyshot_cuda_plugin"));
    return entry == nullptr ? nullptr : entry();
  }();
  return plugin;
}

class EmulatedPluginReferencesTest : public testing::Test {
 protected:
  void SetUp() override {
    plugin_ = EmulatedPlugin();
    ASSERT_NE(plugin_, nullptr) << dlerror();
    ASSERT_EQ(plugin_->abi_version, CudaPlugin::kAbiVersion);
  }
  // The function the plugin hands out under `name`, as the type cuda_plugin.h gives it.
  template <typename Type>
  Type* Function(const char* name) {
    return reinterpret_cast<Type*>(plugin_->get_proc_address(name));
  }
  const CudaPlugin* plugin_ = nullptr;
};

namespace fn = cuda_plugin_functions;

bool PositiveFinite(double x) { return std::isfinite(x) && x > 0; }

TEST_F(EmulatedPluginReferencesTest, EveryNamedFunctionIsThereAndAnUnknownNameIsNot) {
  for (const char* name : {fn::kDeviceName, fn::kCopyBytesPerSecond, fn::kGemmFlopsPerSecond,
                           fn::kPoolReservedBytes}) {
    EXPECT_NE(plugin_->get_proc_address(name), nullptr) << name;
  }
  EXPECT_EQ(plugin_->get_proc_address("cuda_reference_no_such_timer"), nullptr);
  EXPECT_EQ(plugin_->get_proc_address("cuda_reference_device"), nullptr);  // a prefix only
  EXPECT_EQ(plugin_->get_proc_address(""), nullptr);
  EXPECT_EQ(plugin_->get_proc_address(nullptr), nullptr);
}

TEST_F(EmulatedPluginReferencesTest, DeviceNameOfTheDeviceAndAnErrorForOneThatDoesNotExist) {
  auto* device_name = Function<fn::DeviceName>(fn::kDeviceName);
  ASSERT_NE(device_name, nullptr);
  absl::StatusOr<std::string> name = device_name(0);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*name, "SIMT emulator");
  EXPECT_EQ(device_name(1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EmulatedPluginReferencesTest, DeviceCopyMeasuresAPositiveRate) {
  auto* copy_bytes_per_second = Function<fn::CopyBytesPerSecond>(fn::kCopyBytesPerSecond);
  ASSERT_NE(copy_bytes_per_second, nullptr);
  // An odd size: the fill's remainder bytes take the memset path.
  for (size_t bytes : {size_t{1} << 16, size_t{40003}}) {
    absl::StatusOr<double> rate = copy_bytes_per_second(0, bytes, 3);
    ASSERT_TRUE(rate.ok()) << bytes << ": " << rate.status();
    EXPECT_TRUE(PositiveFinite(*rate)) << *rate;
  }
  EXPECT_EQ(copy_bytes_per_second(0, 0, 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copy_bytes_per_second(0, 1024, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(copy_bytes_per_second(3, 1024, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(EmulatedPluginReferencesTest, GemmMeasuresAPositiveRateForEveryFloatType) {
  auto* gemm_flops_per_second = Function<fn::GemmFlopsPerSecond>(fn::kGemmFlopsPerSecond);
  ASSERT_NE(gemm_flops_per_second, nullptr);
  for (DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    absl::StatusOr<double> rate = gemm_flops_per_second(0, 64, 24, 40, dtype, 2);
    ASSERT_TRUE(rate.ok()) << DTypeName(dtype) << ": " << rate.status();
    EXPECT_TRUE(PositiveFinite(*rate)) << *rate;
  }
  EXPECT_EQ(gemm_flops_per_second(0, 64, 64, 64, DType::kI32, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gemm_flops_per_second(0, 0, 64, 64, DType::kBF16, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gemm_flops_per_second(0, 64, 64, 64, DType::kBF16, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  const int64_t huge = int64_t{1} << 30;
  EXPECT_EQ(gemm_flops_per_second(0, huge, huge, huge, DType::kBF16, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace manyshot

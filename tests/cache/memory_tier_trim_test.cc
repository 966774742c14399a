// The memory tier on a CUDA backend gives an evicted context's bytes back to the device: the
// device's memory pool (which keeps every freed byte, engine/cuda/memory_pool.h) holds fewer
// bytes after the eviction than before it, measured by the pool's own counter
// (cudaMemPoolAttrReservedMemCurrent), on the CUDA backend's code over the SIMT emulator
// ("simt-cuda") and through the plugin ("cuda": a GPU, or the emulated plugin in
// cache_tests.Cuda_on_the_emulated_plugin).
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cache/memory_tier.h"
#include "engine/backends/backend_factory.h"
#include "engine/cuda/memory_pool.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"
#if MANYSHOT_CUDA_ENABLED
#include "engine/cuda/cuda_plugin.h"
#endif

namespace manyshot::testing {
namespace {

class MemoryTierTrimTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    backend_ = NamedTestBackend(GetParam(), &why);
    if (backend_ == nullptr) GTEST_SKIP() << why;
  }

  // The pool's reserved bytes after this thread's queued work (frees included) has run.
  uint64_t PoolBytes() {
    EXPECT_TRUE(backend_->Synchronize().ok());
    absl::StatusOr<uint64_t> bytes = ReservedBytes(backend_->device_index());
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.value_or(0);
  }

  absl::StatusOr<uint64_t> ReservedBytes(int device) {
    // "simt-cuda" is linked into this program; "cuda" is the plugin the factory loaded.
    if (GetParam() == "simt-cuda") return CudaPoolReservedBytes(device);
#if MANYSHOT_CUDA_ENABLED
    namespace fn = cuda_plugin_functions;
    auto reserved = CudaPluginFunction<fn::PoolReservedBytes>(fn::kPoolReservedBytes);
    if (!reserved.ok()) return reserved.status();
    return (*reserved)(device);
#else
    return absl::FailedPreconditionError("no CUDA plugin in this build");
#endif
  }

  // 8 MiB: two f32 tensors of 1024 x 8 x 128, whole 2 MiB granules of a GPU's pool.
  std::shared_ptr<const EncodedContext> Ctx(uint64_t seed) {
    return std::make_shared<const EncodedContext>(
        SyntheticContext(*backend_, seed, 1, 1024, 8, 128));
  }

  Backend* backend_ = nullptr;
};

TEST_P(MemoryTierTrimTest, AnEvictedContextsBytesLeaveThePool) {
  constexpr size_t kContextBytes = size_t{8} << 20;
  MemoryTier tier(2 * kContextBytes, nullptr, backend_);
  tier.Insert("a", Ctx(1));
  tier.Insert("b", Ctx(2));
  auto c = Ctx(3);
  ASSERT_EQ(ContextTensorBytes(*c), kContextBytes);
  const uint64_t before = PoolBytes();
  tier.Insert("c", std::move(c));  // evicts "a", whose only reference the tier held
  const uint64_t after = PoolBytes();
  EXPECT_EQ(tier.stats().evictions, 1u);
  EXPECT_EQ(tier.stats().trims, 1u);
  EXPECT_EQ(tier.stats().failed_trims, 0u);
  EXPECT_LE(after + kContextBytes, before) << "before " << before << ", after " << after;
}

TEST_P(MemoryTierTrimTest, WithoutTheBackendThePoolKeepsThem) {
  // The control: the same eviction with no backend to trim leaves the freed bytes in the pool
  // (CreateCudaBackend sets its release threshold to keep every freed byte).
  constexpr size_t kContextBytes = size_t{8} << 20;
  MemoryTier tier(2 * kContextBytes);
  tier.Insert("a", Ctx(1));
  tier.Insert("b", Ctx(2));
  auto c = Ctx(3);
  const uint64_t before = PoolBytes();
  tier.Insert("c", std::move(c));
  const uint64_t after = PoolBytes();
  EXPECT_EQ(tier.stats().evictions, 1u);
  EXPECT_EQ(tier.stats().trims, 0u);
  EXPECT_GE(after, before);
  // Erasing with the backend given trims too: the erased context's bytes leave the pool.
  MemoryTier trimming(kContextBytes, nullptr, backend_);
  trimming.Insert("d", Ctx(4));
  const uint64_t with_d = PoolBytes();
  trimming.Erase("d");
  EXPECT_EQ(trimming.stats().trims, 1u);
  EXPECT_LE(PoolBytes() + kContextBytes, with_d);
}

INSTANTIATE_TEST_SUITE_P(SimtCuda, MemoryTierTrimTest, ::testing::Values("simt-cuda"),
                         BackendTestName);
INSTANTIATE_TEST_SUITE_P(Cuda, MemoryTierTrimTest, ::testing::Values("cuda"), BackendTestName);

}  // namespace
}  // namespace manyshot::testing

// The accuracy cost of 16-bit KV storage on the SST-2 task (tiny GPT-2, real tokenizer): label
// log-probs with the context round-tripped through bf16 / f16 vs f32. Printed, and bounded.
#include <cmath>
#include <cstdio>

#include "cache/context_cache.h"
#include "cache/kv_convert.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

double MaxAbsDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(KvDtypeAccuracyTest, SixteenBitStorageCostsLittleAccuracy) {
  Backend& backend = TestBackend();
  auto task = Sst2Task();
  auto ctx = task->EncodeContext();
  ASSERT_TRUE(ctx.ok());
  const std::vector<double> f32 = ScoreSst2(*task, *ctx);
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    auto narrowed = ConvertContext(*ctx, dtype, backend);
    ASSERT_TRUE(narrowed.ok());
    auto widened = ToF32(*narrowed, backend);
    ASSERT_TRUE(widened.ok());
    const double diff = MaxAbsDiff(f32, ScoreSst2(*task, *widened));
    std::printf("[ info ] %s KV storage: max |delta mean log-prob| over %zu label scores = %.3g\n",
                std::string(DTypeName(dtype)).c_str(), f32.size(), diff);
    EXPECT_LT(diff, dtype == DType::kBF16 ? 0.05 : 0.01);
  }
}

TEST(KvDtypeAccuracyTest, Bf16CacheScoresEqualTheBf16RoundTripBeforeAndAfterRestart) {
  Backend& backend = TestBackend();
  auto task = Sst2Task();
  auto ctx = task->EncodeContext();
  ASSERT_TRUE(ctx.ok());
  const auto expected =
      ScoreSst2(*task, *ToF32(*ConvertContext(*ctx, DType::kBF16, backend), backend));
  const auto dir = FreshTempDir("bf16");
  ContextCacheOptions options;
  options.kv_dtype = DType::kBF16;
  {
    auto cache = ContextCache::Open(dir, options, backend);
    ASSERT_TRUE(cache.ok());
    TaskRecord record{"t", "", "sst2:0", "", "k", 0};
    auto pinned = (*cache)->CreateTask(record, [&] { return task->EncodeContext(); });
    ASSERT_TRUE(pinned.ok());
    EXPECT_EQ(ScoreSst2(*task, **pinned), expected);
  }
  auto cache = ContextCache::Open(dir, options, backend);
  ASSERT_TRUE(cache.ok());
  auto pinned = (*cache)->Acquire("k", nullptr,
                                  [&](const EncodedContext& c) { return task->CheckContext(c); });
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(ScoreSst2(*task, **pinned), expected);
  pinned->Release();
  cache->reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace manyshot::testing

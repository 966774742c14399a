// The second process of the cache tests.
//   cache_test_helper score DB DTYPE   reopen the cache (DTYPE f32|bf16), score every ready SST-2
//                                      task, print the scores (%a, exact) and the cache counters.
//   cache_test_helper write DB SEED    print "ready", then write synthetic tasks forever (until
//                                      the crash test SIGKILLs it).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "cache/context_cache.h"
#include "engine/prompting/icl_cache_key.h"
#include "engine/task/cache_key.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "cache_test_helper: %s\n", message.c_str());
  return 1;
}

int Score(const std::string& db, DType dtype) {
  ContextCacheOptions options;
  options.kv_dtype = dtype;
  auto cache = ContextCache::Open(db, options, TestBackend());
  if (!cache.ok()) return Fail(cache.status().ToString());
  for (const TaskRecord& record : (*cache)->ListTasks()) {
    if (record.spec.rfind("sst2:", 0) != 0) return Fail("unexpected spec " + record.spec);
    auto task = Sst2Task(std::strtoull(record.spec.c_str() + 5, nullptr, 10));
    const std::string key = CacheKeyForTask(GoldenModel("gpt2"), Gpt2Tokenizer(), *task, dtype);
    if (key != record.kv_key) return Fail("key mismatch for " + record.task_id);
    auto pinned = (*cache)->Acquire(
        key, [&] { return task->EncodeContext(); },
        [&](const EncodedContext& ctx) { return task->CheckContext(ctx); });
    if (!pinned.ok()) return Fail(pinned.status().ToString());
    std::printf("task %s\n", record.task_id.c_str());
    for (double s : ScoreSst2(*task, **pinned)) std::printf("%a\n", s);
  }
  const CacheStats stats = (*cache)->Stats();
  std::printf("encodes %llu\ndisk_hits %llu\ncorruptions %llu\n",
              static_cast<unsigned long long>(stats.encodes),
              static_cast<unsigned long long>(stats.disk_hits),
              static_cast<unsigned long long>(stats.corruptions_detected));
  return 0;
}

int Write(const std::string& db, uint64_t seed) {
  auto cache = ContextCache::Open(db, CrashTestOptions(), TestBackend());
  if (!cache.ok()) return Fail(cache.status().ToString());
  std::printf("ready\n");
  std::fflush(stdout);
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto next = [&state] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  SyntheticSpec spec;
  for (uint64_t i = 0;; ++i) {
    // Every fourth task repeats the previous content: an equal task sharing one blob.
    if (i % 4 != 3 || i == 0) {
      // Every third task is large (up to 4 MB: dozens of unsynced staged batches before the
      // commit), so kills also land inside staged writes, not only in the commit's fsync.
      const int64_t max_tokens = i % 3 == 2 ? 8000 : 600;
      spec = {next(), 1 + static_cast<int64_t>(next() % 2),
              1 + static_cast<int64_t>(next() % static_cast<uint64_t>(max_tokens)), 2, 16};
    }
    TaskRecord record;
    record.task_id = absl::StrCat("w", seed, "-", i);
    record.tenant = "crash";
    record.spec = EncodeSyntheticSpec(spec);
    record.kv_key = absl::StrCat("syn", spec.seed);
    const EncodedContext ctx = SyntheticContext(TestBackend(), spec.seed, spec.layers, spec.tokens,
                                                spec.kv_heads, spec.head_dim);
    if (absl::Status s = (*cache)->PutTask(record, ctx); !s.ok()) return Fail(s.ToString());
  }
}

// Stores a synthetic context of about `mb` MB (unless mb is 0: restore an earlier run's), reopens
// the DB and times the restore (for profiling).
int RestoreTiming(const std::string& db, int64_t mb) {
  ContextCacheOptions options;
  const int64_t tokens = mb * (1 << 20) / (2 * 12 * 768 * 4);
  if (mb > 0) {  // 0: restore what an earlier run stored
    auto cache = ContextCache::Open(db, options, TestBackend());
    if (!cache.ok()) return Fail(cache.status().ToString());
    TaskRecord record{"t", "", "", "", "k", 0};
    auto ctx = SyntheticContext(TestBackend(), 1, 12, tokens, 12, 64);
    if (absl::Status s = (*cache)->PutTask(record, ctx); !s.ok()) return Fail(s.ToString());
  }
  auto cache = ContextCache::Open(db, options, TestBackend());
  if (!cache.ok()) return Fail(cache.status().ToString());
  const auto start = std::chrono::steady_clock::now();
  auto pinned = (*cache)->Acquire("k", nullptr);
  if (!pinned.ok()) return Fail(pinned.status().ToString());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("restored %.0f MB in %.3f s: %.3f GB/s\n", (*cache)->Stats().load_bytes / 1e6, s,
              (*cache)->Stats().load_bytes / s / 1e9);
  return 0;
}

}  // namespace
}  // namespace manyshot::testing

int main(int argc, char** argv) {
  namespace mt = manyshot::testing;
  if (argc == 4 && std::strcmp(argv[1], "score") == 0) {
    return mt::Score(argv[2], std::strcmp(argv[3], "bf16") == 0 ? manyshot::DType::kBF16
                                                                : manyshot::DType::kF32);
  }
  if (argc == 4 && std::strcmp(argv[1], "write") == 0) {
    return mt::Write(argv[2], std::strtoull(argv[3], nullptr, 10));
  }
  if (argc == 4 && std::strcmp(argv[1], "restore-timing") == 0) {
    return mt::RestoreTiming(argv[2], std::strtoll(argv[3], nullptr, 10));
  }
  std::fprintf(stderr, "usage: cache_test_helper score DB f32|bf16 | write DB SEED\n");
  return 2;
}

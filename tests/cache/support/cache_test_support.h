// Shared by cache_tests and cache_test_helper: the SST-2-like task on the tiny GPT-2 model (the
// same as tests/engine/prompting/icl_task_test.cc), scoring it, deterministic synthetic contexts,
// and bitwise comparison of contexts.
#pragma once

#include "tests/engine/support/golden_models.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <rocksdb/db.h>

#include "cache/context_cache.h"
#include "engine/prompting/icl_task.h"

namespace manyshot::testing {

// Gpt2Tokenizer() and Sst2Demonstrations() come from tests/engine/support/golden_models.h.

// The 8-demonstration SST-2 task on GoldenModel("gpt2"), L = 48 (several groups).
std::unique_ptr<IclTask> Sst2Task(uint64_t shuffle_seed = 0);
std::vector<Example> Sst2Queries();
// Every label's mean log-prob for every query, in order.
std::vector<double> ScoreSst2(IclTask& task, const EncodedContext& ctx);

// A context of the given shape whose values are a deterministic function of `seed`, in f32,
// then converted to `dtype`.
EncodedContext SyntheticContext(Backend& backend, uint64_t seed, int64_t layers, int64_t tokens,
                                int64_t kv_heads, int64_t head_dim, DType dtype = DType::kF32);

// Empty when a and b have the same shape, dtype and bytes; else what differs first.
std::string CompareContexts(const EncodedContext& a, const EncodedContext& b, Backend& backend);

// The live SST files of every column family whose name is `family` or starts with `family.`.
std::vector<std::filesystem::path> SstFilesOf(rocksdb::DB& db, const std::string& family);

// A fresh directory under the temp dir (removed by the caller or left for inspection).
std::filesystem::path FreshTempDir(const std::string& name);

// The spec string the crash test's writer stores: the synthetic shape and seed of the task's KV.
struct SyntheticSpec {
  uint64_t seed = 0;
  int64_t layers = 0, tokens = 0, kv_heads = 0, head_dim = 0;
};
std::string EncodeSyntheticSpec(const SyntheticSpec& spec);
bool DecodeSyntheticSpec(const std::string& text, SyntheticSpec* spec);

// Options the crash test's writer and checker share: small chunks and batches, so tasks of a few
// hundred KB take the staged (multi-batch) write path.
ContextCacheOptions CrashTestOptions();

}  // namespace manyshot::testing

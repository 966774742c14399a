// The fixture of the cache tests that store tasks, damage or replace them on disk and reopen: a
// ContextCache over a real RocksDB in a fresh temp dir on the test backend, its log collected, and
// small synthetic contexts and task records whose spec holds a marker unique to the task (to find
// its bytes on disk).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache/context_cache.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {

class CacheOnDiskTest : public ::testing::Test {
 protected:
  static constexpr int64_t kLayers = 2, kTokens = 40, kHeads = 2, kDim = 16;

  void SetUp() override {
    dir_ = FreshTempDir("on-disk");
    options_.log = [this](LogLevel, const std::string& m) { log_.push_back(m); };
  }
  void TearDown() override {
    cache_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Closes the cache (if open) and opens it again on the same directory.
  absl::Status OpenCache() {
    cache_.reset();
    auto c = ContextCache::Open(dir_, options_, TestBackend());
    if (!c.ok()) return c.status();
    cache_ = *std::move(c);
    return absl::OkStatus();
  }
  void Reopen() { ASSERT_TRUE(OpenCache().ok()) << OpenCache(); }
  EncodedContext Synthetic(uint64_t seed) {
    return SyntheticContext(TestBackend(), seed, kLayers, kTokens, kHeads, kDim);
  }
  static TaskRecord Record(const std::string& id, const std::string& key) {
    return {id,           "tenant-a", "SPEC-MARKER-OF-TASK-" + id + std::string(200, '.'),
            "hash-" + id, key,        1700000000000000};
  }
  bool Logged(const std::string& fragment) const {
    for (const auto& m : log_) {
      if (m.find(fragment) != std::string::npos) return true;
    }
    return false;
  }

  std::filesystem::path dir_;
  ContextCacheOptions options_;
  std::unique_ptr<ContextCache> cache_;
  std::vector<std::string> log_;
};

}  // namespace manyshot::testing

// Two replicas in one process: registries with their own local caches on one shared directory.
// A replica that restores a task from the shared tier answers at once and writes the local disk
// copy afterwards; a task deleted before that copy lands must not come back as a local record
// (which a restart without the shared tier, or ListTasks before the next revalidation, would
// show). The copies are queued here and run when the test says, so each interleaving is exact.
// A restore served from the mapped shared file owns its memory once its background steps ran, and
// a file cut before then is never served.
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "cache/kv_stream.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "server/shared_metrics.h"
#include "server/shared_tier.h"
#include "server/task_registry.h"
#include "tests/server/registry_fixture.h"

namespace manyshot::testing {
namespace {

class SharedLocalCopyTest : public RegistryFixture {
 protected:
  void SetUp() override {
    Open();  // replica A: registry_ over cache_
    shared_a_ = OpenShared();
    registry_->AttachShared(shared_a_.get());
    auto cache = ContextCache::Open(dir_ / "cache-b", ContextCacheOptions(), *model_.backend);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_b_ = *std::move(cache);
    registry_b_ = std::make_unique<server::TaskRegistry>(model_, *cache_b_, config_);
    ASSERT_TRUE(registry_b_->Restore().ok());
    shared_b_ = OpenShared();
    registry_b_->AttachShared(shared_b_.get());
  }

  void TearDown() override {
    registry_b_.reset();
    Close();
    shared_a_.reset();
    shared_b_.reset();
    cache_b_.reset();
  }

  std::unique_ptr<server::SharedTier> OpenShared() {
    auto shared = server::SharedTier::Open((dir_ / "shared").string(), *model_.backend, DType::kF32,
                                           metrics_);
    EXPECT_TRUE(shared.ok()) << shared.status();
    if (!shared.ok()) return nullptr;
    (*shared)->SetLocalCopyRunner(
        [this](std::function<void()> job) { queued_copies_.push_back(std::move(job)); });
    return *std::move(shared);
  }

  // Replica B answers its first request for the task: restored, not encoded, its local copy
  // queued.
  void ServeOnB(const std::string& task_id) {
    auto version = registry_b_->Resolve("tenant", task_id);
    ASSERT_TRUE(version.ok()) << version.status();
    auto handle = registry_b_->Acquire(*version);
    ASSERT_TRUE(handle.ok()) << handle.status();
    ASSERT_NE(handle->get(), nullptr);
    EXPECT_EQ(behaviour_->encoded.load(), 1) << "B encoded instead of restoring";
    ASSERT_EQ(queued_copies_.size(), 1u);
  }

  void RunQueuedCopies() {
    for (auto& copy : queued_copies_) copy();
    queued_copies_.clear();
  }

  // The shared KV file of the task (one task, so one file).
  std::filesystem::path SharedKvFile() {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ / "shared" / "kv")) {
      if (entry.path().extension() == ".kv") files.push_back(entry.path());
    }
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? std::filesystem::path() : files.front();
  }

  // The K/V bytes the registry serves for the task.
  static std::string ServedBytes(server::TaskRegistry& registry, const std::string& task_id) {
    auto version = registry.Resolve("tenant", task_id);
    EXPECT_TRUE(version.ok()) << version.status();
    if (!version.ok()) return "";
    auto handle = registry.Acquire(*version);
    EXPECT_TRUE(handle.ok()) << handle.status();
    if (!handle.ok() || handle->get() == nullptr) return "";
    std::string bytes;
    for (const Tensor& t : PayloadSegments(*handle->get())) {
      bytes.append(static_cast<const char*>(t.raw()), t.bytes());
    }
    return bytes;
  }

  bool BHoldsLocalRecord(const std::string& task_id) {
    return cache_b_->GetTask("tenant/" + task_id).has_value();
  }

  prometheus::Registry metrics_registry_;
  server::SharedMetrics metrics_{metrics_registry_};
  std::vector<std::function<void()>> queued_copies_;
  std::unique_ptr<server::SharedTier> shared_a_, shared_b_;
  std::unique_ptr<ContextCache> cache_b_;
  std::unique_ptr<server::TaskRegistry> registry_b_;
};

TEST_F(SharedLocalCopyTest, ACopyOfACurrentVersionLands) {
  ASSERT_TRUE(Create("sst2", Spec()).ok());
  ServeOnB("sst2");
  EXPECT_FALSE(BHoldsLocalRecord("sst2"));
  RunQueuedCopies();
  EXPECT_TRUE(BHoldsLocalRecord("sst2"));
}

TEST_F(SharedLocalCopyTest, ADeleteOnTheRestoringReplicaBeforeItsCopyLandsLeavesNoRecord) {
  ASSERT_TRUE(Create("sst2", Spec()).ok());
  ServeOnB("sst2");
  auto deleted = registry_b_->Delete("tenant", "sst2");
  EXPECT_TRUE(deleted.ok()) << deleted.status();
  RunQueuedCopies();
  EXPECT_FALSE(BHoldsLocalRecord("sst2"));
  EXPECT_EQ(registry_b_->Get("tenant", "sst2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Get("tenant", "sst2").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SharedLocalCopyTest, ADeleteElsewhereBeforeTheCopyLandsLeavesNoRecord) {
  ASSERT_TRUE(Create("sst2", Spec()).ok());
  ServeOnB("sst2");
  auto deleted = registry_->Delete("tenant", "sst2");
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  // B's next request sees the deletion and drops its entry; then the queued copy runs.
  EXPECT_EQ(registry_b_->Resolve("tenant", "sst2").status().code(), absl::StatusCode::kNotFound);
  RunQueuedCopies();
  EXPECT_FALSE(BHoldsLocalRecord("sst2"));
}

TEST_F(SharedLocalCopyTest, ARestoreServedFromTheMappedFileOwnsItsMemoryOnceFinished) {
  ASSERT_TRUE(Create("sst2", Spec()).ok());
  ServeOnB("sst2");
  EXPECT_EQ(metrics_.mapped_restores.Value(), 1);
  RunQueuedCopies();  // detaches, then writes the local copy
  EXPECT_TRUE(BHoldsLocalRecord("sst2"));
  // Nothing that happens to the shared file now reaches B's context.
  const std::filesystem::path file = SharedKvFile();
  std::filesystem::resize_file(file, 0);
  std::filesystem::remove(file);
  const std::string served = ServedBytes(*registry_b_, "sst2");
  EXPECT_FALSE(served.empty());
  EXPECT_TRUE(served == ServedBytes(*registry_, "sst2")) << "B serves what A encoded";
  EXPECT_EQ(behaviour_->encoded.load(), 1);
  EXPECT_EQ(metrics_.detach_failures.Value(), 0);
}

TEST_F(SharedLocalCopyTest, AFileCutBeforeTheDetachIsDroppedAndNeverServed) {
  ASSERT_TRUE(Create("sst2", Spec()).ok());
  ServeOnB("sst2");
  std::filesystem::resize_file(SharedKvFile(), 0);  // the mapped pages are gone with it
  RunQueuedCopies();
  EXPECT_EQ(metrics_.detach_failures.Value(), 1);
  EXPECT_FALSE(BHoldsLocalRecord("sst2")) << "nothing is copied from a file that was cut";
  // B's next request restores again, finds the file damaged, re-encodes and replaces it.
  const std::string served = ServedBytes(*registry_b_, "sst2");
  EXPECT_EQ(behaviour_->encoded.load(), 2);
  EXPECT_TRUE(served == ServedBytes(*registry_, "sst2"));
  EXPECT_GT(std::filesystem::file_size(SharedKvFile()), 0u);
}

}  // namespace
}  // namespace manyshot::testing

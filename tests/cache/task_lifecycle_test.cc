// Replacing and quarantining tasks in ContextCache over a real RocksDB in a temp dir: a replace
// switches versions in one batch (the previous version stays until the new one commits, and its
// KV leaves with it), and a damaged task record, whether damaged in the value (our checksum) or in
// the SST file on disk (RocksDB's block checksum), quarantines that task alone: the others open
// and serve, the damaged one is listed with the reason and can be deleted or replaced.
#include <rocksdb/db.h>

#include <fstream>
#include <iterator>

#include "cache/context_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_on_disk_test.h"
#include "tests/cache/support/sst_damage.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

using TaskLifecycleTest = CacheOnDiskTest;

// Flips one bit inside the first occurrence of `marker` in the cache's SST files.
bool FlipByteOnDisk(const std::filesystem::path& dir, const std::string& marker) {
  return FlipByteInDataBlockHolding(SstFilesIn(dir), marker);
}

TEST_F(TaskLifecycleTest, ReplaceSwitchesVersionsInOneBatchAndReleasesTheOldKv) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("t", "k1"), Synthetic(1)).ok());
  const CacheStats one = cache_->Stats();
  // The old version is pinned by a request in flight while the replace commits.
  auto in_flight = cache_->Acquire("k1", nullptr);
  ASSERT_TRUE(in_flight.ok()) << in_flight.status();
  auto replaced = cache_->CreateTask(Record("t", "k2"), [&]() -> absl::StatusOr<EncodedContext> {
    // Until the new version commits, the old one is the stored one.
    EXPECT_EQ(cache_->GetTask("t")->kv_key, "k1");
    EXPECT_TRUE(cache_->disk().HasBlob("k1"));
    return Synthetic(2);
  });
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(cache_->GetTask("t")->kv_key, "k2");
  EXPECT_FALSE(cache_->disk().HasBlob("k1"));
  EXPECT_FALSE(cache_->memory().Contains("k1"));
  // The request that pinned the old version still reads it intact.
  EXPECT_EQ(CompareContexts(**in_flight, Synthetic(1), TestBackend()), "");
  in_flight->Release();
  replaced->Release();
  CacheStats s = cache_->Stats();
  EXPECT_EQ(s.tasks, 1u);
  EXPECT_EQ(s.disk_entries, one.disk_entries);
  EXPECT_EQ(s.disk_bytes, one.disk_bytes);
  EXPECT_EQ(s.memory_entries, 1u);
  Reopen();
  EXPECT_EQ(cache_->GetTask("t")->kv_key, "k2");
  EXPECT_EQ(cache_->Stats().disk_entries, 1u);
  auto k2 = cache_->Acquire("k2", nullptr);
  ASSERT_TRUE(k2.ok()) << k2.status();
  EXPECT_EQ(CompareContexts(**k2, Synthetic(2), TestBackend()), "");
}

TEST_F(TaskLifecycleTest, AFailedReplaceKeepsThePreviousVersion) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("t", "k1"), Synthetic(1)).ok());
  auto failed = cache_->CreateTask(Record("t", "k2"), []() -> absl::StatusOr<EncodedContext> {
    return absl::InternalError("encode failed");
  });
  EXPECT_FALSE(failed.ok());
  Reopen();
  EXPECT_EQ(cache_->GetTask("t")->kv_key, "k1");
  EXPECT_TRUE(cache_->Acquire("k1", nullptr).ok());
  EXPECT_EQ(cache_->Stats().disk_entries, 1u);
}

TEST_F(TaskLifecycleTest, RecordFailingItsOwnChecksumIsQuarantinedAlone) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("a", "ka"), Synthetic(1)).ok());
  ASSERT_TRUE(cache_->PutTask(Record("b", "kb"), Synthetic(2)).ok());
  std::string value;
  auto* db = cache_->disk().db();
  auto* tasks = cache_->disk().tasks_family();
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), tasks, "t/a", &value).ok());
  value[value.size() / 2] ^= 0x10;
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), tasks, "t/a", value).ok());
  Reopen();
  ASSERT_EQ(cache_->ListTasks().size(), 1u);
  EXPECT_EQ(cache_->ListTasks()[0].task_id, "b");
  auto quarantined = cache_->QuarantinedTasks();
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_THAT(quarantined["a"], HasSubstr("checksum"));
  EXPECT_EQ(cache_->Stats().tasks_quarantined, 1u);
  EXPECT_TRUE(Logged("task a has a damaged record"));
  // Deleting it removes it for good.
  ASSERT_TRUE(cache_->DeleteTask("a").ok());
  EXPECT_TRUE(cache_->QuarantinedTasks().empty());
  Reopen();
  EXPECT_TRUE(cache_->QuarantinedTasks().empty());
  EXPECT_EQ(cache_->ListTasks().size(), 1u);
  EXPECT_TRUE(absl::IsNotFound(cache_->DeleteTask("a")));
}

TEST_F(TaskLifecycleTest, FlippedByteInTheSstFileQuarantinesThatTaskAndReplaceHealsIt) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("a", "ka"), Synthetic(1)).ok());
  ASSERT_TRUE(cache_->PutTask(Record("b", "kb"), Synthetic(2)).ok());
  ASSERT_TRUE(cache_->PutTask(Record("c", "kc"), Synthetic(3)).ok());
  ASSERT_TRUE(cache_->disk().Flush().ok());
  cache_.reset();
  // The first record, right after the ready markers: their scan must not read its block.
  ASSERT_TRUE(FlipByteOnDisk(dir_, "SPEC-MARKER-OF-TASK-a"))
      << "record a not found in any SST file";
  Reopen();
  std::vector<std::string> served;
  for (const auto& r : cache_->ListTasks()) served.push_back(r.task_id);
  EXPECT_EQ(served, (std::vector<std::string>{"b", "c"}));
  auto quarantined = cache_->QuarantinedTasks();
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_THAT(quarantined["a"], HasSubstr("orruption"));  // RocksDB's block checksum
  EXPECT_TRUE(Logged("task records moved from the damaged family tasks to tasks.1"));
  EXPECT_TRUE(cache_->Acquire("kb", nullptr).ok());
  EXPECT_TRUE(cache_->Acquire("kc", nullptr).ok());
  // The damaged block was left behind: the live tasks family reads and compacts cleanly (a
  // compaction over the damaged file would fail and, with paranoid checks, stop every write).
  rocksdb::ReadOptions verify;
  verify.verify_checksums = true;
  std::unique_ptr<rocksdb::Iterator> it(
      cache_->disk().db()->NewIterator(verify, cache_->disk().tasks_family()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
  }
  EXPECT_TRUE(it->status().ok()) << it->status().ToString();
  it.reset();
  EXPECT_TRUE(cache_->disk()
                  .db()
                  ->CompactRange(rocksdb::CompactRangeOptions(), cache_->disk().tasks_family(),
                                 nullptr, nullptr)
                  .ok());
  // Still quarantined, with its reason, after another restart.
  Reopen();
  ASSERT_EQ(cache_->QuarantinedTasks().size(), 1u);
  EXPECT_THAT(cache_->QuarantinedTasks()["a"], HasSubstr("orruption"));
  EXPECT_EQ(cache_->ListTasks().size(), 2u);
  // Replacing it clears the quarantine, now and after a restart.
  ASSERT_TRUE(cache_->PutTask(Record("a", "ka2"), Synthetic(4)).ok());
  EXPECT_TRUE(cache_->QuarantinedTasks().empty());
  Reopen();
  EXPECT_TRUE(cache_->QuarantinedTasks().empty());
  EXPECT_EQ(cache_->ListTasks().size(), 3u);
  auto a = cache_->Acquire("ka2", nullptr);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(CompareContexts(**a, Synthetic(4), TestBackend()), "");
}

}  // namespace
}  // namespace manyshot::testing

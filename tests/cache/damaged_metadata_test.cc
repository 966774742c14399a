// Damaged cache metadata over a real RocksDB: a flipped byte in the blob headers' family (data or
// index block) drops the entries it describes, which re-encode on first use, and every task keeps
// serving; a damaged index block of the tasks family costs the tasks of that one SST file, which
// are salvaged from its data blocks, and never stops the open.
#include <rocksdb/db.h>
#include <rocksdb/metadata.h>

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

class DamagedMetadataTest : public CacheOnDiskTest {
 protected:
  // Three tasks stored and flushed, the cache closed; the SST files of `family`.
  std::vector<std::filesystem::path> ThreeTasksThenFilesOf(const std::string& family) {
    EXPECT_TRUE(OpenCache().ok());
    for (int i = 0; i < 3; ++i) {
      const std::string id(1, static_cast<char>('a' + i));
      EXPECT_TRUE(cache_->PutTask(Record(id, "key-" + id), Synthetic(i + 1)).ok());
    }
    EXPECT_TRUE(cache_->disk().Flush().ok());
    std::vector<std::filesystem::path> files = SstFilesOf(*cache_->disk().db(), family);
    cache_.reset();
    return files;
  }
  std::vector<std::string> Served() const {
    std::vector<std::string> ids;
    for (const auto& r : cache_->ListTasks()) ids.push_back(r.task_id);
    return ids;
  }
  void ExpectEveryTaskServesItsOwnKv() {
    for (int i = 0; i < 3; ++i) {
      const std::string id(1, static_cast<char>('a' + i));
      const uint64_t seed = static_cast<uint64_t>(i + 1);
      auto ctx = cache_->Acquire(
          "key-" + id, [&]() -> absl::StatusOr<EncodedContext> { return Synthetic(seed); });
      ASSERT_TRUE(ctx.ok()) << ctx.status();
      EXPECT_EQ(CompareContexts(**ctx, Synthetic(seed), TestBackend()), "") << id;
    }
  }
};

TEST_F(DamagedMetadataTest, FlippedByteInABlobHeaderDropsThatBlobOnly) {
  auto files = ThreeTasksThenFilesOf("kv_meta");
  ASSERT_FALSE(files.empty());
  ASSERT_TRUE(FlipByteInDataBlockHolding(files, "h/key-b")) << "no header of key-b on disk";
  ASSERT_TRUE(OpenCache().ok()) << "a damaged header must not stop the open";
  EXPECT_EQ(Served(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(cache_->Stats().corruptions_detected, 1u);
  EXPECT_TRUE(cache_->disk().HasBlob("key-a"));
  EXPECT_FALSE(cache_->disk().HasBlob("key-b"));  // dropped: re-encoded on first use
  EXPECT_TRUE(cache_->disk().HasBlob("key-c"));
  EXPECT_TRUE(Logged("entries of kv_meta salvaged into kv_meta.1"));
  ExpectEveryTaskServesItsOwnKv();
  EXPECT_EQ(cache_->Stats().encodes, 1u);  // key-b alone
  // Healed: the next open finds nothing damaged, and key-b was stored again.
  ASSERT_TRUE(OpenCache().ok());
  EXPECT_EQ(cache_->Stats().corruptions_detected, 0u);
  EXPECT_TRUE(cache_->disk().HasBlob("key-b"));
  ExpectEveryTaskServesItsOwnKv();
  EXPECT_EQ(cache_->Stats().encodes, 0u);
}

TEST_F(DamagedMetadataTest, DamagedIndexBlockOfTheBlobHeadersDropsTheirBlobs) {
  auto files = ThreeTasksThenFilesOf("kv_meta");
  ASSERT_EQ(files.size(), 1u);
  ASSERT_TRUE(FlipByteInIndexBlock(files.front()));
  ASSERT_TRUE(OpenCache().ok()) << OpenCache()
                                << "a damaged index block of re-creatable metadata must not stop "
                                   "the open";
  EXPECT_EQ(Served(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_GE(cache_->Stats().corruptions_detected, 1u);
  ExpectEveryTaskServesItsOwnKv();
  ASSERT_TRUE(OpenCache().ok());
  EXPECT_EQ(cache_->Stats().corruptions_detected, 0u);
  ExpectEveryTaskServesItsOwnKv();
  EXPECT_EQ(cache_->Stats().encodes, 0u);
}

TEST_F(DamagedMetadataTest, DamagedIndexBlockOfTheTasksFamilyIsSalvaged) {
  auto files = ThreeTasksThenFilesOf("tasks");
  ASSERT_EQ(files.size(), 1u);
  ASSERT_TRUE(FlipByteInIndexBlock(files.front()));
  ASSERT_TRUE(OpenCache().ok()) << OpenCache()
                                << "a damaged index block of the tasks family stopped the open";
  EXPECT_EQ(Served(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(cache_->QuarantinedTasks().empty());
  EXPECT_TRUE(Logged("entries of tasks salvaged into tasks.1"));
  ExpectEveryTaskServesItsOwnKv();
  EXPECT_EQ(cache_->Stats().encodes, 0u);
  ASSERT_TRUE(OpenCache().ok());
  EXPECT_EQ(Served(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(DamagedMetadataTest, DamagedReadyMarkerQuarantinesItsTaskAlone) {
  auto files = ThreeTasksThenFilesOf("tasks");
  ASSERT_TRUE(FlipByteInDataBlockHolding(files, "ready/b"));
  ASSERT_TRUE(OpenCache().ok()) << "a damaged ready marker stopped the open";
  EXPECT_EQ(Served(), (std::vector<std::string>{"a", "c"}));
  auto quarantined = cache_->QuarantinedTasks();
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_THAT(quarantined["b"], HasSubstr("ready marker was lost"));
  EXPECT_TRUE(cache_->DeleteTask("b").ok());
  ASSERT_TRUE(OpenCache().ok());
  EXPECT_EQ(Served(), (std::vector<std::string>{"a", "c"}));
  EXPECT_TRUE(cache_->QuarantinedTasks().empty());
}

TEST_F(DamagedMetadataTest, DamagedRecordUnderADamagedIndexIsQuarantinedNotLost) {
  auto files = ThreeTasksThenFilesOf("tasks");
  ASSERT_EQ(files.size(), 1u);
  ASSERT_TRUE(FlipByteInDataBlockHolding(files, "SPEC-MARKER-OF-TASK-c"));
  ASSERT_TRUE(FlipByteInIndexBlock(files.front()));
  ASSERT_TRUE(OpenCache().ok());
  EXPECT_EQ(Served(), (std::vector<std::string>{"a", "b"}));
  auto quarantined = cache_->QuarantinedTasks();
  ASSERT_EQ(quarantined.size(), 1u);
  EXPECT_THAT(quarantined["c"], HasSubstr("missing"));
}

}  // namespace
}  // namespace manyshot::testing

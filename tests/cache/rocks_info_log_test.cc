// RocksDB's informational LOG through TolerantInfoLog: lines land in the file, warnings reach the
// cache's log hook, and a disk that refuses every write (/dev/full) costs lines, never the process.
#include "cache/rocks_info_log.h"

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_on_disk_test.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const std::filesystem::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class RocksInfoLogTest : public CacheOnDiskTest {
 protected:
  LogFn Collect() {
    return [this](LogLevel level, const std::string& m) { forwarded_.push_back({level, m}); };
  }
  std::vector<std::pair<LogLevel, std::string>> forwarded_;
};

TEST_F(RocksInfoLogTest, WritesEveryLevelAndForwardsWarningsAndErrors) {
  const auto file = dir_ / "LOG";
  std::shared_ptr<rocksdb::Logger> log = TolerantInfoLog::Open(file, Collect());
  rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, log, "flushed %d files", 3);
  rocksdb::Log(rocksdb::InfoLogLevel::WARN_LEVEL, log, "stalling writes");
  rocksdb::Log(rocksdb::InfoLogLevel::ERROR_LEVEL, log, "no space: %s", "sst");
  const std::string text = ReadAll(file);
  EXPECT_THAT(text, HasSubstr("flushed 3 files\n"));
  EXPECT_THAT(text, HasSubstr("[WARN] stalling writes\n"));
  EXPECT_THAT(text, HasSubstr("[ERROR] no space: sst\n"));
  ASSERT_EQ(forwarded_.size(), 2u);
  EXPECT_EQ(forwarded_[0].first, LogLevel::kWarning);
  EXPECT_EQ(forwarded_[0].second, "rocksdb: stalling writes");
  EXPECT_EQ(forwarded_[1].first, LogLevel::kError);
  EXPECT_EQ(forwarded_[1].second, "rocksdb: no space: sst");
}

TEST_F(RocksInfoLogTest, AFullDiskDropsLinesAndKeepsGoing) {
  // /dev/full fails every write with ENOSPC, as a full data disk does.
  auto log = TolerantInfoLog::Open("/dev/full", Collect());
  std::shared_ptr<rocksdb::Logger> logger = log;
  for (int i = 0; i < 100; ++i) rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, logger, "%d", i);
  rocksdb::Log(rocksdb::InfoLogLevel::ERROR_LEVEL, logger, "still here");
  EXPECT_EQ(log->dropped_lines(), 101u);
  ASSERT_EQ(forwarded_.size(), 1u);
  EXPECT_EQ(forwarded_[0].second, "rocksdb: still here");
}

TEST_F(RocksInfoLogTest, AFileThatCannotBeOpenedDropsLines) {
  auto log = TolerantInfoLog::Open(dir_ / "missing" / "LOG", Collect());
  std::shared_ptr<rocksdb::Logger> logger = log;
  rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, logger, "lost");
  EXPECT_EQ(log->dropped_lines(), 1u);
}

TEST_F(RocksInfoLogTest, ALargeFileIsRotatedOnOpen) {
  const auto file = dir_ / "LOG";
  std::ofstream(file) << std::string(100, 'x');
  std::shared_ptr<rocksdb::Logger> log = TolerantInfoLog::Open(file, Collect(), 50);
  rocksdb::Log(rocksdb::InfoLogLevel::INFO_LEVEL, log, "fresh");
  EXPECT_EQ(ReadAll(file.string() + ".old"), std::string(100, 'x'));
  EXPECT_THAT(ReadAll(file), HasSubstr("fresh"));
  EXPECT_THAT(ReadAll(file), Not(HasSubstr("xxx")));
}

TEST_F(RocksInfoLogTest, TheCachesStoreLogsThroughIt) {
  Reopen();
  cache_.reset();
  std::vector<std::string> logs;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
    if (entry.path().filename() == "LOG") logs.push_back(ReadAll(entry.path()));
  }
  ASSERT_THAT(logs, ::testing::SizeIs(1));
  // RocksDB's header lines and its shutdown line went through this logger (no LOG.old.<time>
  // files: RocksDB's own logger rotates on every open).
  EXPECT_THAT(logs[0], HasSubstr("RocksDB version"));
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir_)) {
    EXPECT_THAT(entry.path().filename().string(), Not(HasSubstr("LOG.old.")));
  }
}

}  // namespace
}  // namespace manyshot::testing

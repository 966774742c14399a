// The shared tier on a real directory: files appear only whole, one writer wins a name, manifests
// and KV files detect every damaged byte, racing processes publish a gapless version history, a
// writer killed mid-write leaves nothing visible, and the garbage collector removes only what the
// grace period allows.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cache/shared/garbage_collector.h"
#include "cache/shared/manifests.h"
#include "cache/shared/shared_directory.h"
#include "cache/shared/shared_kv.h"
#include "gtest/gtest.h"

namespace manyshot::shared {
namespace {

using Clock = std::chrono::system_clock;

class SharedTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("shared_tier_", getpid(), "_", counter_++);
    std::filesystem::remove_all(root_);
    auto dir = SharedDirectory::Open(root_, "replica-a");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<SharedDirectory>(*std::move(dir));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  size_t TempFiles() const { return SharedDirectory::ListNames(dir_->temp_dir())->size(); }

  static int counter_;
  std::filesystem::path root_;
  std::unique_ptr<SharedDirectory> dir_;
};
int SharedTierTest::counter_ = 0;

absl::Status Write(FileSink& sink, std::string_view bytes) { return sink.Append(bytes); }

Manifest SampleManifest(uint64_t version) {
  Manifest m;
  m.tenant = "tenant-1";
  m.id = "sst2";
  m.version = version;
  m.kv_keys = {"0123456789abcdef0123456789abcdef"};
  m.body = absl::StrCat("record of version ", version);
  return m;
}

// A blob of `bytes` payload bytes (f32) in chunks of 64 bytes, with a payload whose checksums the
// header holds.
struct SampleBlob {
  BlobHeader header;
  std::string payload;
};
SampleBlob MakeBlob(const std::string& key, char fill) {
  SampleBlob blob;
  blob.header.format_version = 3;
  blob.header.key = key;
  blob.header.shape = {DType::kF32, 2, 5, 1, 4, 1, 5};  // 2*2*5*1*4*4 = 320 bytes
  blob.header.chunk_bytes = 64;
  blob.header.total_bytes = blob.header.shape.PayloadBytes();
  for (uint64_t i = 0; i < blob.header.total_bytes; ++i) blob.payload.push_back(fill + i % 7);
  for (uint64_t i = 0; i < blob.header.total_bytes; i += 64) {
    blob.header.chunk_checksums.push_back(
        ChunkChecksum(std::string_view(blob.payload).substr(i, 64)));
  }
  return blob;
}

void SetModified(const std::filesystem::path& path, Clock::time_point when) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch());
  timespec times[2];
  times[0].tv_sec = times[1].tv_sec = static_cast<time_t>(ns.count() / 1000000000);
  times[0].tv_nsec = times[1].tv_nsec = static_cast<long>(ns.count() % 1000000000);
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

TEST_F(SharedTierTest, ExclusivePublishKeepsTheFirstWriter) {
  const auto path = root_ / "names" / "one";
  ASSERT_TRUE(
      dir_->Publish(path, PublishMode::kIfAbsent, [](FileSink& s) { return Write(s, "first"); })
          .ok());
  const absl::Status second =
      dir_->Publish(path, PublishMode::kIfAbsent, [](FileSink& s) { return Write(s, "second"); });
  EXPECT_TRUE(absl::IsAlreadyExists(second)) << second;
  EXPECT_EQ(*SharedDirectory::ReadWhole(path), "first");
  ASSERT_TRUE(
      dir_->Publish(path, PublishMode::kReplace, [](FileSink& s) { return Write(s, "third"); })
          .ok());
  EXPECT_EQ(*SharedDirectory::ReadWhole(path), "third");
  EXPECT_EQ(TempFiles(), 0u);
}

TEST_F(SharedTierTest, AFailedWriteLeavesNothing) {
  const auto path = root_ / "names" / "failed";
  const absl::Status status = dir_->Publish(path, PublishMode::kIfAbsent, [](FileSink& s) {
    if (absl::Status w = s.Append("partial"); !w.ok()) return w;
    return absl::InternalError("encoder failed");
  });
  EXPECT_EQ(status.message(), "encoder failed");
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(TempFiles(), 0u);
}

TEST_F(SharedTierTest, AWriterKilledMidWriteLeavesNothingVisible) {
  const auto path = root_ / "names" / "killed";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto dir = SharedDirectory::Open(root_, "replica-b");
    (void)dir->Publish(path, PublishMode::kIfAbsent, [&](FileSink& s) {
      (void)s.Append(std::string(1 << 20, 'x'));
      (void)!write(ready[1], "r", 1);
      pause();  // killed here, mid-write
      return absl::OkStatus();
    });
    _exit(0);
  }
  char byte;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  close(ready[0]);
  close(ready[1]);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(TempFiles(), 1u);  // the crashed writer's, for the garbage collector
  EXPECT_TRUE(dir_->Publish(path, PublishMode::kIfAbsent,
                            [](FileSink& s) { return Write(s, "next writer"); })
                  .ok());
}

TEST_F(SharedTierTest, ManifestRoundTripsAndEveryDamagedByteIsDetected) {
  Manifest m = SampleManifest(7);
  m.tombstone = true;
  m.written_unix_ms = 1700000000000;
  m.writer = "host:1";
  const std::string bytes = SerializeManifest(m);
  auto parsed = ParseManifest(bytes);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->id, "sst2");
  EXPECT_EQ(parsed->version, 7u);
  EXPECT_TRUE(parsed->tombstone);
  EXPECT_EQ(parsed->kv_keys, m.kv_keys);
  EXPECT_EQ(parsed->body, m.body);
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x10);
    EXPECT_TRUE(absl::IsDataLoss(ParseManifest(damaged).status())) << "byte " << i;
  }
  EXPECT_TRUE(absl::IsDataLoss(ParseManifest(bytes.substr(0, bytes.size() - 1)).status()));
}

TEST_F(SharedTierTest, VersionsAdvanceAndTheLoserOfARaceIsTold) {
  const ManifestStore store(dir_.get());
  EXPECT_TRUE(absl::IsNotFound(store.Latest("tenant-1", "sst2").status()));
  ASSERT_TRUE(store.Publish(SampleManifest(1)).ok());
  EXPECT_TRUE(*store.IsCurrent("tenant-1", "sst2", 1));
  // Another replica saw version 1 too and loses the race for version 2.
  ASSERT_TRUE(store.Publish(SampleManifest(2)).ok());
  const absl::Status lost = store.Publish(SampleManifest(2));
  EXPECT_TRUE(absl::IsAborted(lost)) << lost;
  EXPECT_FALSE(*store.IsCurrent("tenant-1", "sst2", 1));
  auto latest = store.Latest("tenant-1", "sst2");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->version, 2u);
  EXPECT_EQ(latest->writer, "replica-a");
  EXPECT_EQ(latest->body, "record of version 2");
  auto listed = store.ListTenant("tenant-1");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].version, 2u);
  EXPECT_TRUE(store.ListTenant("tenant-2")->empty());
}

TEST_F(SharedTierTest, NamesThatAreNotSafePathsAreHashed) {
  EXPECT_EQ(PathComponentFor("sst2_task-1"), "sst2_task-1");
  for (const char* name : {"", "a/b", "..", "h-abc", "caf\xc3\xa9", "with space"}) {
    const std::string component = PathComponentFor(name);
    EXPECT_EQ(component.substr(0, 2), "h-") << name;
    EXPECT_EQ(component.size(), 34u) << name;
  }
  EXPECT_NE(PathComponentFor("a/b"), PathComponentFor("a/c"));
  const ManifestStore store(dir_.get());
  Manifest m = SampleManifest(1);
  m.tenant = "";  // no authentication: the empty tenant
  m.id = "../escape";
  ASSERT_TRUE(store.Publish(m).ok());
  EXPECT_EQ(store.Latest("", "../escape")->id, "../escape");
  EXPECT_EQ(store.ListTenant("")->size(), 1u);
}

// Processes that each read the newest version and publish the next one, retrying when they lose:
// every number from 1 to the total is published exactly once and every attempt that reported
// success is in the history (the compare-and-publish is linearizable across processes).
TEST_F(SharedTierTest, RacingProcessesPublishAGaplessHistory) {
  constexpr int kProcesses = 4;
  constexpr int kEach = 25;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto dir = SharedDirectory::Open(root_, absl::StrCat("replica-", p));
      const ManifestStore store(&*dir);
      for (int done = 0; done < kEach;) {
        auto latest = store.Latest("tenant-1", "counter");
        Manifest next = SampleManifest(latest.ok() ? latest->version + 1 : 1);
        next.id = "counter";
        next.body = absl::StrCat(p);
        const absl::Status s = store.Publish(next);
        if (s.ok()) ++done;
        if (!s.ok() && !absl::IsAborted(s)) _exit(2);
      }
      _exit(0);
    }
    children.push_back(child);
  }
  for (pid_t child : children) {
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const ManifestStore store(dir_.get());
  EXPECT_EQ(store.Latest("tenant-1", "counter")->version, uint64_t{kProcesses * kEach});
  std::map<std::string, int> per_writer;
  const auto dir = store.DirOf("tenant-1", "counter");
  for (uint64_t v = 1; v <= kProcesses * kEach; ++v) {
    auto bytes = SharedDirectory::ReadWhole(dir / VersionFileName(v));
    ASSERT_TRUE(bytes.ok()) << "version " << v << " missing";
    ++per_writer[ParseManifest(*bytes)->body];
  }
  for (int p = 0; p < kProcesses; ++p) EXPECT_EQ(per_writer[absl::StrCat(p)], kEach) << p;
}

TEST_F(SharedTierTest, KvFilesRoundTripAndAreNeverServedDamaged) {
  const SharedKvFiles kv(dir_.get());
  const SampleBlob blob = MakeBlob("00112233445566778899aabbccddeeff", 'a');
  const auto fill = [&](FileSink& s) { return s.Append(blob.payload); };
  bool published = false;
  ASSERT_TRUE(kv.Put(blob.header, fill, &published).ok());
  EXPECT_TRUE(published);
  ASSERT_TRUE(kv.Put(blob.header, fill, &published).ok());
  EXPECT_FALSE(published);  // the existing file is kept
  auto reader = kv.Open(blob.header.key);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::string read(blob.header.total_bytes, '\0');
  ASSERT_TRUE((*reader)->ReadAll(read.data()).ok());
  EXPECT_EQ(read, blob.payload);
  EXPECT_TRUE(absl::IsNotFound(kv.Open("ffffffffffffffffffffffffffffffff").status()));

  // Flip one byte anywhere in the file: the open or the read of that chunk fails.
  const auto path = kv.PathOf(blob.header.key);
  const std::string good = *SharedDirectory::ReadWhole(path);
  for (size_t i = 0; i < good.size(); i += 5) {
    std::string damaged = good;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x04);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    auto opened = kv.Open(blob.header.key);
    absl::Status status = opened.status();
    if (opened.ok()) status = (*opened)->ReadAll(read.data());
    EXPECT_TRUE(absl::IsDataLoss(status)) << "byte " << i << ": " << status;
  }
  // The replica that found the damage replaces the file atomically.
  ASSERT_TRUE(kv.Replace(blob.header, fill).ok());
  ASSERT_TRUE((*kv.Open(blob.header.key))->ReadAll(read.data()).ok());
  EXPECT_EQ(read, blob.payload);
}

TEST_F(SharedTierTest, AKvFileFiledUnderAnotherKeyOrTruncatedIsDataLoss) {
  const SharedKvFiles kv(dir_.get());
  const SampleBlob blob = MakeBlob("00112233445566778899aabbccddeeff", 'a');
  bool published = false;
  ASSERT_TRUE(kv.Put(
                    blob.header, [&](FileSink& s) { return s.Append(blob.payload); }, &published)
                  .ok());
  std::filesystem::copy_file(kv.PathOf(blob.header.key),
                             kv.PathOf("ffffffffffffffffffffffffffffffff"));
  EXPECT_TRUE(absl::IsDataLoss(kv.Open("ffffffffffffffffffffffffffffffff").status()));
  std::filesystem::resize_file(kv.PathOf(blob.header.key), 100);
  EXPECT_TRUE(absl::IsDataLoss(kv.Open(blob.header.key).status()));
  // A payload shorter than its header says is refused before anything is published.
  const SampleBlob other = MakeBlob("0000000000000000000000000000000a", 'b');
  const absl::Status short_write = kv.Put(
      other.header, [&](FileSink& s) { return s.Append("short"); }, &published);
  EXPECT_FALSE(short_write.ok());
  EXPECT_FALSE(kv.Exists(other.header.key));
}

TEST_F(SharedTierTest, GarbageCollectionRemovesOnlyWhatTheGracePeriodAllows) {
  const ManifestStore store(dir_.get());
  const SharedKvFiles kv(dir_.get());
  const Clock::time_point now = Clock::now();
  const Clock::time_point old = now - std::chrono::hours(2);
  const GcOptions options{std::chrono::minutes(30), false};
  bool published = false;
  auto put_kv = [&](const std::string& key, Clock::time_point when) {
    const SampleBlob blob = MakeBlob(key, 'k');
    ASSERT_TRUE(kv.Put(
                      blob.header, [&](FileSink& s) { return s.Append(blob.payload); }, &published)
                    .ok());
    SetModified(kv.PathOf(key), when);
  };
  auto publish = [&](const std::string& id, uint64_t version, const std::string& key,
                     Clock::time_point when) {
    Manifest m = SampleManifest(version);
    m.id = id;
    m.kv_keys = {key};
    ASSERT_TRUE(store.Publish(m).ok());
    SetModified(store.DirOf(m.tenant, id) / VersionFileName(version), when);
  };
  const std::string k_old_v1(32, '1'), k_v2(32, '2'), k_young_v1(32, '3'), k_young_v2(32, '4'),
      k_orphan_old(32, '5'), k_orphan_young(32, '6');
  // "settled": replaced two hours ago; "recent": replaced a minute ago (a replica may still be
  // restoring version 1).
  put_kv(k_old_v1, old);
  put_kv(k_v2, old);
  publish("settled", 1, k_old_v1, old);
  publish("settled", 2, k_v2, old);
  put_kv(k_young_v1, old);
  put_kv(k_young_v2, now);
  publish("recent", 1, k_young_v1, old);
  publish("recent", 2, k_young_v2, now - std::chrono::minutes(1));
  put_kv(k_orphan_old, old);    // a deleted task's KV
  put_kv(k_orphan_young, now);  // written by a create that has not published yet
  std::ofstream(dir_->temp_dir() / "crashed.tmp") << "x";
  SetModified(dir_->temp_dir() / "crashed.tmp", old);
  std::ofstream(dir_->temp_dir() / "in-flight.tmp") << "x";

  auto dry = CollectGarbage(*dir_, GcOptions{options.grace, true}, now);
  ASSERT_TRUE(dry.ok()) << dry.status();
  EXPECT_EQ(dry->versions_removed, 1u);
  EXPECT_EQ(dry->kv_files_removed, 2u);
  EXPECT_TRUE(kv.Exists(k_orphan_old));  // a dry run removes nothing

  auto report = CollectGarbage(*dir_, options, now);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->problems.empty());
  EXPECT_EQ(report->names, 2u);
  EXPECT_EQ(report->versions_removed, 1u);
  EXPECT_FALSE(std::filesystem::exists(store.DirOf("tenant-1", "settled") / VersionFileName(1)));
  EXPECT_TRUE(std::filesystem::exists(store.DirOf("tenant-1", "recent") / VersionFileName(1)));
  EXPECT_EQ(report->kv_files_removed, 2u);  // version 1's of "settled", and the old orphan
  EXPECT_FALSE(kv.Exists(k_old_v1));
  EXPECT_FALSE(kv.Exists(k_orphan_old));
  for (const auto& key : {k_v2, k_young_v1, k_young_v2, k_orphan_young}) {
    EXPECT_TRUE(kv.Exists(key)) << key;
  }
  EXPECT_EQ(report->temp_files_removed, 1u);
  EXPECT_TRUE(std::filesystem::exists(dir_->temp_dir() / "in-flight.tmp"));
  EXPECT_EQ(store.Latest("tenant-1", "settled")->version, 2u);
}

TEST_F(SharedTierTest, ADamagedManifestStopsTheKvSweep) {
  const ManifestStore store(dir_.get());
  const SharedKvFiles kv(dir_.get());
  const Clock::time_point old = Clock::now() - std::chrono::hours(2);
  const SampleBlob blob = MakeBlob(std::string(32, '7'), 'z');
  bool published = false;
  ASSERT_TRUE(kv.Put(
                    blob.header, [&](FileSink& s) { return s.Append(blob.payload); }, &published)
                  .ok());
  SetModified(kv.PathOf(blob.header.key), old);
  Manifest m = SampleManifest(1);
  m.kv_keys = {blob.header.key};
  ASSERT_TRUE(store.Publish(m).ok());
  const auto version = store.DirOf(m.tenant, m.id) / VersionFileName(1);
  std::string bytes = *SharedDirectory::ReadWhole(version);
  bytes[20] ^= 1;
  std::ofstream(version, std::ios::binary | std::ios::trunc) << bytes;
  auto report = CollectGarbage(*dir_, GcOptions{}, Clock::now());
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->kv_files_removed, 0u);
  EXPECT_TRUE(kv.Exists(blob.header.key));
  ASSERT_EQ(report->problems.size(), 2u);
  EXPECT_NE(report->problems[0].find("checksum"), std::string::npos) << report->problems[0];
}

}  // namespace
}  // namespace manyshot::shared

// `manyshot-server --gc` as a CronJob runs it: the real binary on a shared directory laid out by
// the shared tier's own writers. It removes what the grace period allows and nothing else, and
// the encoding markers of replicas that died mid-encode; reports it as one JSON line, removes
// nothing in a dry run, refuses bad options with exit 2 and a missing directory with exit 1
// (creating nothing).
#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "cache/shared/encoding_markers.h"
#include "cache/shared/manifests.h"
#include "cache/shared/shared_directory.h"
#include "cache/shared/shared_kv.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/harness/server_under_test.h"
#include "testing/harness/subprocess.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::system_clock;

void SetModified(const fs::path& path, Clock::time_point when) {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(when.time_since_epoch());
  struct timespec times[2] = {{seconds.count(), 0}, {seconds.count(), 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

// A small valid KV file of `key` (f32, one chunk), published and backdated to `when`.
void PutKv(const shared::SharedKvFiles& kv, const std::string& key, Clock::time_point when) {
  BlobHeader header;
  header.format_version = 3;
  header.key = key;
  header.shape = {DType::kF32, 1, 1, 1, 1, 1, 1};
  header.chunk_bytes = 64;
  header.total_bytes = header.shape.PayloadBytes();
  const std::string payload(header.total_bytes, 'k');
  header.chunk_checksums = {ChunkChecksum(payload)};
  bool published = false;
  ASSERT_TRUE(
      kv.Put(
            header, [&](shared::FileSink& sink) { return sink.Append(payload); }, &published)
          .ok());
  SetModified(kv.PathOf(key), when);
}

class SharedGcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto dir = shared::SharedDirectory::Open(root_.path() / "shared", "test-writer");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<shared::SharedDirectory>(*std::move(dir));
  }
  CommandResult Gc(const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {ServerBinary(), "--gc"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return RunCommand(argv, root_.path());
  }
  std::string SharedFlag() const { return "--shared_dir=" + dir_->root().string(); }

  TempDir root_;
  std::unique_ptr<shared::SharedDirectory> dir_;
};

TEST_F(SharedGcTest, RemovesWhatTheGracePeriodAllowsAndReportsIt) {
  const shared::ManifestStore store(dir_.get());
  const shared::SharedKvFiles kv(dir_.get());
  const Clock::time_point old = Clock::now() - std::chrono::hours(2);
  const std::string k_v1(32, 'a'), k_v2(32, 'b'), k_orphan(32, 'c'), k_young(32, 'd');
  PutKv(kv, k_v1, old);
  PutKv(kv, k_v2, old);
  PutKv(kv, k_orphan, old);          // a deleted task's KV
  PutKv(kv, k_young, Clock::now());  // a create that has not published its manifest yet
  for (uint64_t version : {1, 2}) {
    shared::Manifest m;
    m.tenant = "t";
    m.id = "sst2";
    m.version = version;
    m.kv_keys = {version == 1 ? k_v1 : k_v2};
    ASSERT_TRUE(store.Publish(m).ok());
    SetModified(store.DirOf("t", "sst2") / shared::VersionFileName(version), old);
  }

  CommandResult dry = Gc({SharedFlag(), "--gc_grace_seconds=600", "--gc_dry_run"});
  ASSERT_EQ(dry.exit_status, 0) << dry.err;
  const auto dry_report = nlohmann::json::parse(dry.out);
  EXPECT_EQ(dry_report["dry_run"], true);
  EXPECT_EQ(dry_report["versions_removed"], 1);
  EXPECT_EQ(dry_report["kv_files_removed"], 2);
  EXPECT_TRUE(kv.Exists(k_v1) && kv.Exists(k_orphan));

  CommandResult run = Gc({SharedFlag(), "--gc_grace_seconds=600"});
  ASSERT_EQ(run.exit_status, 0) << run.err;
  const auto report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["names"], 1);
  EXPECT_EQ(report["versions_removed"], 1);
  EXPECT_EQ(report["kv_files_removed"], 2);
  EXPECT_TRUE(report["problems"].empty());
  EXPECT_FALSE(kv.Exists(k_v1));
  EXPECT_FALSE(kv.Exists(k_orphan));
  EXPECT_TRUE(kv.Exists(k_v2));
  EXPECT_TRUE(kv.Exists(k_young));
  EXPECT_EQ(store.Latest("t", "sst2")->version, 2u);
}

TEST_F(SharedGcTest, RemovesTheEncodingMarkersOfDeadReplicas) {
  // Markers as replicas write them: one of a replica that died mid-encode 20 minutes ago, one of
  // a replica encoding now, for the same id; a dead one alone under another id.
  const auto marker_of = [&](const std::string& writer, const std::string& id) {
    auto dir = shared::SharedDirectory::Open(dir_->root(), writer);
    EXPECT_TRUE(dir.ok()) << dir.status();
    shared::EncodingMarkers(&*dir).Mark("t", id);
    return shared::EncodingMarkers(dir_.get()).root() / "t" / id / writer;
  };
  const Clock::time_point dead =
      Clock::now() - shared::kEncodingMarkerLife - std::chrono::minutes(5);
  const fs::path stale = marker_of("dead-replica", "sst2");
  const fs::path live = marker_of("live-replica", "sst2");
  const fs::path alone = marker_of("dead-replica", "other");
  SetModified(stale, dead);
  SetModified(alone, dead);
  const shared::EncodingMarkers markers(dir_.get());
  ASSERT_TRUE(markers.AnyLive("t", "sst2"));
  ASSERT_FALSE(markers.AnyLive("t", "other"));  // readers already ignore a dead one

  // The markers' own age decides, not the (longer) grace period of manifests and KV files.
  CommandResult dry = Gc({SharedFlag(), "--gc_grace_seconds=86400", "--gc_dry_run"});
  ASSERT_EQ(dry.exit_status, 0) << dry.err;
  EXPECT_EQ(nlohmann::json::parse(dry.out)["encoding_markers_removed"], 2);
  EXPECT_TRUE(fs::exists(stale) && fs::exists(alone));

  CommandResult run = Gc({SharedFlag(), "--gc_grace_seconds=86400"});
  ASSERT_EQ(run.exit_status, 0) << run.err;
  EXPECT_EQ(nlohmann::json::parse(run.out)["encoding_markers_removed"], 2);
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_FALSE(fs::exists(alone));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(markers.AnyLive("t", "sst2"));

  // The directory the dead marker left empty goes once it has stayed unchanged as long.
  ASSERT_TRUE(fs::is_directory(alone.parent_path()));
  SetModified(alone.parent_path(), dead);
  CommandResult again = Gc({SharedFlag(), "--gc_grace_seconds=86400"});
  ASSERT_EQ(again.exit_status, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["encoding_markers_removed"], 0);
  EXPECT_FALSE(fs::exists(alone.parent_path()));
  EXPECT_TRUE(fs::exists(live));
}

TEST_F(SharedGcTest, RefusesBadOptionsAndCreatesNoDirectory) {
  CommandResult no_dir = Gc({});
  EXPECT_EQ(no_dir.exit_status, 2);
  EXPECT_NE(no_dir.err.find("--shared_dir"), std::string::npos) << no_dir.err;

  CommandResult negative = Gc({SharedFlag(), "--gc_grace_seconds=-1"});
  EXPECT_EQ(negative.exit_status, 2);
  EXPECT_NE(negative.err.find("--gc_grace_seconds"), std::string::npos) << negative.err;

  const fs::path missing = root_.path() / "not-mounted";
  CommandResult absent = Gc({"--shared_dir=" + missing.string()});
  EXPECT_EQ(absent.exit_status, 1);
  EXPECT_NE(absent.err.find("not a directory"), std::string::npos) << absent.err;
  EXPECT_FALSE(fs::exists(missing));
}

}  // namespace
}  // namespace manyshot::testing

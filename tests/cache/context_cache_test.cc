// ContextCache over a real RocksDB in a temp dir: bit-exact round trips (f32, bf16), sharing,
// corruption (a flipped byte in a stored chunk, in a header, in a file on disk; a missing chunk;
// a failed shape check) detected, not served and re-encoded; disk budget LRU; recovery of staged
// writes and half-written tasks; eager restore; single-flight encoding.
#include "cache/context_cache.h"

#include <linux/capability.h>
#include <rocksdb/db.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>

#include "cache/blob_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

using ::testing::HasSubstr;

// One layer pair = 2 * 300 * 2 * 16 * 4 = 76800 bytes per layer; with 4 KB chunks, many chunks.
constexpr int64_t kLayers = 2, kTokens = 300, kHeads = 2, kDim = 16;

// On the CPU backend, on the CUDA backend's code over the SIMT emulator ("simt-cuda", whose
// restores go through pinned staging into device memory), and on a GPU ("cuda").
class ContextCacheTest : public ::testing::TestWithParam<std::string> {
 protected:
  Backend& backend() { return *NamedTestBackend(GetParam(), nullptr); }
  void SetUp() override {
    dir_ = FreshTempDir("cc");
    const std::string why = BackendUnavailable(GetParam());
    if (!why.empty()) GTEST_SKIP() << why;
    options_.chunk_bytes = 4096;
    options_.log = [this](LogLevel, const std::string& m) { log_.push_back(m); };
  }
  void TearDown() override {
    cache_.reset();
    std::filesystem::remove_all(dir_);
  }
  void Reopen() {
    cache_.reset();
    auto c = ContextCache::Open(dir_, options_, backend());
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = *std::move(c);
  }
  EncodedContext Synthetic(uint64_t seed) {
    return SyntheticContext(backend(), seed, kLayers, kTokens, kHeads, kDim);
  }
  static TaskRecord Record(const std::string& id, const std::string& key) {
    return {id, "tenant-a", "spec-of-" + id, "hash-" + id, key, 1700000000000000};
  }
  // An encoder that counts its calls and returns the synthetic context of `seed`.
  EncodeFn Encoder(uint64_t seed) {
    return [this, seed]() -> absl::StatusOr<EncodedContext> {
      ++encoder_calls_;
      return Synthetic(seed);
    };
  }
  static EncodeFn NoEncoder() {
    return []() -> absl::StatusOr<EncodedContext> {
      ADD_FAILURE() << "unexpected encode";
      return absl::InternalError("unexpected encode");
    };
  }
  rocksdb::DB* db() { return cache_->disk().db(); }
  void FlipByteOfValue(rocksdb::ColumnFamilyHandle* cf, const std::string& key, size_t at) {
    std::string value;
    ASSERT_TRUE(db()->Get(rocksdb::ReadOptions(), cf, key, &value).ok());
    value[at % value.size()] ^= 0x10;
    ASSERT_TRUE(db()->Put(rocksdb::WriteOptions(), cf, key, value).ok());
  }
  // Flips one bit of byte `at` of the KV file of `key`.
  void FlipByteOfFile(const std::string& key, uint64_t at) {
    const std::filesystem::path path = KvFile(key);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.is_open()) << path;
    f.seekg(static_cast<std::streamoff>(at));
    char c;
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  }
  std::filesystem::path KvFile(const std::string& key) const {
    return dir_ / "kv_files" / (key + ".kv");
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
  int encoder_calls_ = 0;
};

TEST_P(ContextCacheTest, F32RoundTripIsBitExactAcrossReopen) {
  Reopen();
  const EncodedContext original = Synthetic(1);
  ASSERT_TRUE(cache_->PutTask(Record("t1", "k1"), original).ok());
  const CacheStats written = cache_->Stats();
  EXPECT_EQ(written.disk_bytes, original.bytes());
  EXPECT_EQ(written.disk_entries, 1u);
  EXPECT_EQ(written.memory_bytes, original.bytes());
  Reopen();
  ASSERT_EQ(cache_->ListTasks().size(), 1u);
  EXPECT_EQ(cache_->ListTasks()[0], Record("t1", "k1"));
  auto pinned = cache_->Acquire("k1", NoEncoder());
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(CompareContexts(**pinned, original, backend()), "");
  EXPECT_EQ((*pinned)->groups, original.groups);
  EXPECT_EQ((*pinned)->group_length, original.group_length);
  const CacheStats s = cache_->Stats();
  EXPECT_EQ(s.encodes, 0u);
  EXPECT_EQ(s.disk_hits, 1u);
  EXPECT_EQ(s.loads, 1u);
  EXPECT_EQ(s.load_bytes, original.bytes());
  EXPECT_EQ(s.memory_bytes, original.bytes());
  // Second use: a memory hit.
  pinned->Release();
  ASSERT_TRUE(cache_->Acquire("k1", NoEncoder()).ok());
  EXPECT_EQ(cache_->Stats().memory_hits, 1u);
}

TEST_P(ContextCacheTest, Bf16StorageHalvesBytesAndRoundTripsBitExact) {
  options_.kv_dtype = DType::kBF16;
  Reopen();
  const EncodedContext original = Synthetic(2);
  const EncodedContext expected =
      *ToF32(*ConvertContext(original, DType::kBF16, backend()), backend());
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), original).ok());
  EXPECT_EQ(cache_->Stats().disk_bytes, original.bytes() / 2);
  {
    // What memory holds before a restart is what comes back after it.
    auto before = cache_->Acquire("k", NoEncoder());
    ASSERT_TRUE(before.ok());
    EXPECT_EQ(CompareContexts(**before, expected, backend()), "");
  }
  Reopen();
  auto after = cache_->Acquire("k", NoEncoder());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ((*after)->kv.k[0].dtype(), DType::kF32);
  EXPECT_EQ(CompareContexts(**after, expected, backend()), "");
  after->Release();
  // Memory may hold the storage dtype too: half the memory bytes.
  options_.memory_holds_storage_dtype = true;
  Reopen();
  auto narrow = cache_->Acquire("k", NoEncoder());
  ASSERT_TRUE(narrow.ok());
  EXPECT_EQ((*narrow)->kv.k[0].dtype(), DType::kBF16);
  EXPECT_EQ(cache_->Stats().memory_bytes, original.bytes() / 2);
  EXPECT_EQ(CompareContexts(*ToF32(**narrow, backend()), expected, backend()), "");
}

// A write to a restored context never reaches the file, and a context stays whole after its file
// is unlinked by a delete.
TEST_P(ContextCacheTest, ARestoreIsPrivateAndOutlivesItsFile) {
  Reopen();
  const EncodedContext original = Synthetic(3);
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), original).ok());
  Reopen();
  {
    auto pinned = cache_->Acquire("k", NoEncoder());
    ASSERT_TRUE(pinned.ok()) << pinned.status();
    (*pinned)->kv.k[0].data<float>()[0] = 12345.0f;  // the memory copy only
  }
  Reopen();
  auto pinned = cache_->Acquire("k", NoEncoder());
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(CompareContexts(**pinned, original, backend()), "");
  EXPECT_EQ(cache_->Stats().corruptions_detected, 0u);
  ASSERT_TRUE(cache_->DeleteTask("t").ok());
  EXPECT_FALSE(std::filesystem::exists(KvFile("k")));
  EXPECT_EQ(CompareContexts(**pinned, original, backend()), "");  // still whole
}

// What is served is what was verified: a restore copies the file into memory, so a later change
// of the file on disk (through the page cache, as a page dropped and read again would arrive)
// never reaches a restored context.
TEST_P(ContextCacheTest, ARestoredContextIsACopyThatALaterChangeOfItsFileCannotReach) {
  Reopen();
  const EncodedContext original = Synthetic(5);
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), original).ok());
  Reopen();
  auto restored = cache_->Acquire("k", NoEncoder());
  ASSERT_TRUE(restored.ok()) << restored.status();
  {
    std::fstream file(KvFile("k"), std::ios::in | std::ios::out | std::ios::binary);
    const std::string junk(64, '\x7f');
    file.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  EXPECT_EQ(CompareContexts(**restored, original, backend()), "");
}

TEST_P(ContextCacheTest, EqualTasksShareOneEntry) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("a", "k"), Synthetic(3)).ok());
  auto b = cache_->CreateTask(Record("b", "k"), NoEncoder());  // shares: no encode
  ASSERT_TRUE(b.ok()) << b.status();
  b->Release();
  CacheStats s = cache_->Stats();
  EXPECT_EQ(s.tasks, 2u);
  EXPECT_EQ(s.disk_entries, 1u);
  EXPECT_EQ(s.memory_entries, 1u);
  EXPECT_EQ(cache_->disk().TasksUsingKey("k"), (std::vector<std::string>{"a", "b"}));
  ASSERT_TRUE(cache_->DeleteTask("a").ok());
  s = cache_->Stats();
  EXPECT_EQ(s.disk_entries, 1u);  // b still uses it
  EXPECT_EQ(s.memory_entries, 1u);
  Reopen();
  ASSERT_EQ(cache_->ListTasks().size(), 1u);
  ASSERT_TRUE(cache_->Acquire("k", NoEncoder()).ok());
  ASSERT_TRUE(cache_->DeleteTask("b").ok());
  s = cache_->Stats();
  EXPECT_EQ(s.tasks, 0u);
  EXPECT_EQ(s.disk_entries, 0u);
  EXPECT_EQ(s.disk_bytes, 0u);
  EXPECT_EQ(s.memory_entries, 0u);
  EXPECT_EQ(s.memory_bytes, 0u);
  EXPECT_TRUE(absl::IsNotFound(cache_->DeleteTask("b")));
}

TEST_P(ContextCacheTest, CreateTaskEncodesOnceAndStoresAtomically) {
  Reopen();
  auto pinned = cache_->CreateTask(Record("t", "k"), Encoder(4));
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(encoder_calls_, 1);
  EXPECT_EQ(CompareContexts(**pinned, Synthetic(4), backend()), "");
  pinned->Release();
  EXPECT_EQ(cache_->Stats().re_encodes, 0u);
  Reopen();
  ASSERT_TRUE(cache_->Acquire("k", NoEncoder()).ok());
}

TEST_P(ContextCacheTest, FlippedByteInAStoredChunkIsDetectedNotServedAndReEncoded) {
  Reopen();
  const EncodedContext original = Synthetic(5);
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), original).ok());
  Reopen();  // memory tier empty
  FlipByteOfFile("k", 7 * options_.chunk_bytes + 1234);
  auto pinned = cache_->Acquire("k", Encoder(5));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(CompareContexts(**pinned, original, backend()), "");  // the re-encoded one
  CacheStats s = cache_->Stats();
  EXPECT_EQ(encoder_calls_, 1);
  EXPECT_EQ(s.corruptions_detected, 1u);
  EXPECT_EQ(s.encodes, 1u);
  EXPECT_EQ(s.re_encodes, 1u);
  EXPECT_EQ(s.disk_hits, 0u);
  EXPECT_TRUE(Logged("chunk 7 checksum mismatch")) << ::testing::PrintToString(log_);
  pinned->Release();
  // The re-encoded blob was stored: the next process loads it without encoding.
  Reopen();
  auto again = cache_->Acquire("k", NoEncoder());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(CompareContexts(**again, original, backend()), "");
  EXPECT_EQ(cache_->Stats().corruptions_detected, 0u);
}

TEST_P(ContextCacheTest, DamagedHeaderIsDetectedAtOpen) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), Synthetic(6)).ok());
  FlipByteOfValue(cache_->disk().meta_family(), "h/k", 20);
  Reopen();
  EXPECT_EQ(cache_->Stats().corruptions_detected, 1u);
  EXPECT_EQ(cache_->Stats().disk_entries, 0u);
  EXPECT_EQ(cache_->ListTasks().size(), 1u);  // the task stays; its KV is re-encoded on demand
  auto pinned = cache_->Acquire("k", Encoder(6));
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(encoder_calls_, 1);
  EXPECT_EQ(cache_->Stats().re_encodes, 1u);
  EXPECT_EQ(CompareContexts(**pinned, Synthetic(6), backend()), "");
}

TEST_P(ContextCacheTest, TruncatedFileAndFailedShapeCheckAreCorruption) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), Synthetic(7)).ok());
  Reopen();
  std::filesystem::resize_file(KvFile("k"), std::filesystem::file_size(KvFile("k")) - 100);
  ASSERT_TRUE(cache_->Acquire("k", Encoder(7)).ok());
  EXPECT_EQ(cache_->Stats().corruptions_detected, 1u);
  EXPECT_TRUE(Logged("bytes, expected")) << ::testing::PrintToString(log_);
  Reopen();
  // A blob whose shape does not match the task (the validate hook, IclTask::CheckContext).
  auto rejecting = [](const EncodedContext&) { return absl::DataLossError("tokens mismatch"); };
  ASSERT_TRUE(cache_->Acquire("k", Encoder(7), rejecting).ok());
  EXPECT_EQ(cache_->Stats().corruptions_detected, 1u);
  EXPECT_EQ(encoder_calls_, 2);
  EXPECT_TRUE(Logged("tokens mismatch"));
}

// A KV file whose size no longer matches its header (a torn copy, a file from elsewhere): found by
// Open() itself, before any read; the task stays and its KV is re-encoded on demand.
TEST_P(ContextCacheTest, AKvFileOfTheWrongSizeIsCorruptionFoundAtOpen) {
  Reopen();
  const EncodedContext original = Synthetic(8);
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), original).ok());
  cache_.reset();
  {
    std::ofstream f(KvFile("k"), std::ios::app | std::ios::binary);
    f << "trailing bytes";
  }
  Reopen();
  EXPECT_EQ(cache_->Stats().corruptions_detected, 1u);
  EXPECT_EQ(cache_->Stats().disk_entries, 0u);
  EXPECT_FALSE(std::filesystem::exists(KvFile("k")));
  EXPECT_TRUE(Logged("expected")) << ::testing::PrintToString(log_);
  auto pinned = cache_->Acquire("k", Encoder(8));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(CompareContexts(**pinned, original, backend()), "");
  EXPECT_EQ(encoder_calls_, 1);
}

// Format 2 kept payloads as chunks inside RocksDB. Such a blob is dropped at open (logged, counted,
// its chunks deleted) and its task, which stays, re-encodes on first use under format 3.
TEST_P(ContextCacheTest, AFormatTwoBlobIsDroppedAtOpenAndItsTaskReEncodes) {
  Reopen();
  const EncodedContext original = Synthetic(9);
  ASSERT_TRUE(cache_->PutTask(Record("t", "k"), original).ok());
  // Rewrite it as format 2 left it: the header says version 2, the payload is in "kv" chunks.
  std::string header_bytes;
  ASSERT_TRUE(
      db()->Get(rocksdb::ReadOptions(), cache_->disk().meta_family(), "h/k", &header_bytes).ok());
  auto header = ParseBlobHeader(header_bytes);
  ASSERT_TRUE(header.ok()) << header.status();
  header->format_version = 2;
  ASSERT_TRUE(db()->Put(rocksdb::WriteOptions(), cache_->disk().meta_family(), "h/k",
                        SerializeBlobHeader(*header))
                  .ok());
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_TRUE(db()->Put(rocksdb::WriteOptions(), cache_->disk().kv_family(), ChunkKey("k", i),
                          std::string(4096, 'x'))
                    .ok());
  }
  cache_.reset();
  std::filesystem::remove(KvFile("k"));
  Reopen();
  EXPECT_EQ(cache_->disk().stats().old_format_blobs_dropped, 1u);
  EXPECT_EQ(cache_->Stats().corruptions_detected, 0u);
  EXPECT_EQ(cache_->Stats().disk_entries, 0u);
  EXPECT_TRUE(Logged("is in format 2")) << ::testing::PrintToString(log_);
  {
    std::unique_ptr<rocksdb::Iterator> it(
        db()->NewIterator(rocksdb::ReadOptions(), cache_->disk().kv_family()));
    it->SeekToFirst();
    EXPECT_FALSE(it->Valid()) << "format 2 chunks left behind";
  }
  ASSERT_EQ(cache_->ListTasks().size(), 1u);
  auto pinned = cache_->Acquire("k", Encoder(9));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(CompareContexts(**pinned, original, backend()), "");
  EXPECT_EQ(cache_->Stats().re_encodes, 1u);
  pinned->Release();
  Reopen();
  ASSERT_TRUE(cache_->Acquire("k", NoEncoder()).ok());  // stored again, as format 3
}

TEST_P(ContextCacheTest, DiskBudgetEvictsLeastRecentlyUsedBlobsAndKeepsTasks) {
  const size_t blob = static_cast<size_t>(2 * kLayers * kTokens * kHeads * kDim * 4);
  options_.disk_budget_bytes = 2 * blob + blob / 2;  // room for two
  options_.memory_budget_bytes = 0;                  // every Acquire goes to disk
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("a", "ka"), Synthetic(10)).ok());
  ASSERT_TRUE(cache_->PutTask(Record("b", "kb"), Synthetic(11)).ok());
  ASSERT_TRUE(cache_->Acquire("ka", NoEncoder()).ok());  // a is now more recent than b
  EXPECT_EQ(cache_->disk().BlobsByRecency(), (std::vector<std::string>{"kb", "ka"}));
  ASSERT_TRUE(cache_->PutTask(Record("c", "kc"), Synthetic(12)).ok());  // evicts b
  EXPECT_EQ(cache_->disk().BlobsByRecency(), (std::vector<std::string>{"ka", "kc"}));
  CacheStats s = cache_->Stats();
  EXPECT_EQ(s.disk_evictions, 1u);
  EXPECT_EQ(s.disk_bytes, 2 * blob);
  EXPECT_EQ(s.tasks, 3u);  // b's task record stays
  // The LRU order survives a restart (access times are persisted).
  Reopen();
  EXPECT_EQ(cache_->disk().BlobsByRecency(), (std::vector<std::string>{"ka", "kc"}));
  // b's KV is re-encoded on demand and stored again, evicting the least recent (a).
  auto b = cache_->Acquire("kb", Encoder(11));
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(CompareContexts(**b, Synthetic(11), backend()), "");
  s = cache_->Stats();
  EXPECT_EQ(s.re_encodes, 1u);
  EXPECT_EQ(s.disk_evictions, 1u);
  EXPECT_EQ(cache_->disk().BlobsByRecency(), (std::vector<std::string>{"kc", "kb"}));
  EXPECT_EQ(s.disk_bytes, 2 * blob);
}

TEST_P(ContextCacheTest, UncommittedKvFilesAndRecordWithoutReadyMarkerAreNeverVisible) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("good", "kg"), Synthetic(13)).ok());
  // What a crash in the middle of a write leaves: a temporary file, and a renamed file whose
  // header batch never committed.
  {
    std::ofstream(dir_ / "kv_files" / "kx.kv.tmp") << std::string(4096, 'x');
    std::ofstream(KvFile("ky")) << std::string(4096, 'y');
  }
  // And a task record whose batch never got its ready marker (impossible with one batch, but the
  // reader must not depend on that).
  auto* tasks = cache_->disk().tasks_family();
  ASSERT_TRUE(db()->Put(rocksdb::WriteOptions(), tasks, "t/ghost",
                        SerializeTaskRecord(Record("ghost", "kg")))
                  .ok());
  Reopen();
  tasks = cache_->disk().tasks_family();
  std::string ghost;
  EXPECT_TRUE(db()->Get(rocksdb::ReadOptions(), tasks, "t/ghost", &ghost).IsNotFound());
  EXPECT_EQ(cache_->disk().stats().staged_writes_recovered, 1u);
  EXPECT_FALSE(std::filesystem::exists(dir_ / "kv_files" / "kx.kv.tmp"));
  EXPECT_FALSE(std::filesystem::exists(KvFile("ky")));
  EXPECT_TRUE(std::filesystem::exists(KvFile("kg")));
  ASSERT_EQ(cache_->ListTasks().size(), 1u);
  EXPECT_EQ(cache_->ListTasks()[0].task_id, "good");
  EXPECT_TRUE(Logged("discarding uncommitted KV file kx.kv.tmp"));
}

// Entries nobody but the server should put among the KV files: a non-empty directory where a
// temporary file goes, one where a committed blob's file is, and a file whose name holds a newline.
// The directories are removed (they would block those writes on every restart), the blob whose
// file was a directory re-encodes once and then stays, and the log escapes the odd name.
TEST_P(ContextCacheTest, DirectoriesAndOddNamesAmongTheKvFilesAreRemovedOnce) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("kept", "kk"), Synthetic(21)).ok());
  ASSERT_TRUE(cache_->PutTask(Record("blocked", "kb"), Synthetic(22)).ok());
  cache_.reset();
  std::filesystem::create_directories(dir_ / "kv_files" / "kt.kv.tmp" / "inner");
  std::ofstream(dir_ / "kv_files" / "kt.kv.tmp" / "inner" / "f") << "x";
  std::filesystem::remove(KvFile("kb"));
  std::filesystem::create_directories(KvFile("kb") / "inner");
  std::ofstream(dir_ / "kv_files" / "odd\nforged log line") << "x";
  Reopen();
  EXPECT_FALSE(std::filesystem::exists(dir_ / "kv_files" / "kt.kv.tmp"));
  EXPECT_FALSE(std::filesystem::is_directory(KvFile("kb")));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "kv_files" / "odd\nforged log line"));
  for (const std::string& line : log_) {
    EXPECT_EQ(line.find('\n'), std::string::npos) << "an unescaped name in: " << line;
  }
  EXPECT_TRUE(Logged("removing the directory kt.kv.tmp"));
  EXPECT_TRUE(Logged("odd\\nforged log line"));
  // The blob whose file was a directory is re-encoded on first use, once: it is stored again.
  encoder_calls_ = 0;
  {
    auto pinned = cache_->Acquire("kb", Encoder(22), nullptr);
    ASSERT_TRUE(pinned.ok()) << pinned.status();
  }
  EXPECT_EQ(encoder_calls_, 1);
  EXPECT_TRUE(std::filesystem::is_regular_file(KvFile("kb")));
  Reopen();
  {
    auto pinned = cache_->Acquire("kb", NoEncoder(), nullptr);
    ASSERT_TRUE(pinned.ok()) << pinned.status();
    auto kept = cache_->Acquire("kk", NoEncoder(), nullptr);
    ASSERT_TRUE(kept.ok()) << kept.status();
  }
}

TEST_P(ContextCacheTest, EagerRestoreLoadsAtOpenWithoutEncoding) {
  Reopen();
  ASSERT_TRUE(cache_->PutTask(Record("a", "ka"), Synthetic(20)).ok());
  ASSERT_TRUE(cache_->PutTask(Record("b", "kb"), Synthetic(21)).ok());
  options_.eager_restore = true;
  Reopen();
  CacheStats s = cache_->Stats();
  EXPECT_EQ(s.memory_entries, 2u);
  EXPECT_EQ(s.loads, 2u);
  EXPECT_EQ(s.encodes, 0u);
  ASSERT_TRUE(cache_->Acquire("kb", NoEncoder()).ok());
  EXPECT_EQ(cache_->Stats().memory_hits, 1u);
}

TEST_P(ContextCacheTest, ConcurrentAcquiresOfOneKeyEncodeOnce) {
  Reopen();
  std::atomic<int> encodes{0};
  auto slow_encoder = [&]() -> absl::StatusOr<EncodedContext> {
    ++encodes;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return Synthetic(30);
  };
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      if (cache_->Acquire("k", slow_encoder).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(encodes.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Backends, ContextCacheTest, ::testing::Values("cpu", "simt-cuda"),
                         BackendTestName);
// On a GPU (ctest label gpu; SKIPPED where none can be used): restores into device memory.
INSTANTIATE_TEST_SUITE_P(Cuda, ContextCacheTest, ::testing::Values("cuda"), BackendTestName);

}  // namespace
}  // namespace manyshot::testing

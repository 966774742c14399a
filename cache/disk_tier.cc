#include "cache/disk_tier.h"

#include <rocksdb/db.h>
#include <rocksdb/file_checksum.h>
#include <rocksdb/metadata.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "cache/disk_families.h"
#include "cache/disk_space.h"
#include "cache/kv_stream.h"
#include "cache/rocks_info_log.h"
#include "cache/sst_salvage.h"
#include "engine/task/cache_key.h"

namespace manyshot {
namespace {

constexpr char kTaskPrefix[] = "t/";
constexpr char kReadyPrefix[] = "ready/";
constexpr char kHeaderPrefix[] = "h/";
constexpr char kAccessPrefix[] = "a/";
constexpr char kPendingPrefix[] = "p/";  // format 2 staged writes (Recover() removes them)
constexpr char kFilesDirectory[] = "kv_files";
constexpr char kQuarantinePrefix[] = "q/";  // tasks family: why a ready task is quarantined

absl::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  // RocksDB's text names files under the data directory: not for clients (logged instead).
  if (s.IsNoSpace()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(std::string(what),
                     ": no space left on the data directory's disk; delete tasks or free "
                     "space, and writes resume"));
  }
  std::string message = absl::StrCat(std::string(what), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  return absl::InternalError(message);
}

std::string EncodeU64(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

uint64_t DecodeU64(std::string_view s) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < s.size(); ++i) {
    v |= static_cast<uint64_t>(static_cast<unsigned char>(s[i])) << (8 * i);
  }
  return v;
}

// Every (key, value) of `cf` whose key starts with `prefix`, prefix stripped.
template <typename Fn>
rocksdb::Status ScanPrefix(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf,
                           const std::string& prefix, Fn fn) {
  // The upper bound keeps the iterator from reading the block after the prefix: a damaged record
  // next to the ready markers must not fail their scan.
  std::string end = prefix;
  end.back() = static_cast<char>(end.back() + 1);  // prefixes end in '/'
  const rocksdb::Slice upper(end);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, cf));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    std::string_view key(it->key().data(), it->key().size());
    fn(std::string(key.substr(prefix.size())), it->value().ToStringView());
  }
  return it->status();
}

// A salvaged task record whose ready marker was lost to damage: the marker cannot be told from
// one a delete removed first, so the task is quarantined (listed with the reason, deletable)
// rather than dropped or served.
void QuarantineUnmarkedRecords(std::vector<std::pair<std::string, std::string>>* values) {
  std::set<std::string> ready, records;
  for (const auto& [key, value] : *values) {
    std::string_view k(key);
    if (k.rfind(kReadyPrefix, 0) == 0) ready.insert(key.substr(sizeof(kReadyPrefix) - 1));
    if (k.rfind(kTaskPrefix, 0) == 0) records.insert(key.substr(sizeof(kTaskPrefix) - 1));
  }
  for (const std::string& id : records) {
    if (ready.count(id)) continue;
    values->emplace_back(kReadyPrefix + id, "");
    values->emplace_back(kQuarantinePrefix + id,
                         "its ready marker was lost to damage on disk (it may have been being "
                         "deleted); DeleteTask removes it, CreateTask replaces it");
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const std::filesystem::path& path,
                                                         DiskTierOptions options) {
  if (options.chunk_bytes == 0 || options.chunk_bytes % 4 != 0) {
    return absl::InvalidArgumentError("chunk_bytes must be a positive multiple of 4");
  }
  auto tier = OpenOnce(path, options, /*repairing=*/false);
  if (tier.ok() || !absl::IsDataLoss(tier.status())) return tier;
  // RocksDB refuses a paranoid open when it cannot read a table file's index block or footer.
  // Opened without paranoid checks (and without compactions, which would read the damaged file),
  // Recover() salvages the damaged tasks or blob-metadata family; then the paranoid open again.
  if (options.log) {
    options.log(LogLevel::kError, absl::StrCat("cache: ", tier.status().ToString(),
                                               "; opening without paranoid checks to salvage"));
  }
  auto repaired = OpenOnce(path, options, /*repairing=*/true);
  if (!repaired.ok()) return tier.status();
  Stats counted = (*repaired)->counters_;
  repaired->reset();  // closed: the damaged generation's files are gone
  auto reopened = OpenOnce(path, options, /*repairing=*/false);
  if (reopened.ok()) (*reopened)->counters_.corruptions_detected += counted.corruptions_detected;
  return reopened;
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::OpenOnce(const std::filesystem::path& path,
                                                             const DiskTierOptions& options,
                                                             bool repairing) {
  std::unique_ptr<DiskTier> tier(new DiskTier());
  tier->options_ = options;
  tier->path_ = path;
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.paranoid_checks = !repairing;
  // Per-file checksums recorded in the MANIFEST (and what VerifyFileChecksums() needs).
  db_options.file_checksum_gen_factory = rocksdb::GetFileChecksumGenCrc32cFactory();
  db_options.max_background_jobs = 2;
  // RocksDB's own LOG writer aborts on the first line after a failed append (a full disk).
  db_options.info_log = TolerantInfoLog::Open(path / "LOG", options.log);
  // Every generation of the tasks and blob-metadata families there is (a switch interrupted by a
  // crash may leave two); a new database gets the base names.
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"kv", KvFamilyOptions()}};
  std::vector<std::string> existing;
  rocksdb::DB::ListColumnFamilies(db_options, path.string(), &existing).PermitUncheckedError();
  for (const char* base : {kTasksFamily, kMetaFamily}) {
    const size_t before = families.size();
    for (const std::string& name : existing) {
      if (IsGenerationOf(name, base)) families.push_back({name, OneEntryPerBlockOptions()});
    }
    if (families.size() == before) families.push_back({base, OneEntryPerBlockOptions()});
  }
  for (auto& family : families) family.options.disable_auto_compactions = repairing;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::Status s = rocksdb::DB::Open(db_options, path.string(), families, &handles, &tier->db_);
  if (!s.ok()) return FromRocks(s, absl::StrCat("open RocksDB at ", path.string()));
  tier->default_ = handles[0];
  tier->kv_ = handles[1];
  handles.erase(handles.begin(), handles.begin() + 2);
  for (auto [base, live] :
       {std::pair{kTasksFamily, &tier->tasks_cf_}, std::pair{kMetaFamily, &tier->meta_}}) {
    if (absl::Status picked = tier->PickLiveGeneration(base, &handles, live); !picked.ok()) {
      return picked;
    }
  }
  auto files = BlobFiles::Open(path / kFilesDirectory);
  if (!files.ok()) return files.status();
  tier->files_ = std::make_unique<BlobFiles>(*std::move(files));
  if (absl::Status r = tier->Recover(); !r.ok()) return r;
  return tier;
}

absl::Status DiskTier::PickLiveGeneration(const std::string& base,
                                          std::vector<rocksdb::ColumnFamilyHandle*>* handles,
                                          rocksdb::ColumnFamilyHandle** live) {
  std::string name = base;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), default_, LiveFamilyKey(base), &name);
  if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "read the live " + base + " family");
  for (auto it = handles->begin(); it != handles->end();) {
    rocksdb::ColumnFamilyHandle* handle = *it;
    if (!IsGenerationOf(handle->GetName(), base)) {
      ++it;
      continue;
    }
    it = handles->erase(it);
    if (handle->GetName() == name) {
      *live = handle;
      continue;
    }
    // Left by a switch that a crash interrupted (before or after it): not live.
    Log(LogLevel::kWarning, absl::StrCat("cache: dropping the stale family ", handle->GetName()));
    s = db_->DropColumnFamily(handle);
    db_->DestroyColumnFamilyHandle(handle).PermitUncheckedError();
    if (!s.ok()) return FromRocks(s, "drop a stale " + base + " family");
  }
  if (*live == nullptr) {
    return absl::DataLossError(
        absl::StrCat("the live family ", name, " of ", path_.string(), " is missing"));
  }
  return absl::OkStatus();
}

DiskTier::~DiskTier() {
  if (!db_) return;
  // A clean shutdown leaves no WAL to replay: the next Open() is quick.
  rocksdb::FlushOptions flush;
  flush.wait = true;
  db_->Flush(flush, {default_, tasks_cf_, kv_, meta_}).PermitUncheckedError();
  for (auto* h : {default_, tasks_cf_, kv_, meta_}) {
    if (h) db_->DestroyColumnFamilyHandle(h);
  }
  db_->Close().PermitUncheckedError();
  delete db_;
}

void DiskTier::Log(LogLevel level, const std::string& message) const {
  if (options_.log) options_.log(level, message);
}

void DiskTier::AddBlobDeletion(const std::string& key, rocksdb::WriteBatch* batch) {
  // A range delete covers every chunk even when the header (and so the chunk count) is unreadable.
  batch->DeleteRange(kv_, ChunkKey(key, 0), ChunkKey(key, std::numeric_limits<uint64_t>::max()))
      .PermitUncheckedError();
  batch->Delete(meta_, kHeaderPrefix + key).PermitUncheckedError();
  batch->Delete(meta_, kAccessPrefix + key).PermitUncheckedError();
  batch->Delete(meta_, kPendingPrefix + key).PermitUncheckedError();
  doomed_files_.push_back(key);
}

absl::Status DiskTier::CommitLocked(rocksdb::WriteBatch* batch, bool sync, std::string_view what) {
  if (absl::Status resumed = ResumeLocked(); !resumed.ok()) {
    doomed_files_.clear();
    return resumed;
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  const rocksdb::Status written = db_->Write(wo, batch);
  std::vector<std::string> doomed = std::exchange(doomed_files_, {});
  if (written.IsNoSpace()) {
    // RocksDB now refuses every write until resumed (ResumeLocked, on the next write).
    needs_resume_ = true;
    ++writes_refused_;
    Log(LogLevel::kError, absl::StrCat("cache: ", std::string(what), ": ", written.ToString()));
  }
  if (absl::Status s = FromRocks(written, what); !s.ok()) return s;
  // Only after the commit: until then a header may still name the file. A file left behind by a
  // crash here is unreferenced and removed by the next Open().
  for (const std::string& key : doomed) {
    if (absl::Status r = files_->Remove(key); !r.ok()) Log(LogLevel::kWarning, r.ToString());
  }
  return absl::OkStatus();
}

void DiskTier::RemoveStray(const std::filesystem::path& path) {
  // Names are escaped in the log: a file name may hold a newline (a forged log line).
  const std::string name = absl::CHexEscape(path.filename().string());
  std::error_code ec;
  if (std::filesystem::is_directory(std::filesystem::symlink_status(path, ec))) {
    // Only this server writes here (the data directory is private): a directory, empty or not,
    // would block the write of a blob or temporary file of that name on every restart.
    Log(LogLevel::kWarning,
        absl::StrCat("cache: removing the directory ", name,
                     " from the KV files (nothing but KV files belongs there)"));
    std::filesystem::remove_all(path, ec);
  } else {
    ++counters_.staged_writes_recovered;
    Log(LogLevel::kWarning, absl::StrCat("cache: discarding uncommitted KV file ", name));
    std::filesystem::remove(path, ec);
  }
  if (ec) {
    Log(LogLevel::kError,
        absl::StrCat("cache: cannot remove ", name, " from the KV files: ", ec.message()));
  }
}

absl::Status DiskTier::CheckRoom(uint64_t bytes, std::string_view what) {
  auto free = FreeDiskBytes(path_);
  if (!free.ok()) return free.status();
  if (*free >= bytes && *free - bytes >= options_.reserve_bytes) return absl::OkStatus();
  ++writes_refused_;
  return absl::ResourceExhaustedError(absl::StrCat(
      "no room on the data directory's disk for ", std::string(what), ": it needs ", bytes,
      " bytes, ", *free, " are free and ", options_.reserve_bytes,
      " stay in reserve (--min_free_disk_bytes); delete tasks or free space and retry"));
}

absl::Status DiskTier::ResumeLocked() {
  if (!needs_resume_) return absl::OkStatus();
  // Only with the reserve free: resuming into a full disk fails the same way at once.
  if (absl::Status room = CheckRoom(0, "resuming the store"); !room.ok()) return room;
  const rocksdb::Status resumed = db_->Resume();
  if (!resumed.ok()) {
    Log(LogLevel::kError, absl::StrCat("cache: resuming the store failed: ", resumed.ToString()));
    return absl::ResourceExhaustedError(
        "the store stopped writing when the data directory's disk was full and cannot resume "
        "yet; free space and retry");
  }
  needs_resume_ = false;
  Log(LogLevel::kInfo, "cache: the store resumed writing after running out of space");
  return absl::OkStatus();
}

absl::Status DiskTier::Resume() {
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  return ResumeLocked();
}

// Rebuilds the in-memory index from the database and repairs what a crash or a damaged disk can
// leave behind: chunks of staged writes that never committed, records without a ready marker,
// unreadable headers, blobs no task uses, and families with damaged blocks.
absl::Status DiskTier::Recover() {
  rocksdb::WriteBatch repairs;
  std::map<std::string, std::string> ready, marked;
  if (absl::Status s = ReadTaskMarkers(&ready, &marked); !s.ok()) return s;
  for (const auto& [id, why] : marked) {
    if (!ready.count(id)) repairs.Delete(tasks_cf_, kQuarantinePrefix + id).PermitUncheckedError();
  }
  const bool damaged_on_disk = LoadReadyRecords(ready, marked);
  SweepRecordsWithoutMarker(ready, &repairs);
  BlobMetadata meta;
  if (absl::Status s = ReadBlobMetadata(&meta); !s.ok()) return s;
  for (const std::string& key : meta.pending) {
    if (meta.headers.count(key)) {
      repairs.Delete(meta_, kPendingPrefix + key).PermitUncheckedError();
      continue;
    }
    AddBlobDeletion(key, &repairs);
    ++counters_.staged_writes_recovered;
    Log(LogLevel::kWarning, absl::StrCat("cache: discarding uncommitted KV blob ", key));
  }
  for (const auto& [key, bytes] : meta.headers) AdmitBlob(key, bytes, meta.access, &repairs);
  if (repairs.Count() > 0 || !doomed_files_.empty()) {
    if (absl::Status c = CommitLocked(&repairs, true, "write recovery repairs"); !c.ok()) return c;
  }
  // Files no committed header names: temporary files of writes a crash interrupted, and files
  // whose header commit never happened or whose deletion committed before the unlink.
  const BlobFiles::Listing listing = files_->List();
  for (const std::filesystem::path& other : listing.others) RemoveStray(other);
  for (const std::string& key : listing.keys) {
    if (!blobs_.count(key)) files_->Remove(key).IgnoreError();
  }
  if (damaged_on_disk) {
    if (absl::Status m = MigrateTasksFamily(); !m.ok()) return m;
  }
  std::lock_guard<std::mutex> lock(write_mutex_);
  EnforceBudgetLocked("");
  return absl::OkStatus();
}

absl::Status DiskTier::ReadTaskMarkers(std::map<std::string, std::string>* ready,
                                       std::map<std::string, std::string>* marked) {
  auto scan = [&] {
    ready->clear();
    marked->clear();
    rocksdb::Status s = ScanPrefix(db_, tasks_cf_, kReadyPrefix, [&](std::string id, auto key) {
      (*ready)[id] = std::string(key);
    });
    if (!s.ok()) return s;
    return ScanPrefix(db_, tasks_cf_, kQuarantinePrefix,
                      [&](std::string id, auto why) { (*marked)[id] = std::string(why); });
  };
  rocksdb::Status s = scan();
  if (s.IsCorruption()) {
    // A damaged marker block, or an index block that hides every entry of its file.
    if (absl::Status salvaged =
            SalvageFamily(kTasksFamily, &tasks_cf_, s.ToString(), QuarantineUnmarkedRecords);
        !salvaged.ok()) {
      return salvaged;
    }
    s = scan();
  }
  return FromRocks(s, "scan ready tasks");
}

// Each record is read on its own, with its checksums verified (the tasks family keeps one entry
// per block), so a damaged record costs only its own task: it is quarantined (kept, listed with
// the reason) instead of stopping the open. True when RocksDB itself could not read a record.
bool DiskTier::LoadReadyRecords(const std::map<std::string, std::string>& ready,
                                const std::map<std::string, std::string>& marked) {
  bool damaged_on_disk = false;
  for (const auto& [id, key] : ready) {
    if (auto it = marked.find(id); it != marked.end()) {
      quarantined_[id] = it->second;
      Log(LogLevel::kError,
          absl::StrCat("cache: task ", id, " has a damaged record (", it->second,
                       "); still quarantined: not served, other tasks unaffected"));
      continue;
    }
    rocksdb::ReadOptions ro;
    ro.verify_checksums = true;
    std::string bytes;
    rocksdb::Status got = db_->Get(ro, tasks_cf_, kTaskPrefix + id, &bytes);
    absl::StatusOr<TaskRecord> record =
        got.ok() ? ParseTaskRecord(bytes) : absl::StatusOr<TaskRecord>(FromRocks(got, "read"));
    if (got.IsNotFound()) {
      // Atomic batches never leave a marker without its record: the record's block was lost to
      // damage (a salvage skips what fails its checksum).
      record = absl::DataLossError("its record is missing (lost to damage on disk)");
    } else if (!got.ok()) {
      damaged_on_disk = true;
    }
    if (record.ok() && record->task_id != id) {
      record = absl::DataLossError(absl::StrCat("the record names task ", record->task_id));
    }
    if (!record.ok()) {
      ++counters_.corruptions_detected;
      quarantined_[id] = std::string(record.status().message());
      Log(LogLevel::kError,
          absl::StrCat("cache: task ", id, " has a damaged record (", record.status().ToString(),
                       "); quarantined: kept on disk, not served, other tasks unaffected"));
      continue;
    }
    users_[record->kv_key].insert(id);
    tasks_[id] = *std::move(record);
  }
  return damaged_on_disk;
}

void DiskTier::SweepRecordsWithoutMarker(const std::map<std::string, std::string>& ready,
                                         rocksdb::WriteBatch* repairs) {
  // A crash between a delete's two batches (the marker goes first) leaves a record without its
  // ready marker: never visible. Keys only, without block checksums: a damaged record must not
  // stop this sweep (the records were checked above).
  rocksdb::ReadOptions ro;
  ro.verify_checksums = false;
  ro.fill_cache = false;  // an unverified block must not be served later from the block cache
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro, tasks_cf_));
  for (it->Seek(kTaskPrefix); it->Valid() && it->key().starts_with(kTaskPrefix); it->Next()) {
    const std::string id = it->key().ToString().substr(sizeof(kTaskPrefix) - 1);
    if (!ready.count(id)) repairs->Delete(tasks_cf_, kTaskPrefix + id).PermitUncheckedError();
  }
  if (!it->status().ok()) {
    Log(LogLevel::kWarning, absl::StrCat("cache: sweeping task records without a ready marker "
                                         "stopped early: ",
                                         it->status().ToString()));
  }
}

absl::Status DiskTier::ReadBlobMetadata(BlobMetadata* meta) {
  auto scan = [&] {
    *meta = BlobMetadata();
    rocksdb::Status s = ScanPrefix(db_, meta_, kPendingPrefix,
                                   [&](std::string key, auto) { meta->pending.push_back(key); });
    if (!s.ok()) return s;
    s = ScanPrefix(db_, meta_, kAccessPrefix,
                   [&](std::string key, auto v) { meta->access[key] = DecodeU64(v); });
    if (!s.ok()) return s;
    return ScanPrefix(db_, meta_, kHeaderPrefix, [&](std::string key, auto bytes) {
      meta->headers[key] = std::string(bytes);
    });
  };
  rocksdb::Status s = scan();
  if (s.IsCorruption()) {
    // Re-creatable: the blobs whose headers are lost are removed and re-encoded on first use.
    if (absl::Status salvaged = SalvageFamily(kMetaFamily, &meta_, s.ToString(), nullptr);
        !salvaged.ok()) {
      return salvaged;
    }
    s = scan();
  }
  for (const auto& [key, time] : meta->access) clock_ = std::max(clock_, time);
  return FromRocks(s, "scan blob metadata");
}

void DiskTier::AdmitBlob(const std::string& key, const std::string& bytes,
                         const std::map<std::string, uint64_t>& access,
                         rocksdb::WriteBatch* repairs) {
  auto header = ParseBlobHeader(bytes);
  if (!header.ok() || header->key != key) {
    ++counters_.corruptions_detected;
    Log(LogLevel::kError, absl::StrCat("cache: KV blob ", key, " has a damaged header; deleted"));
    AddBlobDeletion(key, repairs);
    return;
  }
  if (!users_.count(key)) {  // no task uses it (its task was deleted mid-flight): garbage
    AddBlobDeletion(key, repairs);
    return;
  }
  if (header->format_version != kCacheFormatVersion) {
    // Format 2 kept the payload as chunks inside RocksDB; its tasks re-encode on first use.
    Log(LogLevel::kInfo,
        absl::StrCat("cache: KV blob ", key, " is in format ", header->format_version,
                     " (this server writes ", kCacheFormatVersion,
                     "); dropped, and re-encoded when its task is next used"));
    ++counters_.old_format_blobs_dropped;
    AddBlobDeletion(key, repairs);
    return;
  }
  auto size = files_->SizeOf(key);
  if (!size.ok() || *size != header->total_bytes) {
    ++counters_.corruptions_detected;
    Log(LogLevel::kError,
        absl::StrCat(
            "cache: KV blob ", key, " has ",
            size.ok() ? absl::StrCat("a file of ", *size, " bytes, expected ", header->total_bytes)
                      : std::string(size.status().message()),
            "; deleted"));
    AddBlobDeletion(key, repairs);
    return;
  }
  auto time = access.find(key);
  blobs_[key] = {header->total_bytes, time != access.end() ? time->second : 0};
  bytes_ += header->total_bytes;
}

// The family's entries, read from the valid data blocks of its files without their index blocks
// (sst_salvage.h), are copied to its next generation (disk_families.h). An entry in a damaged
// block is lost: a task record then shows as missing (quarantined), a blob header as absent (the
// blob is re-encoded on first use).
absl::Status DiskTier::SalvageFamily(const std::string& base, rocksdb::ColumnFamilyHandle** live,
                                     const std::string& why, const SalvageFixup& fixup) {
  ++counters_.corruptions_detected;
  const std::string old_name = (*live)->GetName();
  Log(LogLevel::kError, absl::StrCat("cache: the ", old_name, " family cannot be read (", why,
                                     "); salvaging its readable entries"));
  uint64_t in_memory = 0;
  if (db_->GetIntProperty(*live, "rocksdb.num-entries-active-mem-table", &in_memory) &&
      in_memory > 0) {
    rocksdb::FlushOptions fo;
    fo.wait = true;
    db_->Flush(fo, *live).PermitUncheckedError();
  }
  std::vector<rocksdb::LiveFileMetaData> files;
  db_->GetLiveFilesMetaData(&files);
  std::vector<SalvagedEntry> entries;
  for (const auto& f : files) {
    if (f.column_family_name != old_name) continue;
    const std::filesystem::path file =
        std::filesystem::path(f.db_path) / std::filesystem::path(f.name).filename();
    auto table = SalvageSingleEntryBlocks(file, f.smallestkey, f.largestkey, f.smallest_seqno,
                                          f.largest_seqno);
    if (!table.ok()) return table.status();
    std::move(table->entries.begin(), table->entries.end(), std::back_inserter(entries));
  }
  auto values = NewestValues(entries);
  if (fixup) fixup(&values);
  absl::Status s = FromRocks(
      SwitchToFreshFamily(*db_, default_, base, live,
                          [&](rocksdb::ColumnFamilyHandle* fresh, rocksdb::WriteBatch* batch) {
                            for (const auto& [key, value] : values) {
                              batch->Put(fresh, key, value).PermitUncheckedError();
                            }
                          }),
      "salvage the " + old_name + " family");
  if (!s.ok()) return s;
  Log(LogLevel::kWarning, absl::StrCat("cache: ", values.size(), " entries of ", old_name,
                                       " salvaged into ", (*live)->GetName()));
  return absl::OkStatus();
}

// A damaged block stays in its SST file until a compaction rewrites the file, and that compaction
// would fail on it: the records read (and a quarantine marker per damaged one) move to the next
// generation of the family (disk_families.h).
absl::Status DiskTier::MigrateTasksFamily() {
  const std::string old_name = tasks_cf_->GetName();
  absl::Status s =
      FromRocks(SwitchToFreshFamily(
                    *db_, default_, kTasksFamily, &tasks_cf_,
                    [&](rocksdb::ColumnFamilyHandle* fresh, rocksdb::WriteBatch* batch) {
                      for (const auto& [id, record] : tasks_) {
                        batch->Put(fresh, kTaskPrefix + id, SerializeTaskRecord(record))
                            .PermitUncheckedError();
                        batch->Put(fresh, kReadyPrefix + id, record.kv_key).PermitUncheckedError();
                      }
                      for (const auto& [id, reason] : quarantined_) {
                        batch->Put(fresh, kReadyPrefix + id, "").PermitUncheckedError();
                        batch->Put(fresh, kQuarantinePrefix + id, reason).PermitUncheckedError();
                      }
                    }),
                "move task records to a fresh tasks family");
  if (!s.ok()) return s;
  Log(LogLevel::kWarning, absl::StrCat("cache: task records moved from the damaged family ",
                                       old_name, " to ", tasks_cf_->GetName(), " (", tasks_.size(),
                                       " records, ", quarantined_.size(), " quarantined)"));
  return absl::OkStatus();
}

absl::Status DiskTier::WriteBlobLocked(const std::string& key, const EncodedContext& ctx,
                                       Backend& backend,
                                       const std::function<void(rocksdb::WriteBatch*)>& add_records,
                                       bool sync) {
  auto shape = ShapeOf(ctx);
  if (!shape.ok()) return shape.status();
  BlobHeader header;
  header.format_version = kCacheFormatVersion;
  header.key = key;
  header.shape = *shape;
  header.chunk_bytes = options_.chunk_bytes;
  header.total_bytes = shape->PayloadBytes();
  if (absl::Status room = CheckRoom(header.total_bytes, "the task's KV"); !room.ok()) return room;
  // The payload goes to its own file, durable under its final name before the batch below
  // (header, access time, the caller's records) refers to it.
  auto checksums = files_->WritePayload(key, ctx, backend, options_.chunk_bytes);
  if (!checksums.ok()) return checksums.status();
  header.chunk_checksums = *std::move(checksums);
  absl::Status s;
  rocksdb::WriteBatch batch;
  batch.Put(meta_, kHeaderPrefix + key, SerializeBlobHeader(header)).PermitUncheckedError();
  uint64_t now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    now = ++clock_;
  }
  batch.Put(meta_, kAccessPrefix + key, EncodeU64(now)).PermitUncheckedError();
  // The caller's records (task record, ready marker) come last.
  if (add_records) add_records(&batch);
  s = CommitLocked(&batch, sync, "commit KV blob");
  if (!s.ok()) {
    files_->Remove(key).IgnoreError();  // nothing refers to it
    return s;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  blobs_[key] = {header.total_bytes, now};
  bytes_ += header.total_bytes;
  return absl::OkStatus();
}

absl::Status DiskTier::PutTask(const TaskRecord& record, const EncodedContext* ctx,
                               Backend& backend, std::string* released_key) {
  if (released_key) released_key->clear();
  if (record.task_id.empty() || record.kv_key.empty()) {
    return absl::InvalidArgumentError("a task record needs a task id and a kv key");
  }
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  std::optional<TaskRecord> previous = GetTask(record.task_id);
  // A replaced version whose KV no other task uses gives it up in the same batch that switches the
  // record: the old version stays complete and served until the new one commits, and a crash
  // leaves one version or the other, never neither.
  std::string release;
  if (previous && previous->kv_key != record.kv_key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto users = users_.find(previous->kv_key);
    if (users != users_.end() && users->second.size() == 1 && users->second.count(record.task_id)) {
      release = previous->kv_key;
    }
  }
  const bool release_blob = !release.empty() && HasBlob(release);
  bool was_quarantined;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    was_quarantined = quarantined_.count(record.task_id) > 0;
  }
  auto add_records = [&](rocksdb::WriteBatch* batch) {
    if (release_blob) AddBlobDeletion(release, batch);
    batch->Put(tasks_cf_, kTaskPrefix + record.task_id, SerializeTaskRecord(record))
        .PermitUncheckedError();
    batch->Put(tasks_cf_, kReadyPrefix + record.task_id, record.kv_key).PermitUncheckedError();
    if (was_quarantined) {
      batch->Delete(tasks_cf_, kQuarantinePrefix + record.task_id).PermitUncheckedError();
    }
  };
  const bool write_blob = ctx != nullptr && !HasBlob(record.kv_key);
  bool committed = false;
  absl::Status s;
  if (write_blob) {
    auto shape = ShapeOf(*ctx);
    if (!shape.ok()) return shape.status();
    if (options_.budget_bytes > 0 && shape->PayloadBytes() > options_.budget_bytes) {
      Log(LogLevel::kWarning,
          absl::StrCat("cache: KV of task ", record.task_id, " (", shape->PayloadBytes(),
                       " bytes) exceeds the disk budget; it will be re-encoded after restarts"));
    } else {
      s = WriteBlobLocked(record.kv_key, *ctx, backend, add_records, options_.sync_task_writes);
      if (!s.ok()) return s;
      committed = true;
    }
  }
  if (!committed) {
    rocksdb::WriteBatch batch;
    add_records(&batch);
    if (absl::Status room = CheckRoom(batch.GetDataSize(), "the task record"); !room.ok()) {
      return room;
    }
    s = CommitLocked(&batch, options_.sync_task_writes, "write task record");
    if (!s.ok()) return s;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (previous) {
      users_[previous->kv_key].erase(record.task_id);
      if (users_[previous->kv_key].empty()) users_.erase(previous->kv_key);
    }
    if (release_blob) {
      bytes_ -= blobs_[release].bytes;
      blobs_.erase(release);
    }
    users_[record.kv_key].insert(record.task_id);
    tasks_[record.task_id] = record;
    quarantined_.erase(record.task_id);
  }
  if (released_key) *released_key = release;
  EnforceBudgetLocked(record.kv_key);
  return absl::OkStatus();
}

absl::Status DiskTier::PutBlob(const std::string& key, const EncodedContext& ctx,
                               Backend& backend) {
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  if (HasBlob(key)) return absl::OkStatus();
  auto shape = ShapeOf(ctx);
  if (!shape.ok()) return shape.status();
  if (options_.budget_bytes > 0 && shape->PayloadBytes() > options_.budget_bytes) {
    return absl::OkStatus();  // too big to keep: re-encoded on demand
  }
  // Not synced: losing a re-encoded blob in a crash only costs another re-encode.
  absl::Status s = WriteBlobLocked(key, ctx, backend, nullptr, /*sync=*/false);
  if (!s.ok()) return s;
  EnforceBudgetLocked(key);
  return absl::OkStatus();
}

absl::Status DiskTier::DeleteTask(const std::string& task_id, bool* key_unused) {
  *key_unused = false;
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  std::optional<TaskRecord> record = GetTask(task_id);
  if (!record) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!quarantined_.count(task_id)) {
        return absl::NotFoundError(absl::StrCat("no task ", task_id));
      }
    }
    // A quarantined task: its record is unreadable, so its KV key is unknown; its blob (if any)
    // had no reader at open and was swept as garbage then.
    rocksdb::WriteBatch batch;
    batch.Delete(tasks_cf_, kReadyPrefix + task_id).PermitUncheckedError();
    batch.Delete(tasks_cf_, kTaskPrefix + task_id).PermitUncheckedError();
    batch.Delete(tasks_cf_, kQuarantinePrefix + task_id).PermitUncheckedError();
    rocksdb::WriteOptions wo;
    wo.sync = options_.sync_task_writes;
    absl::Status s = FromRocks(db_->Write(wo, &batch), "delete quarantined task");
    if (!s.ok()) return s;
    std::lock_guard<std::mutex> lock(mutex_);
    quarantined_.erase(task_id);
    return absl::OkStatus();
  }
  rocksdb::WriteBatch batch;
  // The ready marker goes first: the task stops being visible before anything else changes.
  batch.Delete(tasks_cf_, kReadyPrefix + task_id).PermitUncheckedError();
  batch.Delete(tasks_cf_, kTaskPrefix + task_id).PermitUncheckedError();
  bool last_user;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto& users = users_[record->kv_key];
    last_user = users.size() == 1 && users.count(task_id) == 1;
  }
  const bool had_blob = HasBlob(record->kv_key);
  if (last_user && had_blob) AddBlobDeletion(record->kv_key, &batch);
  absl::Status s = CommitLocked(&batch, options_.sync_task_writes, "delete task");
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  tasks_.erase(task_id);
  users_[record->kv_key].erase(task_id);
  if (users_[record->kv_key].empty()) users_.erase(record->kv_key);
  if (last_user && had_blob) {
    bytes_ -= blobs_[record->kv_key].bytes;
    blobs_.erase(record->kv_key);
  }
  *key_unused = last_user;
  return absl::OkStatus();
}

std::optional<TaskRecord> DiskTier::GetTask(const std::string& task_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) return std::nullopt;
  return it->second;
}

std::vector<TaskRecord> DiskTier::ListTasks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TaskRecord> out;
  for (const auto& [id, record] : tasks_) out.push_back(record);
  return out;
}

std::map<std::string, std::string> DiskTier::QuarantinedTasks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return quarantined_;
}

std::vector<std::string> DiskTier::TasksUsingKey(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = users_.find(key);
  if (it == users_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

bool DiskTier::HasBlob(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return blobs_.count(key) > 0;
}

absl::StatusOr<EncodedContext> DiskTier::LoadBlob(const std::string& key, Backend& backend,
                                                  DType memory_dtype) {
  if (!HasBlob(key)) return absl::NotFoundError(absl::StrCat("no KV blob ", key));
  // A concurrent eviction or delete commits its batch, then unlinks the file: the header read
  // here then either is gone (NOT_FOUND) or names a file that is whole, or gone by the time it is
  // opened (NOT_FOUND: re-encode), or open already (Linux keeps an unlinked file readable).
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  std::string header_bytes;
  absl::Status s = FromRocks(db_->Get(ro, meta_, kHeaderPrefix + key, &header_bytes),
                             absl::StrCat("read KV header ", key));
  if (!s.ok()) return s;  // NOT_FOUND: evicted or deleted since HasBlob
  auto header = ParseBlobHeader(header_bytes);
  if (!header.ok()) return header.status();
  if (header->key != key || header->format_version != kCacheFormatVersion) {
    return absl::DataLossError(absl::StrCat("KV blob ", key, " header names key ", header->key,
                                            " version ", header->format_version));
  }
  // Copied into memory the backend owns, never mapped: a verified page of a mapping could be
  // dropped from the page cache and read again from the disk, unverified, and a write to the file
  // would reach it. What is served is what was verified, until it leaves the memory tier.
  KvShape memory_shape = header->shape;
  memory_shape.dtype = memory_dtype;
  auto allocated = AllocateContext(backend, memory_shape);
  if (!allocated.ok()) return allocated.status();
  s = files_->ReadPayload(*header, *allocated, backend);
  if (!s.ok()) return s;  // NOT_FOUND: the file went with an eviction since the header was read
  // The copies into device memory must be done (and their errors seen) before the context is
  // published to other threads.
  s = backend.Synchronize();
  if (!s.ok()) return s;
  Touch(key);
  return allocated;
}

void DiskTier::Touch(const std::string& key) {
  uint64_t now;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blobs_.find(key);
    if (it == blobs_.end()) return;
    now = it->second.last_access = ++clock_;
  }
  // Unsynced and best effort: a lost access time only makes the disk LRU order slightly stale.
  db_->Put(rocksdb::WriteOptions(), meta_, kAccessPrefix + key, EncodeU64(now))
      .PermitUncheckedError();
}

absl::Status DiskTier::DeleteBlob(const std::string& key) {
  std::lock_guard<std::mutex> write_lock(write_mutex_);
  rocksdb::WriteBatch batch;
  AddBlobDeletion(key, &batch);
  absl::Status s = CommitLocked(&batch, false, "delete KV blob");
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = blobs_.find(key); it != blobs_.end()) {
    bytes_ -= it->second.bytes;
    blobs_.erase(it);
  }
  return absl::OkStatus();
}

void DiskTier::EnforceBudgetLocked(const std::string& keep) {
  if (options_.budget_bytes == 0) return;
  while (true) {
    std::string victim;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (bytes_ <= options_.budget_bytes) return;
      uint64_t oldest = std::numeric_limits<uint64_t>::max();
      for (const auto& [key, info] : blobs_) {
        if (key != keep && info.last_access < oldest) {
          oldest = info.last_access;
          victim = key;
        }
      }
    }
    if (victim.empty()) return;
    rocksdb::WriteBatch batch;
    AddBlobDeletion(victim, &batch);
    // Unsynced: if the eviction is lost in a crash, the header is still there and so is the file
    // (it is unlinked after the commit; an unlinked file whose deletion was lost is a blob with no
    // file, which the next Open() counts and drops: a re-encode, never a wrong answer).
    if (!CommitLocked(&batch, false, "evict KV blob").ok()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    bytes_ -= blobs_[victim].bytes;
    blobs_.erase(victim);
    ++counters_.evictions;
    Log(LogLevel::kInfo, absl::StrCat("cache: evicted KV blob ", victim, " from disk (budget ",
                                      options_.budget_bytes, " bytes)"));
  }
}

std::vector<std::string> DiskTier::BlobsByRecency() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [key, info] : blobs_) order.emplace_back(info.last_access, key);
  std::sort(order.begin(), order.end());
  std::vector<std::string> keys;
  for (auto& [t, key] : order) keys.push_back(std::move(key));
  return keys;
}

absl::Status DiskTier::Flush() {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  return FromRocks(db_->Flush(fo, {default_, tasks_cf_, kv_, meta_}), "flush");
}

DiskTier::Stats DiskTier::stats() const {
  Stats s;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    s = counters_;
    s.budget_bytes = options_.budget_bytes;
    s.bytes = bytes_;
    s.entries = blobs_.size();
    s.tasks = tasks_.size();
    s.quarantined_tasks = quarantined_.size();
  }
  uint64_t v = 0;
  for (auto* cf : {default_, tasks_cf_, kv_, meta_}) {
    if (db_->GetIntProperty(cf, "rocksdb.live-sst-files-size", &v)) s.sst_bytes += v;
    if (db_->GetIntProperty(cf, "rocksdb.total-blob-file-size", &v)) s.blob_file_bytes += v;
  }
  s.blob_file_bytes += s.bytes;  // the KV files (their sizes are checked against the headers)
  auto free = FreeDiskBytes(path_);
  s.free_bytes = free.ok() ? *free : 0;
  s.writable = free.ok() && s.free_bytes >= options_.reserve_bytes && s.free_bytes > 0 &&
               !needs_resume_.load();
  s.writes_refused = writes_refused_.load();
  return s;
}

}  // namespace manyshot

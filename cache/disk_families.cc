#include "cache/disk_families.h"

#include <rocksdb/table.h>

#include <cstdlib>

namespace manyshot {

rocksdb::ColumnFamilyOptions KvFamilyOptions() {
  rocksdb::ColumnFamilyOptions o;
  // Large values go to RocksDB blob files (integrated BlobDB): compactions move 16-byte blob
  // references instead of rewriting gigabytes of K/V, and a read is one pread of the value.
  o.enable_blob_files = true;
  o.min_blob_size = 4096;
  o.blob_file_size = uint64_t{256} << 20;
  o.enable_blob_garbage_collection = true;  // reclaims space of deleted blobs
  // Float K/V barely compresses; compressing would only cost restore time.
  o.compression = rocksdb::kNoCompression;
  o.blob_compression_type = rocksdb::kNoCompression;
  o.write_buffer_size = uint64_t{64} << 20;
  return o;
}

rocksdb::ColumnFamilyOptions OneEntryPerBlockOptions() {
  rocksdb::ColumnFamilyOptions o;
  // A damaged block (a flipped bit on disk) then fails the checksum of one entry only: one task
  // record is quarantined, or one blob header dropped, instead of every neighbour in the block.
  // Records carry whole demonstration sets (kilobytes), so the extra index entries are noise.
  rocksdb::BlockBasedTableOptions table;
  table.block_size = 1;
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // Uncompressed, so an entry's bytes on disk are its bytes (what salvage and the tests read).
  o.compression = rocksdb::kNoCompression;
  return o;
}

std::string LiveFamilyKey(const std::string& base) { return "live_" + base + "_family"; }

bool IsGenerationOf(const std::string& name, const std::string& base) {
  return name == base || name.rfind(base + ".", 0) == 0;
}

std::string NextGeneration(const std::string& name, const std::string& base) {
  uint64_t generation = 0;
  if (name.size() > base.size() + 1) {
    generation = std::strtoull(name.c_str() + base.size() + 1, nullptr, 10);
  }
  return base + "." + std::to_string(generation + 1);
}

rocksdb::Status SwitchToFreshFamily(
    rocksdb::DB& db, rocksdb::ColumnFamilyHandle* default_family, const std::string& base,
    rocksdb::ColumnFamilyHandle** live,
    const std::function<void(rocksdb::ColumnFamilyHandle*, rocksdb::WriteBatch*)>& fill) {
  rocksdb::ColumnFamilyHandle* fresh = nullptr;
  rocksdb::Status s = db.CreateColumnFamily(OneEntryPerBlockOptions(),
                                            NextGeneration((*live)->GetName(), base), &fresh);
  if (!s.ok()) return s;
  rocksdb::WriteBatch batch;
  fill(fresh, &batch);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  s = db.Write(wo, &batch);
  if (s.ok()) s = db.Put(wo, default_family, LiveFamilyKey(base), fresh->GetName());
  if (!s.ok()) {
    db.DropColumnFamily(fresh).PermitUncheckedError();
    db.DestroyColumnFamilyHandle(fresh).PermitUncheckedError();
    return s;
  }
  db.DropColumnFamily(*live).PermitUncheckedError();  // else dropped by the next open
  db.DestroyColumnFamilyHandle(*live).PermitUncheckedError();
  *live = fresh;
  return rocksdb::Status::OK();
}

}  // namespace manyshot

// The disk tier's RocksDB column families. "tasks" and "kv_meta" come in generations ("tasks",
// "tasks.1", ...): a family with a damaged block cannot be compacted (the compaction would fail
// on the block and, with paranoid checks, stop every write), so its readable entries are copied
// to the next generation, the default family's key `live_<base>_family` is switched to it in one
// synced write, and the damaged generation is dropped whole (its files deleted unread). A crash
// before the switch leaves the old generation live; after it, the next open drops the old one.
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <functional>
#include <string>

namespace manyshot {

inline constexpr char kTasksFamily[] = "tasks";
inline constexpr char kMetaFamily[] = "kv_meta";

// Format 2's payload chunks (kept only so that such a database opens).
rocksdb::ColumnFamilyOptions KvFamilyOptions();
// One entry per data block, uncompressed: a damaged block costs one entry, and the blocks can be
// read without the file's index (sst_salvage.h).
rocksdb::ColumnFamilyOptions OneEntryPerBlockOptions();

// The default family's key that names the live generation of `base`.
std::string LiveFamilyKey(const std::string& base);
// True for `base` and `base.N`.
bool IsGenerationOf(const std::string& name, const std::string& base);
// `base.N+1` after `base.N` (or after `base`).
std::string NextGeneration(const std::string& name, const std::string& base);

// Creates the next generation of `*live`, fills it with `fill` in one synced batch, switches the
// live key to it and drops `*live`, which then points at the new family. On failure nothing was
// switched and `*live` is unchanged.
rocksdb::Status SwitchToFreshFamily(
    rocksdb::DB& db, rocksdb::ColumnFamilyHandle* default_family, const std::string& base,
    rocksdb::ColumnFamilyHandle** live,
    const std::function<void(rocksdb::ColumnFamilyHandle*, rocksdb::WriteBatch*)>& fill);

}  // namespace manyshot

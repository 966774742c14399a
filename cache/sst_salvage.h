// Reads the entries of a RocksDB table file without its index, metaindex or footer: the data
// blocks of the families the disk tier writes one entry per block (uncompressed, XXH3 block
// checksums) follow each other from offset 0, so they can be walked and each checked on its own.
// A damaged block is skipped (the walk resynchronizes on the next block whose checksum holds).
// What RocksDB would refuse whole when one index block is damaged thus costs at most the entries
// of damaged data blocks. Knows RocksDB's block format (format_version 2..5), not the tier's keys.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot {

struct SalvagedEntry {
  std::string user_key;
  uint64_t sequence = 0;
  bool deletion = false;  // a tombstone: the key has no value from this sequence on
  std::string value;
};

struct SalvagedTable {
  std::vector<SalvagedEntry> entries;
  uint64_t skipped_bytes = 0;  // bytes between valid data blocks: meta blocks, damaged blocks
};

// The valid single-entry data blocks of `file`, in file order. Entries outside the file's key
// and sequence range (as the MANIFEST records them) are not data and are left out. NOT_FOUND or
// another error when the file cannot be read.
absl::StatusOr<SalvagedTable> SalvageSingleEntryBlocks(const std::filesystem::path& file,
                                                       const std::string& smallest_key,
                                                       const std::string& largest_key,
                                                       uint64_t smallest_sequence,
                                                       uint64_t largest_sequence);

// The newest live value of every key over several tables' entries (tombstones applied).
std::vector<std::pair<std::string, std::string>> NewestValues(
    const std::vector<SalvagedEntry>& entries);

}  // namespace manyshot

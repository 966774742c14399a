// Damage to RocksDB's SST files as a failing disk would do it, for the corruption tests: one
// flipped bit in a data block (found by a marker it holds) or in the index block (found through
// the file's footer).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace manyshot::testing {

// Every SST file under `dir` (a RocksDB directory or one above it).
std::vector<std::filesystem::path> SstFilesIn(const std::filesystem::path& dir);

// Flips one bit in the middle of the first occurrence of `marker` in `files`; false if absent.
bool FlipByteInDataBlockHolding(const std::vector<std::filesystem::path>& files,
                                const std::string& marker);

// Flips one bit in the middle of the index block named by the file's footer; false if the
// footer cannot be read.
bool FlipByteInIndexBlock(const std::filesystem::path& file);

}  // namespace manyshot::testing

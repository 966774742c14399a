#include "cache/sst_salvage.h"

#include <xxhash.h>

#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

constexpr size_t kBlockTrailerBytes = 5;  // compression type (1) + checksum (4)
constexpr size_t kFooterBytes = 53;       // the block-based table footer, format_version >= 1
constexpr uint8_t kNoCompression = 0;
// Value types of an internal key's trailer (RocksDB's dbformat.h).
constexpr uint8_t kTypeDeletion = 0x0, kTypeValue = 0x1, kTypeSingleDeletion = 0x7;

uint32_t Fixed32(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

uint64_t Fixed64(const std::string& b, size_t at) {
  return static_cast<uint64_t>(Fixed32(b, at)) | static_cast<uint64_t>(Fixed32(b, at + 4)) << 32;
}

std::optional<uint64_t> Varint(const std::string& b, size_t* at, size_t end) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && *at < end; shift += 7) {
    const auto byte = static_cast<unsigned char>(b[(*at)++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  return std::nullopt;
}

// RocksDB's kXXH3 block checksum: the low 32 bits of XXH3-64 over the block, mixed with the
// trailer's compression-type byte.
uint32_t BlockChecksum(const char* block, size_t size, uint8_t type) {
  const auto v = static_cast<uint32_t>(XXH3_64bits(block, size));
  return v ^ (static_cast<uint32_t>(type) * 0x6b9083d9u);
}

struct ParsedBlock {
  SalvagedEntry entry;
  size_t next = 0;  // offset of the following block
};

// The single-entry, uncompressed data block at `at` whose checksum holds, or nullopt.
std::optional<ParsedBlock> ParseBlockAt(const std::string& b, size_t at, size_t end) {
  size_t p = at;
  const auto shared = Varint(b, &p, end);
  const auto key_size = Varint(b, &p, end);
  const auto value_size = Varint(b, &p, end);
  if (!shared || *shared != 0 || !key_size || *key_size < 8 || !value_size) return std::nullopt;
  if (*key_size > end - p || *value_size > end - p - *key_size) return std::nullopt;
  const size_t key_at = p, value_at = p + *key_size;
  p = value_at + *value_size;
  // One restart point (offset 0), then the restart count 1 (binary-search data block index).
  if (end - p < 8 + kBlockTrailerBytes) return std::nullopt;
  if (Fixed32(b, p) != 0 || Fixed32(b, p + 4) != 1) return std::nullopt;
  const size_t block_end = p + 8;
  const auto type = static_cast<uint8_t>(b[block_end]);
  if (type != kNoCompression) return std::nullopt;
  if (BlockChecksum(b.data() + at, block_end - at, type) != Fixed32(b, block_end + 1)) {
    return std::nullopt;
  }
  const uint64_t trailer = Fixed64(b, key_at + *key_size - 8);
  const auto value_type = static_cast<uint8_t>(trailer & 0xff);
  if (value_type != kTypeValue && value_type != kTypeDeletion &&
      value_type != kTypeSingleDeletion) {
    return std::nullopt;
  }
  ParsedBlock parsed;
  parsed.entry.user_key = b.substr(key_at, *key_size - 8);
  parsed.entry.sequence = trailer >> 8;
  parsed.entry.deletion = value_type != kTypeValue;
  if (!parsed.entry.deletion) parsed.entry.value = b.substr(value_at, *value_size);
  parsed.next = block_end + kBlockTrailerBytes;
  return parsed;
}

}  // namespace

absl::StatusOr<SalvagedTable> SalvageSingleEntryBlocks(const std::filesystem::path& file,
                                                       const std::string& smallest_key,
                                                       const std::string& largest_key,
                                                       uint64_t smallest_sequence,
                                                       uint64_t largest_sequence) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", file.string()));
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  const size_t end = bytes.size() > kFooterBytes ? bytes.size() - kFooterBytes : 0;
  SalvagedTable table;
  size_t at = 0;
  while (at < end) {
    std::optional<ParsedBlock> block = ParseBlockAt(bytes, at, end);
    const bool in_range =
        block && block->entry.user_key >= smallest_key && block->entry.user_key <= largest_key &&
        block->entry.sequence >= smallest_sequence && block->entry.sequence <= largest_sequence;
    if (!in_range) {  // damaged, or a meta block: look for the next valid block a byte on
      ++table.skipped_bytes;
      ++at;
      continue;
    }
    table.entries.push_back(std::move(block->entry));
    at = block->next;
  }
  return table;
}

std::vector<std::pair<std::string, std::string>> NewestValues(
    const std::vector<SalvagedEntry>& entries) {
  std::map<std::string, const SalvagedEntry*> newest;
  for (const SalvagedEntry& e : entries) {
    auto [it, inserted] = newest.try_emplace(e.user_key, &e);
    if (!inserted && e.sequence > it->second->sequence) it->second = &e;
  }
  std::vector<std::pair<std::string, std::string>> values;
  for (const auto& [key, entry] : newest) {
    if (!entry->deletion) values.emplace_back(key, entry->value);
  }
  return values;
}

}  // namespace manyshot

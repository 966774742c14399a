#include "tests/cache/support/sst_damage.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>

namespace manyshot::testing {
namespace {

std::string ReadWhole(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void FlipBitAt(const std::filesystem::path& file, size_t offset, char original) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  const char flipped = static_cast<char>(original ^ 0x04);
  f.write(&flipped, 1);
}

std::optional<uint64_t> ReadVarint(const std::string& bytes, size_t* at) {
  uint64_t value = 0;
  for (int shift = 0; shift < 64 && *at < bytes.size(); shift += 7) {
    const auto byte = static_cast<unsigned char>(bytes[(*at)++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return value;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::filesystem::path> SstFilesIn(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".sst") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool FlipByteInDataBlockHolding(const std::vector<std::filesystem::path>& files,
                                const std::string& marker) {
  for (const auto& file : files) {
    const std::string bytes = ReadWhole(file);
    const size_t at = bytes.find(marker);
    if (at == std::string::npos) continue;
    const size_t middle = at + marker.size() / 2;
    FlipBitAt(file, middle, bytes[middle]);
    return true;
  }
  return false;
}

bool FlipByteInIndexBlock(const std::filesystem::path& file) {
  // Block-based table footer (format_version >= 1): checksum type (1 byte), metaindex handle and
  // index handle (varint64 offset and size each), padding to 41 bytes, version (4), magic (8).
  constexpr size_t kFooterBytes = 53;
  const std::string bytes = ReadWhole(file);
  if (bytes.size() < kFooterBytes) return false;
  size_t at = bytes.size() - kFooterBytes + 1;
  for (int skip = 0; skip < 2; ++skip) {  // the metaindex handle
    if (!ReadVarint(bytes, &at)) return false;
  }
  const auto offset = ReadVarint(bytes, &at);
  const auto size = ReadVarint(bytes, &at);
  if (!offset || !size || *size == 0 || *offset + *size > bytes.size()) return false;
  const size_t middle = *offset + *size / 2;
  FlipBitAt(file, middle, bytes[middle]);
  return true;
}

}  // namespace manyshot::testing

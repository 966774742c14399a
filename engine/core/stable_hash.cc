#include "engine/core/stable_hash.h"

#include <xxhash.h>

#include "absl/strings/str_format.h"

namespace manyshot {

StableHash::StableHash() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

StableHash::~StableHash() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void StableHash::Update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

void StableHash::Update(std::string_view bytes) { Update(bytes.data(), bytes.size()); }

void StableHash::UpdateFile(std::string_view name, std::string_view contents) {
  Update(name);
  Update(std::string_view("\0", 1));
  unsigned char size[8];
  uint64_t n = contents.size();
  for (unsigned char& b : size) {
    b = static_cast<unsigned char>(n & 0xFF);
    n >>= 8;
  }
  Update(size, sizeof size);
  Update(contents);
}

uint64_t StableHash::value() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

std::string StableHash::Hex() const { return absl::StrFormat("%016x", value()); }

}  // namespace manyshot

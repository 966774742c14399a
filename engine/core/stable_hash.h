// The one hash for everything that is persisted or compared across processes and builds (model and
// tokenizer fingerprints in cache keys): XXH3-64, whose output is fixed by its specification,
// unlike std::hash, which differs between standard libraries and versions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace manyshot {

class StableHash {
 public:
  StableHash();
  ~StableHash();
  StableHash(const StableHash&) = delete;
  StableHash& operator=(const StableHash&) = delete;

  void Update(std::string_view bytes);
  void Update(const void* data, size_t size);
  // Hashes a named file: name, NUL, size (8 bytes little endian), contents; so that moving bytes
  // between files or renaming one changes the result.
  void UpdateFile(std::string_view name, std::string_view contents);
  uint64_t value() const;
  std::string Hex() const;  // 16 lowercase hex digits of value()

 private:
  void* state_;  // XXH3_state_t (kept out of this header: xxhash.h is not everyone's dependency)
};

}  // namespace manyshot

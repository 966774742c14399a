// FNV-1a 64: a stable hash (unlike std::hash) for tokenizer fingerprints in cache keys.
#ifndef MANYSHOT_ENGINE_TOKENIZER_FINGERPRINT_H_
#define MANYSHOT_ENGINE_TOKENIZER_FINGERPRINT_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace manyshot {

class Fnv1a64 {
 public:
  void Update(std::string_view bytes);
  // Hashes a named file: name, NUL, size (8 bytes little endian), contents; so that moving bytes
  // between files or renaming one changes the result.
  void UpdateFile(std::string_view name, std::string_view contents);
  uint64_t value() const { return h_; }
  std::string Hex() const;  // 16 lowercase hex digits

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_FINGERPRINT_H_

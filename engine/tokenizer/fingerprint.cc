#include "engine/tokenizer/fingerprint.h"

#include "absl/strings/str_format.h"

namespace manyshot {

void Fnv1a64::Update(std::string_view bytes) {
  for (char c : bytes) {
    h_ ^= static_cast<uint8_t>(c);
    h_ *= 0x100000001b3ULL;
  }
}

void Fnv1a64::UpdateFile(std::string_view name, std::string_view contents) {
  Update(name);
  Update(std::string_view("\0", 1));
  char size[8];
  uint64_t n = contents.size();
  for (char& b : size) {
    b = static_cast<char>(n & 0xFF);
    n >>= 8;
  }
  Update(std::string_view(size, 8));
  Update(contents);
}

std::string Fnv1a64::Hex() const { return absl::StrFormat("%016x", h_); }

}  // namespace manyshot

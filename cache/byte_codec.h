// Little-endian fixed-width integers and length-prefixed strings: the one encoding every cache
// record (blob headers, task records) uses, so parsing is bounds-checked in one place.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace manyshot::codec {

inline void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline void PutStr(std::string* out, std::string_view s) {
  PutU64(out, s.size());
  out->append(s);
}

// Reads what PutU64/PutStr wrote; every read fails (returns false) instead of reading past the end.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool U64(uint64_t* v) {
    if (bytes_.size() - pos_ < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i) {
      *v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
    }
    pos_ += 8;
    return true;
  }
  bool I64(int64_t* v) {
    uint64_t u;
    if (!U64(&u) || u > static_cast<uint64_t>(INT64_MAX)) return false;
    *v = static_cast<int64_t>(u);
    return true;
  }
  bool Str(std::string* s) {
    uint64_t n;
    if (!U64(&n) || bytes_.size() - pos_ < n) return false;
    s->assign(bytes_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  size_t pos() const { return pos_; }
  bool done() const { return pos_ == bytes_.size(); }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

}  // namespace manyshot::codec

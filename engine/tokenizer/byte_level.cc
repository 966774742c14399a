#include "engine/tokenizer/byte_level.h"

#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<std::string, 256> to_utf8;
  // Inverse of to_cp; -1 for code points that stand for no byte. The image is below 256 + 68.
  std::array<int16_t, 256 + 68> from_cp{};
  Tables() {
    from_cp.fill(-1);
    // Printable Latin-1 bytes map to themselves; the other 68 bytes map to 256, 257, ... in order.
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? b : next++;
      AppendUtf8(to_cp[b], to_utf8[b]);
      from_cp[to_cp[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& GetTables() {
  static const Tables* tables = new Tables();
  return *tables;
}

}  // namespace

uint32_t ByteToCodePoint(uint8_t b) { return GetTables().to_cp[b]; }

const std::string& ByteToUtf8(uint8_t b) { return GetTables().to_utf8[b]; }

std::optional<uint8_t> CodePointToByte(uint32_t cp) {
  const auto& t = GetTables();
  if (cp >= t.from_cp.size() || t.from_cp[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(t.from_cp[cp]);
}

std::string BytesToByteLevel(std::string_view raw) {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += ByteToUtf8(static_cast<uint8_t>(c));
  return out;
}

std::optional<std::string> ByteLevelToBytes(std::string_view token) {
  std::string out;
  size_t pos = 0;
  while (pos < token.size()) {
    if (Utf8SequenceLength(token, pos) == 0) return std::nullopt;
    const auto b = CodePointToByte(DecodeUtf8(token, pos));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
  }
  return out;
}

// "<0xNN>" -> the byte NN; nullopt for any other token.
std::optional<uint8_t> ParseByteToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') {
      value |= c - '0';
    } else if (c >= 'A' && c <= 'F') {
      value |= c - 'A' + 10;
    } else {
      return std::nullopt;
    }
  }
  return static_cast<uint8_t>(value);
}

}  // namespace manyshot

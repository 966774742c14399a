#include "engine/tokenizer/utf8.h"

#include "absl/strings/str_cat.h"

namespace manyshot {
namespace {

// Follows Unicode Table 3-7 (well-formed byte sequences). Returns the length of the valid prefix
// of the sequence at pos (the "maximal subpart") via *consumed when invalid, for lossy decoding.
size_t Check(std::string_view s, size_t pos, size_t* consumed, const char** why) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t b0 = byte(pos);
  *consumed = 1;
  if (b0 < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // below: overlong
    if (b0 == 0xED) hi = 0x9F;  // above: UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // below: overlong
    if (b0 == 0xF4) hi = 0x8F;  // above: beyond U+10FFFF
  } else {
    *why = b0 < 0xC0   ? "unexpected continuation byte"
           : b0 < 0xC2 ? "overlong encoding"
                       : "byte never valid in UTF-8";
    return 0;
  }
  for (size_t i = 1; i < len; ++i) {
    if (pos + i >= s.size()) {
      *why = "truncated sequence";
      *consumed = i;
      return 0;
    }
    const uint8_t b = byte(pos + i);
    const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) {
      *why = (i == 1 && b >= 0x80 && b <= 0xBF)
                 ? (b0 == 0xED ? "surrogate code point" : "overlong or out of range")
                 : "missing continuation byte";
      *consumed = i;
      return 0;
    }
  }
  return len;
}

}  // namespace

absl::Status ValidateUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    // ASCII fast path: eight bytes at a time would be faster still, but this is not the hot spot.
    if (static_cast<uint8_t>(text[pos]) < 0x80) {
      ++pos;
      continue;
    }
    size_t consumed;
    const char* why = "";
    const size_t len = Check(text, pos, &consumed, &why);
    if (len == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid UTF-8 at byte offset ", pos, ": ", why));
    }
    pos += len;
  }
  return absl::OkStatus();
}

size_t Utf8SequenceLength(std::string_view text, size_t pos) {
  size_t consumed;
  const char* why = "";
  return Check(text, pos, &consumed, &why);
}

uint32_t DecodeUtf8(std::string_view text, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(text[i])); };
  const uint32_t b0 = b(pos);
  if (b0 < 0x80) {
    pos += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    const uint32_t cp = ((b0 & 0x1F) << 6) | (b(pos + 1) & 0x3F);
    pos += 2;
    return cp;
  }
  if (b0 < 0xF0) {
    const uint32_t cp = ((b0 & 0x0F) << 12) | ((b(pos + 1) & 0x3F) << 6) | (b(pos + 2) & 0x3F);
    pos += 3;
    return cp;
  }
  const uint32_t cp = ((b0 & 0x07) << 18) | ((b(pos + 1) & 0x3F) << 12) |
                      ((b(pos + 2) & 0x3F) << 6) | (b(pos + 3) & 0x3F);
  pos += 4;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    size_t consumed;
    const char* why = "";
    const size_t len = Check(bytes, pos, &consumed, &why);
    if (len > 0) {
      out.append(bytes.substr(pos, len));
      pos += len;
    } else {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      pos += consumed;
    }
  }
  return out;
}

}  // namespace manyshot

#include "engine/tokenizer/unicode_tables.h"

#include <algorithm>

namespace manyshot {
namespace {

bool InRanges(const unicode_data::CodePointRange* ranges, size_t size, uint32_t cp) {
  // First range whose hi >= cp; cp is inside it iff lo <= cp.
  const auto* end = ranges + size;
  const auto* it = std::lower_bound(
      ranges, end, cp, [](const unicode_data::CodePointRange& r, uint32_t v) { return r.hi < v; });
  return it != end && it->lo <= cp;
}

}  // namespace

bool IsLetter(uint32_t cp) {
  // ASCII fast path: the hot loop of the pre-tokenizer sees mostly ASCII.
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return InRanges(unicode_data::kLetterRanges, unicode_data::kLetterRangesSize, cp);
}

bool IsNumber(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return InRanges(unicode_data::kNumberRanges, unicode_data::kNumberRangesSize, cp);
}

bool IsWhitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace manyshot

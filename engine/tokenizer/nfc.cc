#include "engine/tokenizer/nfc.h"

#include <algorithm>
#include <vector>

#include "engine/tokenizer/utf8.h"

namespace manyshot {
namespace {

// Hangul syllables compose and decompose algorithmically (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount;
constexpr uint32_t kSCount = kLCount * kNCount;

uint8_t Ccc(uint32_t cp) {
  using nfc_data::kCombiningClasses;
  const auto* end = kCombiningClasses + nfc_data::kCombiningClassesSize;
  const auto* it = std::lower_bound(kCombiningClasses, end, cp,
                                    [](const auto& e, uint32_t v) { return e.cp < v; });
  return it != end && it->cp == cp ? it->ccc : 0;
}

void Decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  using nfc_data::kDecompositions;
  const auto* end = kDecompositions + nfc_data::kDecompositionsSize;
  const auto* it = std::lower_bound(kDecompositions, end, cp,
                                    [](const auto& e, uint32_t v) { return e.cp < v; });
  if (it != end && it->cp == cp) {
    out.insert(out.end(), it->to, it->to + it->size);
  } else {
    out.push_back(cp);
  }
}

// The primary composite of (first, second), or 0 when there is none.
uint32_t Compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase &&
      second < kVBase + kVCount) {
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  }
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 &&
      second > kTBase && second < kTBase + kTCount) {
    return first + (second - kTBase);
  }
  using nfc_data::kCompositions;
  const auto* end = kCompositions + nfc_data::kCompositionsSize;
  const auto* it = std::lower_bound(kCompositions, end, std::make_pair(first, second),
                                    [](const auto& e, const std::pair<uint32_t, uint32_t>& v) {
                                      return std::make_pair(e.first, e.second) < v;
                                    });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

std::string NormalizeNfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(),
                  [](char c) { return static_cast<uint8_t>(c) < 0xCC; })) {
    // Lead bytes below 0xCC encode code points below U+0300.
    return std::string(text);
  }
  std::vector<uint32_t> cps;
  size_t pos = 0;
  while (pos < text.size()) Decompose(DecodeUtf8(text, pos), cps);
  // Canonical ordering: stable-sort each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (Ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && Ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i),
                     cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](uint32_t a, uint32_t b) { return Ccc(a) < Ccc(b); });
    i = j;
  }
  // Canonical composition (Unicode 3.11, D117).
  std::vector<uint32_t> out;
  out.reserve(cps.size());
  std::ptrdiff_t starter = -1;  // index in out of the last starter
  int last_ccc = -1;
  for (uint32_t cp : cps) {
    const int ccc = Ccc(cp);
    if (starter >= 0) {
      // Blocked when an intervening character has ccc 0 or >= this one's.
      const bool blocked =
          static_cast<size_t>(starter) + 1 < out.size() && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        if (uint32_t c = Compose(out[static_cast<size_t>(starter)], cp)) {
          out[static_cast<size_t>(starter)] = c;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size());
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  std::string result;
  result.reserve(text.size());
  for (uint32_t cp : out) AppendUtf8(cp, result);
  return result;
}

}  // namespace manyshot

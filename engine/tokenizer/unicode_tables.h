// Unicode character classes that the byte-level pre-tokenizer regexes need (\p{L}, \p{N}, \s).
#ifndef MANYSHOT_ENGINE_TOKENIZER_UNICODE_TABLES_H_
#define MANYSHOT_ENGINE_TOKENIZER_UNICODE_TABLES_H_

#include <cstddef>
#include <cstdint>

namespace manyshot {

namespace unicode_data {
// Inclusive code point range; the generated tables are sorted by lo and do not overlap.
struct CodePointRange {
  uint32_t lo;
  uint32_t hi;
};
extern const CodePointRange kLetterRanges[];
extern const size_t kLetterRangesSize;
extern const CodePointRange kNumberRanges[];
extern const size_t kNumberRangesSize;
}  // namespace unicode_data

// General category L* (Lu, Ll, Lt, Lm, Lo).
bool IsLetter(uint32_t cp);
// General category N* (Nd, Nl, No).
bool IsNumber(uint32_t cp);
// \s as Oniguruma (which Hugging Face tokenizers uses) defines it for Unicode: U+0009..U+000D,
// U+0085, and the categories Zs, Zl, Zp.
bool IsWhitespace(uint32_t cp);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_UNICODE_TABLES_H_

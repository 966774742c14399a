// UTF-8 validation and decoding for the tokenizers.
//
// Encode() rejects invalid UTF-8 instead of replacing it: a tokenizer that silently maps bad
// bytes to U+FFFD changes what the model sees without telling anyone, and the byte offset in the
// error lets a caller find the bad input. "Invalid" is the Unicode definition (Table 3-7):
// stray continuation bytes, truncated sequences, overlong forms, surrogates, > U+10FFFF.
#ifndef MANYSHOT_ENGINE_TOKENIZER_UTF8_H_
#define MANYSHOT_ENGINE_TOKENIZER_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace manyshot {

// OK, or InvalidArgument "invalid UTF-8 at byte offset N: <reason>".
absl::Status ValidateUtf8(std::string_view text);

// Length in bytes of the well-formed sequence starting at text[pos], 0 if it is not well formed.
size_t Utf8SequenceLength(std::string_view text, size_t pos);

// Decodes the code point at text[pos] (which must be valid UTF-8) and advances pos past it.
uint32_t DecodeUtf8(std::string_view text, size_t& pos);

// Appends cp encoded as UTF-8.
void AppendUtf8(uint32_t cp, std::string& out);

// Replaces every maximal ill-formed subsequence with U+FFFD, as Rust's from_utf8_lossy (and so
// Hugging Face's decoders) does, so that decoded text is always valid UTF-8.
std::string Utf8Lossy(std::string_view bytes);

}  // namespace manyshot

#endif  // MANYSHOT_ENGINE_TOKENIZER_UTF8_H_
